//! A pod's own network and files, for a controller that binds fixed ports and reads fixed paths:
//! two replicas of such a controller cannot share a machine's loopback, and a test cannot point
//! it elsewhere.
//!
//! [`PodNetwork`] is a network namespace of its own (`ip netns add`) joined to the host by a veth
//! pair on a /30 of `10.X.Y.0`: the pod is `.2`, the host `.1`. What the pod must reach on the
//! host (its `gateway-leader proxy`, a [`Relay`] to the apiserver) listens on the host's address;
//! what the test reads from the pod (its metrics) is at the pod's. [`PodNetwork::command`] runs a
//! program inside it with directories mounted at paths of its own choosing (a Secret's mount,
//! `/certs`), in a private mount namespace over a root assembled from the host's top-level
//! directories, so nothing is created on the host's `/`. The program's process id is the
//! program's own (every step `exec`s), so signals reach it.
//!
//! Both need root (`CAP_NET_ADMIN`, `CAP_SYS_ADMIN`), which the tests have on these machines;
//! without it [`PodNetwork::new`] fails and says so. The namespace and its veth pair go when the
//! value is dropped; ones a killed test left behind are removed by the next one.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

use anyhow::{anyhow, Context, Result};

/// The prefix of every namespace made here: `gl-pod-<test process id>-<n>`.
const PREFIX: &str = "gl-pod-";

/// Where the assembled root is mounted inside the pod's own mount namespace: a directory every
/// Debian and Ubuntu system has, shadowed there only.
const ROOT: &str = "/mnt";

