//! The apiserver's answers come back as they were: a 503 is the caller's to retry (client-go
//! does), not the proxy's, judged from the apiserver's audit log.

use http::{Request, StatusCode};
use k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::APIService;
use kube::api::{Api, PostParams};
use kube::Client;
use testkit::kube::{KubeApiServer, Options};

use super::{blocking, Proxy, PATIENCE};

/// A group whose `APIService` names a Service that does not exist: the apiserver's aggregator
/// answers every request to it 503, as it does while an extension server is down.
const GROUP: &str = "unavailable.gateway-leader.test";

/// The requests with the audit verb `verb` (`list`, `create`) the apiserver audited for `uri`.
fn audited(server: &KubeApiServer, verb: &str, uri: &str) -> usize {
    server
        .audit_events()
        .expect("the audit log")
        .iter()
        .filter(|e| e["requestURI"] == uri && e["verb"] == verb)
        .count()
}

/// A client on `config` that sends every request once.
fn no_retries(mut config: kube::Config) -> Client {
    config.default_retry = false;
    Client::try_from(config).expect("a client")
}

/// `method path` with `body` through `client`; its status.
async fn status_of(client: &Client, method: &str, path: &str, body: &[u8]) -> StatusCode {
    let req = Request::builder()
        .method(method)
        .uri(path)
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(kube::client::Body::from(body.to_vec()))
        .expect("a request");
    client.send(req).await.expect("an answer").status()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_apiserver_503_reaches_the_caller_once_without_a_retry() {
    let server = KubeApiServer::start_local_with(Options {
        audit: true,
        ..Options::default()
    })
    .await
    .expect("a local kube-apiserver with an audit log (scripts/build-kube-apiserver.sh)");
    let service: APIService = serde_json::from_value(serde_json::json!({
        "apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
        "metadata": {"name": format!("v1.{GROUP}")},
        "spec": {
            "group": GROUP, "version": "v1",
            "service": {"namespace": "default", "name": "nowhere", "port": 443},
            "insecureSkipTLSVerify": true,
            "groupPriorityMinimum": 1000, "versionPriority": 15,
        },
    }))
    .expect("an APIService");
    Api::<APIService>::all(server.admin_client())
        .create(&PostParams::default(), &service)
        .await
        .expect("the APIService is created");
    let list = format!("/apis/{GROUP}/v1/namespaces/default/widgets");
    // Clients that do not retry a 503 themselves, as kube's do by default: each request here
    // is one request to the proxy.
    let direct = no_retries(server.config().clone());
    testkit::process::wait_until(PATIENCE, "the aggregator answers 503", || {
        let (direct, list) = (&direct, &list);
        async move { status_of(direct, "GET", list, b"").await == StatusCode::SERVICE_UNAVAILABLE }
    })
    .await
    .expect("the unavailable group is served 503");

    let dir = tempfile::tempdir().expect("a temporary directory");
    let mut p = blocking(|| {
        Proxy::start(
            &server,
            "answers",
            "default",
            dir.path(),
            &["--leader-election-disable"],
        )
    });
    let through = no_retries(kube::Config::new(
        format!("http://{}", p.addr).parse().expect("a URL"),
    ));
    // A read and a (gated) write, each answered 503 and seen once by the apiserver. kube's
    // default client (its `server_retry` policy) resends a 503 up to 15 times, its waits
    // doubling from 5 ms: the proxy's answer did not come within PATIENCE.
    let widget =
        format!(r#"{{"apiVersion":"{GROUP}/v1","kind":"Widget","metadata":{{"name":"w"}}}}"#);
    for (method, audit_verb, body) in [
        ("GET", "list", &b""[..]),
        ("POST", "create", widget.as_bytes()),
    ] {
        let before = audited(&server, audit_verb, &list);
        assert_eq!(
            tokio::time::timeout(PATIENCE, status_of(&through, method, &list, body))
                .await
                .expect("the proxy answers"),
            StatusCode::SERVICE_UNAVAILABLE,
            "{method} {list} through the proxy"
        );
        // The audit log is written before each response goes out (blocking mode), and a
        // retry would have come before the proxy's answer.
        assert_eq!(
            audited(&server, audit_verb, &list) - before,
            1,
            "{method} {list}: the apiserver did not see it exactly once"
        );
    }
    p.replica.terminate();
    assert_eq!(blocking(|| p.replica.wait_exit(PATIENCE)), Some(0));
}
