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
