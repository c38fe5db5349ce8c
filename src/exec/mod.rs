//! `gateway-leader exec -- COMMAND [ARGS...]`: COMMAND runs only while this replica validly
//! leads, as `consul lock` and `etcdctl lock NAME COMMAND` run theirs.
//!
//! It is started when a leadership begins, with `GATEWAY_LEADER_TERM` and
//! `GATEWAY_LEADER_IDENTITY` in its environment, in a process group of its own; it is sent
//! SIGTERM the moment that leadership ends (or its validity deadline passes unrenewed), then
//! SIGKILL after `--exec-grace`, and started again at the next leadership with `--exec-restart
//! always`. With `never` it runs once and gateway-leader exits with its code. SIGTERM or SIGINT to
//! gateway-leader stops the command first, then releases the lock. docs/exec.md says what this
//! does and does not promise.
//!
//! [`supervise`](supervise::supervise) is the loop, [`child`] one run of the command.

pub mod child;
pub mod supervise;

use std::ffi::OsString;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use leader_lock::readiness::Readiness;
use leader_lock::{clock, Identity, Leadership};
use tokio::sync::watch;
use tracing::{error, info};

use crate::config::{Backend, ExecRestart, ProxyListen, Settings};
use crate::election::Election;
use crate::health::{self, HealthConfig};
use crate::kube_client::KubeClient;
use crate::metrics::Metrics;
use crate::proxy::{self, ElectionLease, Proxy};
use crate::shutdown::ShutdownSignals;
use child::{exit_code, Spec, Stopped};
use supervise::{supervise, Outcome};

/// The exit code of a command that was found but could not be run, as shells give it.
const EXIT_CANNOT_RUN: u8 = 126;
/// The exit code of a command that was not found, as shells give it.
const EXIT_NOT_FOUND: u8 = 127;

/// Checks what `exec` can check before it touches anything: the command can be found and run,
/// and no setting asks for what this build of `exec` cannot do. `Err` is the message of a
/// usage error.
pub fn check(settings: &Settings, command: &[OsString]) -> Result<Spec, String> {
    // The command's kubeconfig points at the proxy, and client-go dials only TCP.
    if let Some(listen @ ProxyListen::Unix(_)) = &settings.proxy_listen {
        return Err(format!(
            "invalid --proxy-listen (GATEWAY_LEADER_PROXY_LISTEN): {listen}: exec hands its \
             command a kubeconfig pointing at the proxy, and Kubernetes clients dial only TCP; \
             accepted here: a loopback IP:PORT such as 127.0.0.1:8001"
        ));
    }
    if let (Some(lease), None) = (&settings.proxy_election_lease, &settings.proxy_listen) {
        return Err(format!(
            "invalid --proxy-election-lease (GATEWAY_LEADER_PROXY_ELECTION_LEASE): {lease}: the \
             proxy answers the command's election, and exec runs no proxy without \
             --proxy-listen; give both, or neither"
        ));
    }
    let Some((program, args)) = command.split_first() else {
        return Err(
            "exec: no command given; usage: gateway-leader exec [OPTIONS] -- COMMAND \
                    [ARGS...]"
                .to_string(),
        );
    };
    find_program(Path::new(program), std::env::var_os("PATH").as_deref())?;
    Ok(Spec {
        program: program.clone(),
        args: args.to_vec(),
        env: Vec::new(),
    })
}

