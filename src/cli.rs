//! The command line: `gateway-leader run`, `proxy` and their flags.

use clap::{Parser, Subcommand};

/// The flags of `gateway-leader run`, generated from each setting's one definition in
/// `config/settings.rs`.
pub use crate::config::RunArgs;

/// Leader election for Gateway API controllers: only the leader writes statuses.
#[derive(Debug, Parser)]
#[command(name = "gateway-leader", version, about, long_about = None)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the elector (and, as leader, the status writer) until SIGTERM or Ctrl-C.
    Run(Box<RunArgs>),
    /// Elect as `run` does and serve a Kubernetes API proxy (`--proxy-listen`) that forwards
    /// reads on every replica and writes only while this replica validly leads.
    Proxy(Box<RunArgs>),
}
