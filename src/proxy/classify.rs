//! Which requests the proxy gates: those the apiserver would authorize as a write.
//!
//! The apiserver's `RequestInfoFactory` (k8s.io/apiserver `pkg/endpoints/request/requestinfo.go`)
//! turns a method and a path into a verb; this does the same for the verbs that matter here:
//!
//! - `POST` is `create`, `PUT` `update`, `PATCH` `patch`, `DELETE` on an item `delete` and on a
//!   collection `deletecollection`: gated;
//! - `GET` and `HEAD` are `get`, `list` or `watch` (a `watch` query parameter, or the old
//!   `/watch/` prefix), and pass; so do `GET` and `HEAD` on the paths that name no resource
//!   (discovery, `/version`, `/openapi/*`, `/healthz`);
//! - the connect subresources (pods `exec`, `attach`, `portforward` and `proxy`, services and
//!   nodes `proxy`, and the old `/proxy/` prefix) are gated whatever the method: `kubectl exec`
//!   opens them with a `GET` and an `Upgrade` (SPDY/3.1, or a WebSocket with the
//!   `v5.channel.k8s.io` subprotocols), and the leader forwards the upgraded stream only while
//!   it validly leads in the term it took the permit in (`super::upgrade`);
//! - anything else fails closed: another method, an `Upgrade` anywhere else, a path with an
//!   empty, `.` or `..` segment or an escape (`%`), which the apiserver could read as another
//!   path.

use http::{HeaderMap, Method};

/// The verb the apiserver's authorizer would see, as far as the proxy needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verb {
    /// `get` (an item, or a path that names no resource).
    Get,
    /// `list` (a collection).
    List,
    /// `watch`.
    Watch,
    /// `create` (`POST`).
    Create,
    /// `update` (`PUT`).
    Update,
    /// `patch` (`PATCH`).
    Patch,
    /// `delete` (`DELETE` on an item).
    Delete,
    /// `deletecollection` (`DELETE` on a collection).
    DeleteCollection,
    /// A connect subresource (exec, attach, port-forward, proxy), whatever the method.
    Connect,
    /// Not known: another method, an `Upgrade`, a path the proxy does not read as the apiserver
    /// would. Gated.
    Unknown,
}

impl Verb {
    /// Every verb.
    pub const ALL: [Verb; 10] = [
        Verb::Get,
        Verb::List,
        Verb::Watch,
        Verb::Create,
        Verb::Update,
        Verb::Patch,
        Verb::Delete,
        Verb::DeleteCollection,
        Verb::Connect,
        Verb::Unknown,
    ];

    /// Whether requests of this verb take a permit: everything but reads.
    pub fn gated(self) -> bool {
        !matches!(self, Verb::Get | Verb::List | Verb::Watch)
    }

    /// The verb's name, as the apiserver spells it (`connect` and `unknown` are ours).
    pub fn as_str(self) -> &'static str {
        match self {
            Verb::Get => "get",
            Verb::List => "list",
            Verb::Watch => "watch",
            Verb::Create => "create",
            Verb::Update => "update",
            Verb::Patch => "patch",
            Verb::Delete => "delete",
            Verb::DeleteCollection => "deletecollection",
            Verb::Connect => "connect",
            Verb::Unknown => "unknown",
        }
    }
}

/// The subresources the apiserver serves with a connection (`rest.Connecter`), by resource.
const CONNECT: &[(&str, &str)] = &[
    ("pods", "exec"),
    ("pods", "attach"),
    ("pods", "portforward"),
    ("pods", "proxy"),
    ("services", "proxy"),
    ("nodes", "proxy"),
];

/// The subresources of a namespace, which the apiserver does not read as resources in it.
const NAMESPACE_SUBRESOURCES: &[&str] = &["status", "finalize"];

/// The verb of a request with this method, path and query, and headers.
pub fn classify(method: &Method, path: &str, query: Option<&str>, headers: &HeaderMap) -> Verb {
    let verb = by_path(method, path, query);
    // An upgraded connection is a stream in both directions: the connect subresources open one
    // (gated, and the stream fenced while it is open); anything else asking for one is odd.
    if headers.contains_key(http::header::UPGRADE) && verb != Verb::Connect {
        return Verb::Unknown;
    }
    verb
}