/// Where `program` is: itself when it names a path, else the first executable file of that
/// name on `path`, as `execvp` looks.
fn find_program(program: &Path, path: Option<&std::ffi::OsStr>) -> Result<PathBuf, String> {
    let executable = |p: &Path| {
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    let shown = program.display();
    if program.as_os_str().is_empty() {
        return Err("exec: the command is empty".to_string());
    }
    if program.components().count() > 1 || program.to_string_lossy().contains('/') {
        return if executable(program) {
            Ok(program.to_path_buf())
        } else {
            Err(format!("exec: {shown} is not an executable file"))
        };
    }
    std::env::split_paths(path.unwrap_or_default())
        .map(|dir| dir.join(program))
        .find(|p| executable(p))
        .ok_or_else(|| format!("exec: {shown}: command not found on PATH"))
}

/// Runs `spec` while this replica validly leads, until SIGTERM or SIGINT (or, with
/// `--exec-restart never`, until it ended once). Returns the exit code: 0 after a signal,
/// the command's own with `never` (128 + its signal's number if a signal killed it).
///
/// # Errors
/// When Kubernetes or the lock refuses, as for `run`.
pub async fn exec(settings: Settings, spec: Spec) -> anyhow::Result<u8> {
    info!(
        identity = %settings.identity,
        command = %spec.program.to_string_lossy(),
        restart = ?settings.exec.restart,
        grace = ?settings.exec.grace,
        leader_election = !settings.disabled,
        version = env!("CARGO_PKG_VERSION"),
        "starting gateway-leader exec"
    );
    let mut signals = ShutdownSignals::install()?;
    let identity = Identity::new(&settings.identity);
    // The proxy forwards to the apiserver; without it, only a Lease lock talks to Kubernetes:
    // `exec` can hold an etcd or Redis lock on a machine with no cluster at all.
    let kube = if settings.proxy_listen.is_some()
        || (!settings.disabled && settings.backend == Backend::Kubernetes)
    {
        Some(KubeClient::connect(&settings.kube, &identity).await?)
    } else {
        info!(backend = %settings.backend, "not connecting to Kubernetes: nothing here needs it");
        None
    };
    let metrics = Metrics::new(&settings.lock_name);
    // Nothing to sync: ready as soon as the lock answers.
    let (_ready, ready) = watch::channel(Readiness::Ready);
    let health = HealthConfig::from_settings(&settings, &identity);
    let health = health::Server::start(health, metrics.clone(), ready).await?;
    let started = Election::start(
        &settings,
        &identity,
        kube.as_ref(),
        &metrics,
        &mut signals,
        &health,
    );
    let Some(mut election) = started.await? else {
        return Ok(0);
    };
    let leadership = election.leadership().clone();
    // With --proxy-listen the command's Kubernetes writes go through the write gate too: it gets
    // a KUBECONFIG pointing at the proxy, kept in a directory only this user can read.
    let mut spec = spec;
    let served = match (&settings.proxy_listen, &kube) {
        (Some(listen), Some(kube)) => {
            let metrics = metrics.clone();
            // The command runs only while this replica leads, so it never asks while it
            // follows: its silence must not withdraw the candidacy (no `Candidacy` here).
            let lease = settings.proxy_election_lease.clone().map(|target| {
                metrics.proxy_answers_election(&target.to_string());
                ElectionLease::start(
                    target,
                    leadership.clone(),
                    None,
                    settings.timing.lease_duration,
                    Some(kube.client.clone()),
                )
            });
            match serve_proxy(
                listen,
                kube,
                &leadership,
                &identity,
                metrics,
                lease,
                &mut spec,
            )
            .await
            {
                Ok(served) => Some(served),
                Err(e) => {
                    election.stop().await;
                    health.stop().await;
                    info!(mono_ms = clock::mono_ms(), "replica stopped");
                    return Err(e);
                }
            }
        }
        _ => None,
    };
    let identity = identity.to_string();
    let outcome = supervise(&spec, &identity, settings.exec, &leadership, signals.recv()).await;
    // No command runs any more: only now may the lock go, once the proxy's writes in flight
    // have finished.
    let deadline = match &served {
        Some((proxy, _)) => election.release(proxy.drain()).await,
        None => election.release(async {}).await,
    };
    if let Some((proxy, dir)) = served {
        proxy.stop().await;
        drop(dir);
    }
    election.finish(deadline).await;
    health.stop().await;
    info!(mono_ms = clock::mono_ms(), "replica stopped");
    let code = match outcome {
        Ok(Outcome::Signal(stopped)) => match (settings.exec.restart, stopped) {
            (ExecRestart::Never, Some(stopped)) => stopped_code(stopped),
            _ => 0,
        },
        Ok(Outcome::Ended(stopped)) => stopped_code(stopped),
        Ok(Outcome::ElectorStopped) => anyhow::bail!("the elector stopped by itself"),
        Err(e) => {
            let code = match e.source.kind() {
                std::io::ErrorKind::NotFound => EXIT_NOT_FOUND,
                _ => EXIT_CANNOT_RUN,
            };
            // The message, then its cause.
            let e = anyhow::Error::new(e);
            error!(error = format!("{e:#}"), "the command could not be started");
            eprintln!("gateway-leader: {e:#}");
            code
        }
    };
    Ok(code)
}

/// Serves the write-gating proxy on `listen` and points the command's `KUBECONFIG` at it.
/// Returns the proxy and the directory that holds the kubeconfig (removed when dropped).
async fn serve_proxy(
    listen: &ProxyListen,
    kube: &KubeClient,
    leadership: &Leadership,
    identity: &Identity,
    metrics: Arc<Metrics>,
    lease: Option<Arc<ElectionLease>>,
    spec: &mut Spec,
) -> anyhow::Result<(Proxy, tempfile::TempDir)> {
    use anyhow::Context;
    let upstream = proxy::upstream_client(kube)?;
    let proxy = Proxy::serve(
        listen,
        upstream,
        leadership.clone(),
        identity,
        metrics,
        lease,
    )
    .await?;
    let dir = tempfile::Builder::new()
        .prefix("gateway-leader-exec-")
        .tempdir()
        .context("a directory for the command's kubeconfig")?;
    let path = dir.path().join("kubeconfig");
    proxy::write_kubeconfig(proxy.bound(), &path)?;
    spec.env.push(("KUBECONFIG".into(), path.into_os_string()));
    Ok((proxy, dir))
}

/// The exit code for a command's end.
fn stopped_code(stopped: Stopped) -> u8 {
    match stopped {
        Stopped::Exited(status) => exit_code(status),
        // It was sent SIGKILL and never reaped.
        Stopped::Lost => 128 + 9,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn programs_are_found_as_execvp_finds_them() {
        let path = std::ffi::OsStr::new("/nonexistent:/bin:/usr/bin");
        assert!(find_program(Path::new("sh"), Some(path)).is_ok());
        let e = find_program(Path::new("no-such-command-here"), Some(path)).unwrap_err();
        assert!(
            e.contains("no-such-command-here") && e.contains("not found"),
            "{e}"
        );
        assert!(find_program(Path::new("/bin/sh"), None).is_ok());
        // A path is taken as it is, never searched.
        let e = find_program(Path::new("./sh"), Some(path)).unwrap_err();
        assert!(e.contains("not an executable file"), "{e}");
        // A directory, or a file without an execute bit, is no command.
        let dir = tempfile::tempdir().expect("tempdir");
        assert!(find_program(dir.path(), None).is_err());
        let plain = dir.path().join("plain");
        std::fs::write(&plain, "#!/bin/sh\n").expect("write");
        std::fs::set_permissions(&plain, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        assert!(find_program(&plain, None).is_err());
        assert!(find_program(Path::new(""), Some(path)).is_err());
    }
}
