//! Settings from flags, `GATEWAY_LEADER_*` environment variables and a TOML or YAML file.
//!
//! Precedence: flag > environment > file > default. Everything is validated here, before any
//! backend is touched, and every error names the setting and what it accepts.
//!
//! One concept per file: `settings` declares every setting once (flag, environment variable,
//! file key, default, check, help) and generates [`RunArgs`] from it, `names` spells its flag and
//! environment variable, `layers` merges the sources and validates them into [`Settings`]
//! (`effective`) with the single-value checks of `checks`, `file` reads the `--config` file, `env`
//! the process environment, `kubeconfig` checks the kubeconfig, `secret` keeps secrets out of
//! output, `error` names what was refused, and [`reference`](mod@reference) generates the settings
//! table of docs/configuration.md.

mod checks;
mod effective;
mod env;
mod error;
mod file;
mod kubeconfig;
mod layers;
mod names;
pub mod reference;
mod secret;
mod settings;

pub use checks::{
    check_identity, parse_duration, validate_controller_name, validate_dns_label,
    validate_dns_subdomain, validate_filter, IDENTITY_CHARS, MAX_EXEC_GRACE, MAX_IDENTITY_BYTES,
};
pub use effective::{
    Backend, EtcdSettings, ExecRestart, ExecSettings, KubeSettings, LeaseName, LogFormat,
    ProxyListen, RedisSettings, Settings, Wakeup,
};
pub use env::{Env, POD_NAME, POD_NAMESPACE};
pub use error::ConfigError;
pub use layers::Layers;
pub use names::{env_var, flag, ENV_PREFIX, EXEC_IDENTITY_ENV, EXEC_TERM_ENV, NOT_SETTINGS};
pub use secret::Secret;
pub use settings::{
    Form, RunArgs, SettingSpec, CONFIG_KEY, DEFAULT_CONTROLLER_NAME, DEFAULT_HEALTH_ADDR,
    DEFAULT_LOCK_NAME, SETTINGS,
};
