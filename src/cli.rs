//! The command line: `gateway-leader run`, `proxy`, `exec`, `status`, `fencing-policy` and their
//! flags.

use std::ffi::OsString;

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
    /// Run COMMAND only while this replica validly leads.
    ///
    /// COMMAND is started when a leadership begins, sent SIGTERM when it ends (SIGKILL after
    /// --exec-grace) and started again at the next one (--exec-restart). SIGTERM or Ctrl-C stops
    /// it before the lock is released.
    #[command(override_usage = "gateway-leader exec [OPTIONS] -- <COMMAND>...")]
    Exec(Box<ExecArgs>),
    /// Print the server-side fence (a ValidatingAdmissionPolicy and its binding) for a
    /// controller's Lease: only the pod that holds it may write the fenced resources.
    FencingPolicy(crate::fencing::FencingPolicyArgs),
    /// Elect as `run` does and serve a Kubernetes API proxy (`--proxy-listen`) that forwards
    /// reads on every replica and writes only while this replica validly leads.
    Proxy(Box<RunArgs>),
    /// Read the configured lock (the same settings as `run`) and print who holds it, the term,
    /// since when, when its record expires by the lock's view, and its history.
    ///
    /// Exit codes: 0 held, 3 free, 4 vanished (its record is gone without a release and may not
    /// be taken yet), 5 unreachable (no answer within --renew-deadline), 1 another failure
    /// (credentials refused, a record not ours), 2 bad settings (before the lock is touched).
    /// With --watch, 0 on SIGTERM or Ctrl-C.
    Status(Box<crate::status::StatusArgs>),
}

/// The arguments of `gateway-leader exec`: `run`'s settings, then the command after `--`.
#[derive(Debug, clap::Args)]
pub struct ExecArgs {
    /// The settings, as for `run`.
    #[command(flatten)]
    pub run: RunArgs,
    /// The command to run while leading, and its arguments, after `--`. It gets
    /// GATEWAY_LEADER_TERM and GATEWAY_LEADER_IDENTITY in its environment.
    #[arg(
        value_name = "COMMAND",
        last = true,
        required_unless_present = "print_config",
        num_args = 1..,
        allow_hyphen_values = true
    )]
    pub command: Vec<OsString>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from([&["gateway-leader"], args].concat())
    }

    #[test]
    fn exec_takes_the_settings_then_the_command_after_the_separator() {
        let cli = parse(&[
            "exec",
            "--exec-restart",
            "never",
            "--",
            "sh",
            "-c",
            "exit 3",
        ])
        .expect("parses");
        let Command::Exec(args) = cli.command else {
            panic!("not exec")
        };
        assert_eq!(args.run.exec_restart.as_deref(), Some("never"));
        assert_eq!(args.command, ["sh", "-c", "exit 3"].map(OsString::from));
    }

    #[test]
    fn status_takes_the_settings_an_output_format_and_watch() {
        let cli =
            parse(&["status", "--lock-backend", "redis", "-o", "json", "--watch"]).expect("parses");
        let Command::Status(args) = cli.command else {
            panic!("not status")
        };
        assert_eq!(args.run.lock_backend.as_deref(), Some("redis"));
        assert_eq!(args.output, crate::status::Output::Json);
        assert!(args.watch);
        let cli = parse(&["status"]).expect("parses");
        let Command::Status(args) = cli.command else {
            panic!("not status")
        };
        assert_eq!(
            (args.output, args.watch),
            (crate::status::Output::Text, false)
        );
        let e = parse(&["status", "--output", "yaml"]).expect_err("no such format");
        assert_eq!(e.exit_code(), 2, "{e}");
    }

    #[test]
    fn exec_without_a_command_is_a_usage_error() {
        for args in [
            &["exec"][..],
            &["exec", "--exec-grace", "1s"],
            &["exec", "--"],
        ] {
            let e = parse(args).expect_err("no command");
            assert_eq!(e.exit_code(), 2, "{args:?}: {e}");
        }
        // Without `--`, a word is no command: the separator keeps the child's flags apart.
        assert!(parse(&["exec", "sh"]).is_err());
        // Printing the settings runs nothing, so it needs no command.
        assert!(parse(&["exec", "--print-config"]).is_ok());
    }
}
