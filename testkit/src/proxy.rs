//! A TCP proxy on loopback that can black-hole its traffic: a network partition between one
//! client and its server, controlled by the bench or a test.
//!
//! While black-holed, nothing moves in either direction and new connections are accepted but
//! not connected upstream, so the client sees what a dropped route gives it: no reset, no reply,
//! only its own timeouts. Bytes the client sent meanwhile are delivered when the partition
//! heals, as TCP retransmission would deliver them, even if the client has given up on them:
//! the server must fence such a late request itself.

use std::net::SocketAddr;

use anyhow::{Context, Result};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// A proxy from a free loopback port to `upstream`; stops when dropped.
pub struct BlackholeProxy {
    addr: SocketAddr,
    upstream: SocketAddr,
    cut: watch::Sender<bool>,
    accept: JoinHandle<()>,
}

impl BlackholeProxy {
    /// Listens on a free loopback port and forwards every connection to `upstream`.
    pub async fn start(upstream: SocketAddr) -> Result<BlackholeProxy> {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .context("binding the proxy's loopback port")?;
        let addr = listener.local_addr()?;
        let (cut, rx) = watch::channel(false);
        let accept = tokio::spawn(accept_loop(listener, upstream, rx));
        Ok(BlackholeProxy {
            addr,
            upstream,
            cut,
            accept,
        })
    }

    /// Where clients connect.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Where the traffic goes.
    pub fn upstream(&self) -> SocketAddr {
        self.upstream
    }

    /// Black-holes every connection, open and new, until [`heal`](Self::heal).
    pub fn cut(&self) {
        self.cut.send_replace(true);
    }

    /// Lets the traffic through again, held bytes first.
    pub fn heal(&self) {
        self.cut.send_replace(false);
    }

    /// Whether the traffic is black-holed now.
    pub fn is_cut(&self) -> bool {
        *self.cut.borrow()
    }
}

impl Drop for BlackholeProxy {
    fn drop(&mut self) {
        // The pumps end with their sockets once the listener is gone and the clients leave.
        self.accept.abort();
    }
}

/// Resolves once the traffic may flow (at once when it may already).
async fn open(cut: &mut watch::Receiver<bool>) {
    // An error means the proxy is gone: let the pump run into its closed sockets.
    let _ = cut.wait_for(|c| !*c).await;
}

async fn accept_loop(listener: TcpListener, upstream: SocketAddr, cut: watch::Receiver<bool>) {
    loop {
        let client = match listener.accept().await {
            Ok((c, _)) => c,
            Err(_) => {
                // Out of descriptors, say: try again shortly rather than spin.
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        let mut cut = cut.clone();
        tokio::spawn(async move {
            open(&mut cut).await;
            let Ok(server) = TcpStream::connect(upstream).await else {
                return;
            };
            let _ = client.set_nodelay(true);
            let _ = server.set_nodelay(true);
            let (cr, cw) = client.into_split();
            let (sr, sw) = server.into_split();
            tokio::spawn(pump(cr, sw, cut.clone()));
            tokio::spawn(pump(sr, cw, cut));
        });
    }
}

/// Copies one direction, holding what it read while the traffic is black-holed.
async fn pump(mut from: OwnedReadHalf, mut to: OwnedWriteHalf, mut cut: watch::Receiver<bool>) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        open(&mut cut).await;
        let n = tokio::select! {
            r = from.read(&mut buf) => match r {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            },
            // A cut while waiting for bytes: hold the read until the partition heals.
            _ = cut.wait_for(|c| *c) => continue,
        };
        open(&mut cut).await;
        if to.write_all(&buf[..n]).await.is_err() {
            break;
        }
    }
    let _ = to.shutdown().await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    async fn echo() -> SocketAddr {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                tokio::spawn(async move {
                    let mut b = [0u8; 1024];
                    while let Ok(n) = s.read(&mut b).await {
                        if n == 0 || s.write_all(&b[..n]).await.is_err() {
                            break;
                        }
                    }
                });
            }
        });
        addr
    }

    #[tokio::test]
    async fn forwards_holds_while_cut_and_delivers_after_heal() {
        let proxy = BlackholeProxy::start(echo().await).await.unwrap();
        let mut c = TcpStream::connect(proxy.addr()).await.unwrap();
        let mut b = [0u8; 5];
        c.write_all(b"hello").await.unwrap();
        c.read_exact(&mut b).await.unwrap();
        assert_eq!(&b, b"hello");

        proxy.cut();
        assert!(proxy.is_cut());
        c.write_all(b"again").await.unwrap();
        let held = tokio::time::timeout(Duration::from_millis(300), c.read_exact(&mut b)).await;
        assert!(held.is_err(), "bytes crossed a cut proxy");
        // A connection opened during the cut is not connected upstream either.
        let mut late = TcpStream::connect(proxy.addr()).await.unwrap();
        late.write_all(b"late!").await.unwrap();
        let mut lb = [0u8; 5];
        let held = tokio::time::timeout(Duration::from_millis(300), late.read_exact(&mut lb)).await;
        assert!(held.is_err(), "a new connection got through a cut proxy");

        proxy.heal();
        tokio::time::timeout(Duration::from_secs(30), c.read_exact(&mut b))
            .await
            .expect("held bytes delivered after the heal")
            .unwrap();
        assert_eq!(&b, b"again");
        tokio::time::timeout(Duration::from_secs(30), late.read_exact(&mut lb))
            .await
            .expect("the held connection goes through after the heal")
            .unwrap();
        assert_eq!(&lb, b"late!");
    }
}