/// The verb of a request with this method, path and query, its headers aside.
fn by_path(method: &Method, path: &str, query: Option<&str>) -> Verb {
    let Some(segments) = segments(path) else {
        return Verb::Unknown;
    };
    let resource = match segments.as_slice() {
        ["api", _version, rest @ ..] => rest,
        ["apis", _group, _version, rest @ ..] => rest,
        // Discovery (`/api`, `/apis`, `/apis/GROUP`) and the paths that name no resource.
        _ => return non_resource(method),
    };
    let (watch_prefix, resource) = match resource {
        ["watch", rest @ ..] => (true, rest),
        ["proxy", ..] => return Verb::Connect,
        _ => (false, resource),
    };
    // `namespaces/NS/RESOURCE...`; `namespaces`, `namespaces/NAME` and its subresources
    // (`status`, `finalize`) are the namespace objects themselves.
    let resource = match resource {
        ["namespaces", _ns, first, ..] if NAMESPACE_SUBRESOURCES.contains(first) => resource,
        ["namespaces", _ns, rest @ ..] if !rest.is_empty() => rest,
        _ => resource,
    };
    let (kind, name, sub) = match resource {
        [] => return non_resource(method),
        [kind] => (*kind, None, None),
        [kind, name] => (*kind, Some(*name), None),
        [kind, name, sub, ..] => (*kind, Some(*name), Some(*sub)),
    };
    if let Some(sub) = sub {
        if CONNECT.contains(&(kind, sub)) {
            return Verb::Connect;
        }
    }
    let collection = name.is_none();
    match *method {
        Method::GET | Method::HEAD => {
            if watch_prefix || watch_param(query) {
                Verb::Watch
            } else if collection {
                Verb::List
            } else {
                Verb::Get
            }
        }
        Method::POST => Verb::Create,
        Method::PUT => Verb::Update,
        Method::PATCH => Verb::Patch,
        Method::DELETE if collection => Verb::DeleteCollection,
        Method::DELETE => Verb::Delete,
        _ => Verb::Unknown,
    }
}

/// A path's segments, or `None` for one the apiserver might read otherwise than we do.
fn segments(path: &str) -> Option<Vec<&str>> {
    let rest = path.strip_prefix('/')?;
    // A trailing slash is the same path to the apiserver's router.
    let rest = rest.strip_suffix('/').unwrap_or(rest);
    if rest.is_empty() {
        return Some(Vec::new());
    }
    if rest.contains('%') {
        return None;
    }
    let segments: Vec<&str> = rest.split('/').collect();
    if segments
        .iter()
        .any(|s| s.is_empty() || *s == "." || *s == "..")
    {
        return None;
    }
    Some(segments)
}

/// A path that names no resource: reads pass, anything else is a write to something unknown.
fn non_resource(method: &Method) -> Verb {
    match *method {
        Method::GET | Method::HEAD => Verb::Get,
        _ => Verb::Unknown,
    }
}

