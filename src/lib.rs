//! gateway-leader: leader election for Gateway API controllers, so that only one replica writes
//! statuses. See the README for the settings and `docs/` for each backend.

// A replica without any lock cannot be elected: say so, rather than fail on the code that picks
// the lock.
#[cfg(not(any(feature = "kubernetes", feature = "etcd", feature = "redis")))]
compile_error!(
    "gateway-leader needs at least one lock backend feature: kubernetes, etcd or redis \
     (`--features kubernetes` with `--no-default-features`)"
);

pub mod backend;
pub mod cli;
pub mod config;
pub mod election;
pub mod exec;
pub mod fencing;
pub mod health;
pub mod kube_client;
pub mod metrics;
pub mod program;
pub mod proxy;
pub mod run;
pub mod shutdown;
pub mod status;
pub mod telemetry;
mod validity;

use std::ffi::OsString;
use std::process::ExitCode;

use clap::Parser;

use crate::cli::{Cli, Command, RunArgs};
use crate::config::{ConfigError, Env, Layers, Settings};
use crate::program::{hostname, EXIT_USAGE};

/// Loads and validates the settings of `run` from flags, the environment (as
/// `std::env::vars_os` gives it) and the config file.
pub fn load_settings(
    args: &RunArgs,
    vars: impl IntoIterator<Item = (OsString, OsString)>,
) -> Result<(Layers, Settings), ConfigError> {
    let env = Env::from_os(vars)?;
    let layers = Layers::load(args.config.as_deref(), env, &args.overrides())?;
    let settings = layers.settings(hostname)?;
    backend::validate(&settings)?;
    Ok((layers, settings))
}

/// How many worker threads a subcommand's runtime has unless `--worker-threads` says.
#[derive(Debug, Clone, Copy)]
enum Threads {
    /// One per core: `run`, whose status computation can use them.
    PerCore,
    /// One: `proxy`, `exec` and `status`, which forward bytes or read, and wait. Each proxied request wakes several
    /// tasks (the client's connection, the apiserver's, the response's body); on one thread a
    /// wake is a queue push, across threads a futex and a context switch, which costs more CPU
    /// per proxied write than a second thread gains (docs/benchmarks.md, "Where a proxied
    /// write's time goes, and one worker thread").
    One,
}

impl Threads {
    /// The worker threads to start: `configured` (`--worker-threads`) when given, else this
    /// subcommand's own count.
    fn count(self, configured: Option<usize>) -> usize {
        configured.unwrap_or(match self {
            Threads::PerCore => std::thread::available_parallelism().map_or(1, |n| n.get()),
            Threads::One => 1,
        })
    }
}

/// Loads the settings for a subcommand, prints them and stops for `--print-config`, and starts
/// the logs and the runtime: `Err` is the exit code of a stop before anything was touched.
fn prepare(
    args: &RunArgs,
    threads: Threads,
) -> Result<(Settings, tokio::runtime::Runtime), ExitCode> {
    prepare_with(args, threads, false)
}

/// [`prepare`]; `quiet` (`status`, a command whose output is what it prints) logs warnings only
/// while the log level is the default, `info`: a person reading the block wants no lines about
/// loading a kubeconfig.
fn prepare_with(
    args: &RunArgs,
    threads: Threads,
    quiet: bool,
) -> Result<(Settings, tokio::runtime::Runtime), ExitCode> {
    let (layers, settings) = match load_settings(args, std::env::vars_os()) {
        Ok(x) => x,
        Err(e) => {
            eprintln!("gateway-leader: {e}");
            return Err(ExitCode::from(EXIT_USAGE));
        }
    };
    if args.print_config {
        print!("{}", layers.render());
        return Err(ExitCode::SUCCESS);
    }
    let level = if quiet && settings.log_level == "info" {
        "warn"
    } else {
        &settings.log_level
    };
    telemetry::init(settings.log_format, level);
    // Always given, so tokio never reads `TOKIO_WORKER_THREADS`, which it panics on when it is
    // not a number: `--worker-threads` is the setting, checked with the others.
    let workers = threads.count(settings.worker_threads);
    match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_all()
        .build()
    {
        Ok(rt) => Ok((settings, rt)),
        Err(e) => {
            eprintln!("gateway-leader: cannot start the runtime: {e}");
            Err(ExitCode::FAILURE)
        }
    }
}

/// The exit code of a subcommand that ran: 0 for a clean stop, 1 (logged) for a failure.
fn outcome(result: anyhow::Result<()>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = format!("{e:#}"), "gateway-leader failed");
            eprintln!("gateway-leader: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// The whole program: parse, validate, run. Returns the process exit code.
pub fn main_with_args(args: impl IntoIterator<Item = std::ffi::OsString>) -> ExitCode {
    let cli = match Cli::try_parse_from(args) {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(EXIT_USAGE));
        }
    };
    match cli.command {
        Command::FencingPolicy(args) => fencing::main(&args),
        Command::Run(args) => match prepare(&args, Threads::PerCore) {
            Ok((settings, rt)) => outcome(rt.block_on(run::run(settings))),
            Err(code) => code,
        },
        Command::Exec(args) => match prepare(&args.run, Threads::One) {
            Ok((settings, rt)) => match exec::check(&settings, &args.command) {
                // With `--exec-restart never` the code is the command's own.
                Ok(spec) => match rt.block_on(exec::exec(settings, spec)) {
                    Ok(code) => ExitCode::from(code),
                    Err(e) => outcome(Err(e)),
                },
                Err(message) => {
                    eprintln!("gateway-leader: {message}");
                    ExitCode::from(EXIT_USAGE)
                }
            },
            Err(code) => code,
        },
        Command::Status(args) => match prepare_with(&args.run, Threads::One, true) {
            Ok((settings, rt)) => match status::check(&settings) {
                Ok(()) => rt.block_on(status::status(settings, args.output, args.watch)),
                Err(message) => {
                    eprintln!("gateway-leader: {message}");
                    ExitCode::from(EXIT_USAGE)
                }
            },
            Err(code) => code,
        },
        Command::Proxy(args) => match prepare(&args, Threads::One) {
            Ok((settings, rt)) => outcome(rt.block_on(proxy::run(settings))),
            Err(code) => code,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::Threads;

    #[test]
    fn proxy_and_exec_get_one_worker_run_one_per_core_and_the_setting_wins() {
        assert_eq!(Threads::One.count(None), 1);
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        assert_eq!(Threads::PerCore.count(None), cores);
        assert_eq!(Threads::One.count(Some(3)), 3);
        assert_eq!(Threads::PerCore.count(Some(1)), 1);
    }
}