/// Assembles a root from the host's top-level directories (bind-mounted, recursively), mounts
/// each `SOURCE=TARGET` pair given before `--` at TARGET in it, and runs the command after `--`
/// there, in the current directory.
const ENTER: &str = r#"set -eu
root=$1; shift
cwd=$(pwd)
mount -t tmpfs gl-pod-root "$root"
for e in /*; do
  [ "$e" = "$root" ] && continue
  n=${e#/}
  if [ -L "$e" ]; then ln -s "$(readlink "$e")" "$root/$n"
  elif [ -d "$e" ]; then mkdir "$root/$n"; mount --rbind "$e" "$root/$n"
  fi
done
while [ "$1" != -- ]; do
  src=${1%%=*}; dst=${1#*=}; shift
  mkdir -p "$root$dst"
  mount --bind "$src" "$root$dst"
done
shift
exec chroot "$root" /bin/sh -c 'cd "$1" && shift && exec "$@"' - "$cwd" "$@"
"#;

/// A network namespace joined to the host by a veth pair; removed when dropped.
#[derive(Debug)]
pub struct PodNetwork {
    name: String,
    host: Ipv4Addr,
    pod: Ipv4Addr,
}

// === impl PodNetwork ===

impl PodNetwork {
    /// A new namespace with its veth pair up and addressed, and loopback up inside.
    ///
    /// # Errors
    ///
    /// When `ip` (iproute2) is missing or this process may not make namespaces (not root).
    pub fn new() -> Result<PodNetwork> {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        remove_stale();
        let pid = std::process::id();
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        // The second octet from the process id, the third from the counter: concurrent test
        // processes and the pods of one process each get a /30 of their own.
        let (b, c) = (100 + (pid % 100) as u8, (n % 250) as u8 + 1);
        let net = PodNetwork {
            name: format!("{PREFIX}{pid}-{n}"),
            host: Ipv4Addr::new(10, b, c, 1),
            pod: Ipv4Addr::new(10, b, c, 2),
        };
        // Interface names are at most 15 bytes.
        let (host_if, pod_if) = (format!("glh{pid}x{n}"), format!("glp{pid}x{n}"));
        ip(&["netns", "add", &net.name]).map_err(|e| {
            anyhow!(
                "{e:#}: a network namespace of its own is how a controller that binds fixed ports \
                 runs twice on one machine; run the tests as root (they need CAP_NET_ADMIN and \
                 CAP_SYS_ADMIN; scripts/test.sh runs as root on these machines) with iproute2 \
                 installed"
            )
        })?;
        let host_cidr = format!("{}/30", net.host);
        let pod_cidr = format!("{}/30", net.pod);
        let steps: [&[&str]; 7] = [
            &[
                "link", "add", &host_if, "type", "veth", "peer", "name", &pod_if,
            ],
            &["link", "set", &pod_if, "netns", &net.name],
            &["addr", "add", &host_cidr, "dev", &host_if],
            &["link", "set", &host_if, "up"],
            &["-n", &net.name, "addr", "add", &pod_cidr, "dev", &pod_if],
            &["-n", &net.name, "link", "set", &pod_if, "up"],
            &["-n", &net.name, "link", "set", "lo", "up"],
        ];
        for step in steps {
            ip(step)?;
        }
        Ok(net)
    }

    /// The host's end: where the pod reaches what runs on the host.
    pub fn host_ip(&self) -> Ipv4Addr {
        self.host
    }

    /// The pod's address: where the host reaches what the pod serves.
    pub fn pod_ip(&self) -> Ipv4Addr {
        self.pod
    }

    /// `program` with `args`, to run in this network with each `(source, target)` of `mounts`
    /// (host directories) mounted at `target`; environment and working directory as the
    /// returned command is given them.
    pub fn command(&self, program: &Path, args: &[&str], mounts: &[(&Path, &str)]) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.name]);
        if mounts.is_empty() {
            cmd.arg(program).args(args);
            return cmd;
        }
        cmd.args(["unshare", "--mount", "--propagation", "private", "--"])
            .args(["sh", "-c", ENTER, "-", ROOT]);
        for (source, target) in mounts {
            cmd.arg(format!("{}={target}", source.display()));
        }
        cmd.arg("--").arg(program).args(args);
        cmd
    }
}

impl Drop for PodNetwork {
    fn drop(&mut self) {
        // The veth pair goes with the namespace.
        let _ = ip(&["netns", "del", &self.name]);
    }
}

/// Runs `ip ARGS`.
fn ip(args: &[&str]) -> Result<()> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .context("running ip (iproute2)")?;
    if out.status.success() {
        Ok(())
    } else {
        Err(anyhow!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Removes the namespaces of test processes that no longer run.
fn remove_stale() {
    let Ok(entries) = std::fs::read_dir("/run/netns") else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(rest) = name.strip_prefix(PREFIX) else {
            continue;
        };
        let owner = rest.split('-').next().unwrap_or_default();
        if !owner.is_empty() && !PathBuf::from(format!("/proc/{owner}")).exists() {
            let _ = ip(&["netns", "del", &name]);
        }
    }
}

/// A TCP relay on its own thread: every connection to `listen` is joined to `to`. What the
/// pod must reach on the host's loopback (the apiserver, for a controller that talks to it
/// directly) it reaches through one on the host's end of its [`PodNetwork`].
pub struct Relay {
    addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

// === impl Relay ===

impl Relay {
    /// Starts relaying from `ip` (a free port) to `to`.
    ///
    /// # Errors
    ///
    /// When nothing can listen on `ip`.
    pub fn start(ip: Ipv4Addr, to: SocketAddr) -> Result<Relay> {
        let listener = std::net::TcpListener::bind((ip, 0))
            .with_context(|| format!("listening on {ip} for a relay to {to}"))?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        std::thread::Builder::new()
            .name(format!("relay-{addr}"))
            .spawn(move || {
                let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                else {
                    return;
                };
                rt.block_on(async move {
                    let Ok(listener) = tokio::net::TcpListener::from_std(listener) else {
                        return;
                    };
                    let accept = async {
                        while let Ok((mut inbound, _)) = listener.accept().await {
                            tokio::spawn(async move {
                                if let Ok(mut outbound) = tokio::net::TcpStream::connect(to).await {
                                    let _ =
                                        tokio::io::copy_bidirectional(&mut inbound, &mut outbound)
                                            .await;
                                }
                            });
                        }
                    };
                    tokio::select! {
                        () = accept => {}
                        _ = stopped => {}
                    }
                });
            })
            .context("starting the relay's thread")?;
        Ok(Relay {
            addr,
            stop: Some(stop),
        })
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}
