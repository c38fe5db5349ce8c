//! Where the proxy listens: a loopback TCP address, or a Unix socket only its owner may open.

use std::fmt;
use std::io;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};

use tokio::net::{TcpListener, TcpStream, UnixListener, UnixStream};

use crate::config::ProxyListen;

/// Where a proxy listens, once bound.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Bound {
    /// A loopback address (with the port the system picked for port 0).
    Tcp(std::net::SocketAddr),
    /// A Unix socket, mode 0600.
    Unix(PathBuf),
}

impl fmt::Display for Bound {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Bound::Tcp(a) => write!(f, "{a}"),
            Bound::Unix(p) => write!(f, "unix:{}", p.display()),
        }
    }
}

pub(super) enum Listener {
    Tcp(TcpListener),
    Unix(UnixListener),
}

pub(super) enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Listener {
    pub(super) async fn accept(&self) -> io::Result<Stream> {
        match self {
            Listener::Tcp(l) => {
                let (s, _) = l.accept().await?;
                // Small requests and answers go at once, not after the peer's delayed ACK.
                s.set_nodelay(true)?;
                Ok(Stream::Tcp(s))
            }
            Listener::Unix(l) => Ok(Stream::Unix(l.accept().await?.0)),
        }
    }
}

/// Binds `listen`.
pub(super) async fn bind(listen: &ProxyListen) -> io::Result<(Listener, Bound)> {
    match listen {
        ProxyListen::Tcp(addr) => {
            let l = TcpListener::bind(addr).await?;
            let bound = Bound::Tcp(l.local_addr()?);
            Ok((Listener::Tcp(l), bound))
        }
        ProxyListen::Unix(path) => {
            let l = bind_unix(path).await?;
            Ok((Listener::Unix(l), Bound::Unix(path.clone())))
        }
    }
}

/// Binds a Unix socket at `path` that only this user can open, replacing a stale socket left by
/// a process that died. The socket is made in a private directory beside `path`, given mode
/// 0600 there, then renamed into place: no other user can connect in between, as they could
/// with a chmod after binding at `path` itself.
async fn bind_unix(path: &Path) -> io::Result<UnixListener> {
    remove_stale(path).await?;
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no file name"))?;
    let private = parent.join(format!(
        ".{}.{}.tmp",
        name.to_string_lossy(),
        std::process::id()
    ));
    std::fs::DirBuilder::new().mode(0o700).create(&private)?;
    let staged = private.join("s");
    let bound = (|| {
        let l = UnixListener::bind(&staged)?;
        std::fs::set_permissions(&staged, std::fs::Permissions::from_mode(0o600))?;
        std::fs::rename(&staged, path)?;
        Ok(l)
    })();
    let _ = std::fs::remove_file(&staged);
    let _ = std::fs::remove_dir(&private);
    bound
}

/// Removes a socket at `path` that no process listens on; refuses a live one, and anything that
/// is not a socket.
async fn remove_stale(path: &Path) -> io::Result<()> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    if !meta.file_type().is_socket() {
        return Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!(
                "{} exists and is not a socket; refusing to replace it",
                path.display()
            ),
        ));
    }
    if UnixStream::connect(path).await.is_ok() {
        return Err(io::Error::new(
            io::ErrorKind::AddrInUse,
            format!("another process listens on {}", path.display()),
        ));
    }
    std::fs::remove_file(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    #[tokio::test]
    async fn a_unix_socket_is_private_and_replaces_only_a_stale_socket() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = dir.path().join("proxy.sock");
        let (l, bound) = bind(&ProxyListen::Unix(path.clone())).await.expect("binds");
        assert_eq!(bound, Bound::Unix(path.clone()));
        let mode = std::fs::metadata(&path).expect("the socket").mode() & 0o777;
        assert_eq!(mode, 0o600);
        // Live: refused.
        let e = bind(&ProxyListen::Unix(path.clone()))
            .await
            .err()
            .expect("a live socket is refused");
        assert_eq!(e.kind(), io::ErrorKind::AddrInUse, "{e}");
        // Stale (its listener gone): replaced.
        drop(l);
        bind(&ProxyListen::Unix(path.clone()))
            .await
            .expect("a stale socket is replaced");
        // Not a socket: refused, left as it was.
        let file = dir.path().join("file");
        std::fs::write(&file, "keep me").expect("a file");
        let e = bind(&ProxyListen::Unix(file.clone()))
            .await
            .err()
            .expect("a file is refused");
        assert!(e.to_string().contains("is not a socket"), "{e}");
        assert_eq!(std::fs::read_to_string(&file).expect("kept"), "keep me");
        let leftovers: Vec<_> = std::fs::read_dir(dir.path())
            .expect("the directory")
            .filter_map(Result::ok)
            .map(|e| e.file_name())
            .filter(|n| n.to_string_lossy().ends_with(".tmp"))
            .collect();
        assert!(leftovers.is_empty(), "{leftovers:?}");
    }
}
