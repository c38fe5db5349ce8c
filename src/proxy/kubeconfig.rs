//! A kubeconfig that points a client-go program at the proxy.

use std::path::Path;

use anyhow::Context;

use super::listen::Bound;

/// A kubeconfig whose one cluster is the proxy at `addr`, with no credentials (the proxy adds
/// its own): for a child process or a sidecar's controller. Unix sockets have no kubeconfig:
/// client-go cannot dial one.
pub fn kubeconfig(addr: std::net::SocketAddr) -> String {
    format!(
        "apiVersion: v1\n\
         kind: Config\n\
         clusters:\n\
         - name: gateway-leader-proxy\n  cluster:\n    server: http://{addr}\n\
         contexts:\n\
         - name: gateway-leader-proxy\n  context:\n    cluster: gateway-leader-proxy\n    user: gateway-leader-proxy\n\
         users:\n\
         - name: gateway-leader-proxy\n  user: {{}}\n\
         current-context: gateway-leader-proxy\n"
    )
}

/// Writes [`kubeconfig`] for `bound` to `path` (mode 0600).
///
/// # Errors
/// `bound` is a Unix socket (client-go cannot dial one), or the file cannot be written.
pub fn write_kubeconfig(bound: &Bound, path: &Path) -> anyhow::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let Bound::Tcp(addr) = bound else {
        anyhow::bail!(
            "a kubeconfig cannot point at the Unix socket {bound}: client-go dials only TCP; \
             give --proxy-listen a loopback IP:PORT"
        );
    };
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("writing the proxy's kubeconfig {}", path.display()))?;
    f.write_all(kubeconfig(*addr).as_bytes())
        .with_context(|| format!("writing the proxy's kubeconfig {}", path.display()))
}
