//! How a setting's key is spelled: `lease_duration` in a file, `--lease-duration` on the command
//! line, `GATEWAY_LEADER_LEASE_DURATION` in the environment. One rule, so the three never drift.

/// The environment prefix of every setting.
pub const ENV_PREFIX: &str = "GATEWAY_LEADER";

/// The flag spelling of a setting key.
pub fn flag(key: &str) -> String {
    format!("--{}", key.replace('_', "-"))
}

/// The environment variable of a setting key.
pub fn env_var(key: &str) -> String {
    format!("{ENV_PREFIX}_{}", key.to_uppercase())
}

/// The term of its leadership, in the environment of `gateway-leader exec`'s command.
pub const EXEC_TERM_ENV: &str = "GATEWAY_LEADER_TERM";

/// This replica's identity (with its incarnation, as the lock records the holder), in the
/// environment of `gateway-leader exec`'s command.
pub const EXEC_IDENTITY_ENV: &str = "GATEWAY_LEADER_IDENTITY";

/// The `GATEWAY_LEADER_*` variables that name no setting and are still no typo: an
/// environment that holds one is accepted, where any other unknown `GATEWAY_LEADER_*` variable
/// is refused at startup. The one list of them; nothing else is exempt but the variables
/// Kubernetes derives from a Service's name (see `env.rs`).
pub const NOT_SETTINGS: &[&str] = &[
    // What `gateway-leader exec` gives its command: a gateway-leader started by that command
    // inherits them.
    EXEC_TERM_ENV,
    EXEC_IDENTITY_ENV,
    // The repository's own test and build tooling (scripts/, testkit, tests/, benches/): a
    // developer's shell or CI exports them while the binary runs.
    "GATEWAY_LEADER_BLESS",
    "GATEWAY_LEADER_CACHE_DIR",
    "GATEWAY_LEADER_CHAOS_SEED",
    "GATEWAY_LEADER_CONFORMANCE",
    "GATEWAY_LEADER_CONTOUR",
    "GATEWAY_LEADER_ENVOY_GATEWAY",
    "GATEWAY_LEADER_ETCD",
    "GATEWAY_LEADER_GATEWAY_API_CRDS",
    "GATEWAY_LEADER_HELM",
    "GATEWAY_LEADER_INTEROP_ROUNDS",
    "GATEWAY_LEADER_INTEROP_SEED",
    "GATEWAY_LEADER_KUBECTL",
    "GATEWAY_LEADER_KUBE_APISERVER",
    "GATEWAY_LEADER_KUBE_CONTROLLER_MANAGER",
    "GATEWAY_LEADER_KUBE_SCHEDULER",
    "GATEWAY_LEADER_KUBE_VERSION",
    "GATEWAY_LEADER_KWOK",
    "GATEWAY_LEADER_PEERS",
    "GATEWAY_LEADER_PROMTOOL",
    "GATEWAY_LEADER_TEST_KUBECONFIG",
];