/// Whether the query asks for a watch, as the apiserver reads `watch` (a boolean, `1` too).
fn watch_param(query: Option<&str>) -> bool {
    query.is_some_and(|q| {
        q.split('&').any(|kv| {
            let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
            k == "watch" && matches!(v, "1" | "t" | "T" | "true" | "TRUE" | "True")
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn verb(method: &str, target: &str, upgrade: bool) -> Verb {
        let method = Method::from_bytes(method.as_bytes()).expect("a method");
        let (path, query) = match target.split_once('?') {
            Some((p, q)) => (p, Some(q)),
            None => (target, None),
        };
        let mut headers = HeaderMap::new();
        if upgrade {
            headers.insert(
                http::header::UPGRADE,
                http::HeaderValue::from_static("SPDY/3.1"),
            );
        }
        classify(&method, path, query, &headers)
    }

    #[test]
    fn requests_get_the_verb_the_apiserver_s_authorizer_would_give_them() {
        use Verb::*;
        let table: &[(&str, &str, Verb)] = &[
            // Reads of resources.
            ("GET", "/api/v1/namespaces/a/configmaps/b", Get),
            ("HEAD", "/api/v1/namespaces/a/configmaps/b", Get),
            ("GET", "/api/v1/namespaces/a/configmaps", List),
            ("GET", "/api/v1/namespaces/a/configmaps/", List),
            ("GET", "/api/v1/configmaps?limit=500", List),
            ("GET", "/api/v1/namespaces/a/configmaps?watch=true", Watch),
            ("GET", "/api/v1/namespaces/a/configmaps?watch=1&rv=5", Watch),
            ("GET", "/api/v1/configmaps?watch=false", List),
            (
                "GET",
                "/api/v1/configmaps?watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan",
                Watch,
            ),
            ("GET", "/api/v1/watch/namespaces/a/configmaps", Watch),
            ("GET", "/api/v1/namespaces", List),
            ("GET", "/api/v1/namespaces/a", Get),
            ("GET", "/api/v1/namespaces/a/status", Get),
            ("GET", "/apis/gateway.networking.k8s.io/v1/gateways", List),
            ("GET", "/apis/apps/v1/namespaces/a/deployments/d/scale", Get),
            ("GET", "/api/v1/namespaces/a/pods/p/log", Get),
            // Discovery and the paths that name no resource.
            ("GET", "/api", Get),
            ("GET", "/api/v1", Get),
            ("GET", "/apis", Get),
            ("GET", "/apis/apps", Get),
            ("GET", "/apis/apps/v1", Get),
            ("GET", "/version", Get),
            ("GET", "/openapi/v3/apis/apps/v1?hash=abc", Get),
            ("GET", "/openapi/v2", Get),
            ("GET", "/healthz", Get),
            ("GET", "/readyz?verbose", Get),
            ("GET", "/", Get),
            // Writes.
            ("POST", "/api/v1/namespaces/a/configmaps", Create),
            ("POST", "/api/v1/namespaces", Create),
            ("PUT", "/api/v1/namespaces/a/configmaps/b", Update),
            ("PUT", "/apis/gateway.networking.k8s.io/v1/namespaces/a/gateways/g/status", Update),
            ("PATCH", "/api/v1/namespaces/a/configmaps/b", Patch),
            ("PATCH", "/api/v1/namespaces/a", Patch),
            ("PUT", "/api/v1/namespaces/a/finalize", Update),
            ("DELETE", "/api/v1/namespaces/a/configmaps/b", Delete),
            ("DELETE", "/api/v1/namespaces/a", Delete),
            ("DELETE", "/api/v1/namespaces/a/configmaps", DeleteCollection),
            ("DELETE", "/api/v1/namespaces", DeleteCollection),
            ("POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", Create),
            // Connect subresources, whatever the method.
            ("GET", "/api/v1/namespaces/a/pods/p/exec?command=sh", Connect),
            ("POST", "/api/v1/namespaces/a/pods/p/exec", Connect),
            ("GET", "/api/v1/namespaces/a/pods/p/attach", Connect),
            ("GET", "/api/v1/namespaces/a/pods/p/portforward", Connect),
            ("GET", "/api/v1/namespaces/a/pods/p/proxy/metrics", Connect),
            ("GET", "/api/v1/namespaces/a/services/s/proxy", Connect),
            ("DELETE", "/api/v1/namespaces/a/services/s:80/proxy/x", Connect),
            ("GET", "/api/v1/nodes/n/proxy/stats", Connect),
            ("GET", "/api/v1/proxy/namespaces/a/pods/p", Connect),
            // Unknown: fails closed.
            ("OPTIONS", "/api/v1/namespaces/a/configmaps", Unknown),
            ("CONNECT", "/api/v1/namespaces/a/configmaps", Unknown),
            ("TRACE", "/api", Unknown),
            ("POST", "/version", Unknown),
            ("DELETE", "/healthz", Unknown),
            ("GET", "/api/v1/namespaces/a/pods/p%2Fexec", Unknown),
            ("GET", "/api/v1/namespaces/a/pods/p/%65xec", Unknown),
            ("GET", "/api/v1/namespaces/a/pods//p/exec", Unknown),
            ("GET", "/api/v1/namespaces/a/pods/p/../p/exec", Unknown),
            ("GET", "/api/v1/namespaces/a/./pods", Unknown),
            ("GET", "relative/path", Unknown),
        ];
        for (method, target, want) in table {
            assert_eq!(verb(method, target, false), *want, "{method} {target}");
            assert_eq!(want.gated(), !matches!(want, Get | List | Watch));
        }
    }

    #[test]
    fn an_upgrade_is_gated_wherever_it_goes() {
        for (target, want) in [
            ("/api/v1/namespaces/a/pods/p/exec?command=sh", Verb::Connect),
            ("/api/v1/namespaces/a/pods/p/portforward", Verb::Connect),
            ("/api/v1/namespaces/a/services/s:80/proxy/ws", Verb::Connect),
            ("/api/v1/namespaces/a/configmaps?watch=true", Verb::Unknown),
            ("/api/v1/namespaces/a/pods/p/log", Verb::Unknown),
            ("/version", Verb::Unknown),
        ] {
            let v = verb("GET", target, true);
            assert_eq!(v, want, "{target}");
            assert!(v.gated(), "{target}: {v:?}");
        }
    }
}
