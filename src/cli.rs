//! The command line: `gateway-leader run` and its flags.

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
    /// Print the server-side fence (a ValidatingAdmissionPolicy and its binding) for a
    /// controller's Lease: only the pod that holds it may write the fenced resources.
    FencingPolicy(crate::fencing::FencingPolicyArgs),
}
