//! Logging setup.

use tracing_subscriber::EnvFilter;

use crate::config::LogFormat;

/// Installs the global subscriber: `RUST_LOG` wins over the `log-level` setting; logs go to stderr.
pub fn init(format: LogFormat, level: &str) {
    let filter = EnvFilter::try_from_default_env()
        .or_else(|_| EnvFilter::try_new(level))
        .unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
    };
}

/// Checks a log filter before anything starts, so a typo is a startup error, not silence.
pub fn validate_filter(level: &str) -> Result<(), String> {
    EnvFilter::try_new(level).map(|_| ()).map_err(|e| {
        format!(
            "{level:?} is not a log filter ({e}); accepted: e.g. info, debug, gateway_leader=debug"
        )
    })
}
