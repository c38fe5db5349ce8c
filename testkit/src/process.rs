//! Throwaway server processes: free loopback ports, temporary dirs, logs kept on failure.

use std::fs::File;
use std::future::Future;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use tempfile::TempDir;

/// A free TCP port on 127.0.0.1 (bound and released, so another process may race for it).
pub fn free_port() -> Result<u16> {
    let l = TcpListener::bind("127.0.0.1:0").context("binding a free loopback port")?;
    Ok(l.local_addr()?.port())
}

/// Finds `binary` on PATH or in `extra` dirs; fails with an install hint otherwise.
pub fn require_binary(binary: &str, extra: &[&str], install_hint: &str) -> Result<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let dirs = std::env::split_paths(&path).chain(extra.iter().map(PathBuf::from));
    for dir in dirs {
        let candidate = dir.join(binary);
        if candidate.is_file() {
            return Ok(candidate);
        }
    }
    bail!(
        "`{binary}` not found on PATH: {install_hint} (or run scripts/test.sh, which installs it)"
    )
}

/// Polls `probe` until it returns true or `limit` passes; fails with `what` and the server's log.
pub async fn wait_until<F, Fut>(limit: Duration, what: &str, mut probe: F) -> Result<()>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + limit;
    while tokio::time::Instant::now() < deadline {
        if probe().await {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Err(anyhow!("{what} was not ready within {limit:?}"))
}

/// A child server with its own temporary dir and log file; killed on drop.
///
/// When the test panics, the dir is kept and the log's tail printed so the failure can be read.
pub struct ServerProcess {
    name: String,
    child: Option<Child>,
    dir: Option<TempDir>,
    log: PathBuf,
}

impl ServerProcess {
    /// A new temporary dir for a server named `name` (its data dir, certs and log live there).
    pub fn temp_dir(name: &str) -> Result<TempDir> {
        tempfile::Builder::new()
            .prefix(&format!("gateway-leader-{name}-"))
            .tempdir()
            .context("creating a temporary dir")
    }

    /// Spawns `cmd` with stdout and stderr going to `<dir>/<name>.log`.
    pub fn spawn(name: &str, mut cmd: Command, dir: TempDir) -> Result<Self> {
        let log = dir.path().join(format!("{name}.log"));
        let out = File::create(&log).context("creating the server log")?;
        let err = out.try_clone()?;
        cmd.stdin(Stdio::null()).stdout(out).stderr(err);
        let child = cmd
            .spawn()
            .with_context(|| format!("starting {name}: {cmd:?}"))?;
        Ok(ServerProcess {
            name: name.to_string(),
            child: Some(child),
            dir: Some(dir),
            log,
        })
    }

    /// The server's temporary dir.
    pub fn dir(&self) -> &Path {
        self.dir
            .as_ref()
            .map(|d| d.path())
            .unwrap_or_else(|| Path::new("/nonexistent"))
    }

    /// The process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Fails with the log's tail when the process has exited.
    pub fn ensure_running(&mut self) -> Result<()> {
        if let Some(c) = self.child.as_mut() {
            if let Some(status) = c.try_wait()? {
                bail!(
                    "{} exited with {status}; log tail:\n{}",
                    self.name,
                    tail(&self.log(), 40)
                );
            }
        }
        Ok(())
    }

    fn signal(&self, sig: Signal) -> Result<()> {
        let pid = self
            .pid()
            .ok_or_else(|| anyhow!("{} is not running", self.name))?;
        let pid = i32::try_from(pid).context("pid out of range")?;
        kill(Pid::from_raw(pid), sig).with_context(|| format!("sending {sig} to {}", self.name))
    }

    /// Freezes the process (SIGSTOP), as a paused VM or a long GC would.
    pub fn pause(&self) -> Result<()> {
        self.signal(Signal::SIGSTOP)
    }

    /// Thaws a paused process (SIGCONT).
    pub fn resume(&self) -> Result<()> {
        self.signal(Signal::SIGCONT)
    }

    /// Sends SIGTERM and waits up to `limit` for the process to exit.
    pub async fn terminate(&mut self, limit: Duration) -> Result<()> {
        self.signal(Signal::SIGTERM)?;
        let deadline = tokio::time::Instant::now() + limit;
        while let Some(c) = self.child.as_mut() {
            if c.try_wait()?.is_some() {
                self.child = None;
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                bail!("{} did not exit within {limit:?} of SIGTERM", self.name);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(())
    }

    /// Kills the process (SIGKILL) and reaps it; the dir stays for a restart.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts a new process in the same dir (after [`kill`](Self::kill)), appending to the log.
    pub fn restart(&mut self, mut cmd: Command) -> Result<()> {
        self.kill();
        let out = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(&self.log)?;
        let err = out.try_clone()?;
        cmd.stdin(Stdio::null()).stdout(out).stderr(err);
        self.child = Some(
            cmd.spawn()
                .with_context(|| format!("restarting {}: {cmd:?}", self.name))?,
        );
        Ok(())
    }
}

/// The last `n` lines of `s`.
pub fn tail(s: &str, n: usize) -> String {
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        if let Some(c) = self.child.as_ref() {
            // A paused process ignores SIGKILL until thawed on some kernels' job control; thaw
            // first.
            if let Ok(pid) = i32::try_from(c.id()) {
                let _ = kill(Pid::from_raw(pid), Signal::SIGCONT);
            }
        }
        self.kill();
        if std::thread::panicking() {
            if let Some(dir) = self.dir.take() {
                let kept = dir.keep();
                eprintln!(
                    "--- {} log kept in {} ; tail:\n{}",
                    self.name,
                    kept.display(),
                    tail(&std::fs::read_to_string(&self.log).unwrap_or_default(), 30)
                );
            }
        }
    }
}

/// CPU seconds (user + system) a process used so far, from /proc/PID/stat.
pub fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name, which is in parentheses and may hold spaces.
    let rest = stat.rsplit_once(')')?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?;
    // USER_HZ is 100 on every Linux architecture the kernel exports to user space.
    Some(ticks / 100.0)
}

/// Resident memory of a process in MiB, from /proc/PID/status.
pub fn rss_mib(pid: u32) -> Option<f64> {
    status_mib(pid, "VmRSS:")
}

/// The most resident memory a process has held since it started, in MiB (the kernel's high
/// water mark, `VmHWM` in /proc/PID/status): a peak no sampling can miss.
pub fn peak_rss_mib(pid: u32) -> Option<f64> {
    status_mib(pid, "VmHWM:")
}

/// A `field` of /proc/PID/status that the kernel gives in kB, in MiB.
fn status_mib(pid: u32, field: &str) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kb: f64 = status
        .lines()
        .find(|l| l.starts_with(field))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()?;
    Some(kb / 1024.0)
}

