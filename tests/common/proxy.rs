//! `gateway-leader proxy` replicas as the tests start them: on a free loopback port, electing
//! on a Lease, with a kubeconfig that points a client at the proxy.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use gateway_leader_log::message;
use testkit::kube::KubeApiServer;
use testkit::pod::PodNetwork;

use super::Replica;

/// What a proxy may take to serve on a busy 2-core machine.
const PATIENCE: Duration = Duration::from_secs(90);

/// One proxy replica.
pub struct Proxy {
    /// The running `gateway-leader proxy`.
    pub replica: Replica,
    /// Where it listens.
    pub addr: SocketAddr,
    /// A kubeconfig without credentials whose server is the proxy.
    pub kubeconfig: PathBuf,
}

impl Proxy {
    /// Starts `gateway-leader proxy` as `name` on a free loopback port with the server's admin
    /// credentials, electing on the Lease in `ns`; waits until it serves. Its kubeconfig is
    /// written into `dir`.
    pub fn start(
        server: &KubeApiServer,
        name: &str,
        ns: &str,
        dir: &Path,
        extra: &[&str],
    ) -> Proxy {
        Self::start_with(server.kubeconfig_path(), name, ns, dir, extra)
    }

    /// Like [`Proxy::start`], sending with the credentials of `kubeconfig` (a service account's
    /// token, say, so that the server's audit log names this proxy). `extra` may name another
    /// `--lock-backend` (and its settings); the Lease lock is the default.
    pub fn start_with(
        kubeconfig: &Path,
        name: &str,
        ns: &str,
        dir: &Path,
        extra: &[&str],
    ) -> Proxy {
        Self::start_in(None, kubeconfig, name, ns, dir, extra)
    }

    /// Like [`Proxy::start_with`], in the pod network `net` when given (a sidecar: its
    /// loopback is the pod's, so only the pod's controller reaches it; `kubeconfig` must then
    /// name the apiserver as the pod reaches it).
    pub fn start_in(
        net: Option<&PodNetwork>,
        kubeconfig: &Path,
        name: &str,
        ns: &str,
        dir: &Path,
        extra: &[&str],
    ) -> Proxy {
        let port = testkit::process::free_port().expect("a free port");
        let addr: SocketAddr = ([127, 0, 0, 1], port).into();
        let exe = Path::new(env!("CARGO_BIN_EXE_gateway-leader"));
        let mut args = vec!["proxy".to_string()];
        if !extra.contains(&"--lock-backend") {
            args.extend(["--lock-backend".into(), "kubernetes".into()]);
        }
        args.extend(["--kubeconfig".into(), kubeconfig.display().to_string()]);
        // Health and metrics where the test reaches them: in a pod network, at the pod's address.
        let health = net.map_or("127.0.0.1:0".to_string(), |n| format!("{}:0", n.pod_ip()));
        for (flag, value) in [
            ("--leader-election-namespace", ns),
            ("--proxy-listen", &addr.to_string()),
            ("--health-addr", &health),
            ("--log-format", "json"),
            ("--leader-election-identity", name),
        ] {
            args.extend([flag.to_string(), value.to_string()]);
        }
        args.extend(extra.iter().map(|a| a.to_string()));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let mut cmd = match net {
            Some(net) => net.command(exe, &args, &[]),
            None => {
                let mut cmd = Command::new(exe);
                cmd.args(&args);
                cmd
            }
        };
        cmd.env("RUST_LOG", "info");
        testkit::replica::clear_settings(&mut cmd);
        let mut replica = Replica::spawn(name, cmd);
        replica.wait_for(message::PROXY_SERVING, PATIENCE);
        let kubeconfig = dir.join(format!("{name}.kubeconfig"));
        std::fs::write(&kubeconfig, gateway_leader::proxy::kubeconfig(addr))
            .expect("the proxy's kubeconfig");
        Proxy {
            replica,
            addr,
            kubeconfig,
        }
    }
}
