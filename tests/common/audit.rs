//! What a test apiserver's audit log says about who sent what: the judge of the real-controller
//! tests (tests/contour/, tests/envoy_gateway/), one service account per replica.

use serde_json::Value;
use testkit::kube::KubeApiServer;

/// One request the apiserver answered, from its audit log.
#[derive(Debug, Clone)]
pub struct Request {
    /// Who sent it (`system:serviceaccount:NS:NAME`).
    pub user: String,
    /// `get`, `update`, `patch`, ...
    pub verb: String,
    /// `resource/name`.
    pub what: String,
    /// The answer's status code.
    pub code: i64,
}

/// The requests the apiserver answered (`ResponseComplete`) that `pick` accepts, oldest first.
pub fn audited(server: &KubeApiServer, pick: impl Fn(&Value) -> bool) -> Vec<Request> {
    server
        .audit_events()
        .expect("the audit log")
        .iter()
        .filter(|e| e["stage"] == "ResponseComplete" && pick(e))
        .map(|e| Request {
            user: e["user"]["username"].as_str().unwrap_or_default().into(),
            verb: e["verb"].as_str().unwrap_or_default().into(),
            what: format!(
                "{}/{}",
                e["objectRef"]["resource"].as_str().unwrap_or_default(),
                e["objectRef"]["name"].as_str().unwrap_or_default()
            ),
            code: e["responseStatus"]["code"].as_i64().unwrap_or_default(),
        })
        .collect()
}