/// How many established TCP connections process `pid` holds to remote port `port` (IPv4 or
/// IPv6), from its open sockets and the kernel's connection tables in `/proc`: how many
/// connections a client opened to a server, whatever the client says about itself.
pub fn tcp_connections_to(pid: u32, port: u16) -> Result<usize> {
    let mut inodes = std::collections::HashSet::new();
    let fds = format!("/proc/{pid}/fd");
    for fd in std::fs::read_dir(&fds).with_context(|| format!("reading {fds}"))? {
        // A descriptor closed while this reads is no longer a connection.
        let Ok(target) = std::fs::read_link(fd?.path()) else {
            continue;
        };
        if let Some(inode) = target
            .to_str()
            .and_then(|t| t.strip_prefix("socket:["))
            .and_then(|t| t.strip_suffix(']'))
        {
            inodes.insert(inode.to_string());
        }
    }
    let mut count = 0;
    for table in ["tcp", "tcp6"] {
        let path = format!("/proc/{pid}/net/{table}");
        let text = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
        // sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout
        // inode ...; addresses are HEX_IP:HEX_PORT, state 01 is ESTABLISHED.
        for line in text.lines().skip(1) {
            let cols: Vec<&str> = line.split_whitespace().collect();
            let (Some(remote), Some(state), Some(inode)) = (cols.get(2), cols.get(3), cols.get(9))
            else {
                continue;
            };
            let remote_port = remote
                .rsplit(':')
                .next()
                .and_then(|p| u16::from_str_radix(p, 16).ok());
            if *state == "01" && remote_port == Some(port) && inodes.contains(*inode) {
                count += 1;
            }
        }
    }
    Ok(count)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_has_used_cpu_and_memory() {
        assert!(cpu_seconds(std::process::id()).is_some_and(|s| s >= 0.0));
        assert!(rss_mib(std::process::id()).is_some_and(|m| m > 0.0));
        let (now, peak) = (
            rss_mib(std::process::id()),
            peak_rss_mib(std::process::id()),
        );
        assert!(
            peak.is_some_and(|p| now.is_some_and(|n| p >= n)),
            "{now:?} {peak:?}"
        );
        assert_eq!(cpu_seconds(u32::MAX), None, "no such process");
    }
}
