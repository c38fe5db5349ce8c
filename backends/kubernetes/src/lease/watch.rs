//! The Lease's watch: opening it, and forwarding its events to the elector.

use std::sync::Arc;

use futures::stream::BoxStream;
use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{WatchEvent, WatchParams};
use leader_lock::backend::{LockError, LockEvent};
use tokio::sync::mpsc;

use super::{Inner, WATCH_TIMEOUT_SECS};
use crate::error::{bounded, classify};

impl Inner {
    pub(super) async fn open_watch(
        &self,
        version: &str,
    ) -> Result<BoxStream<'static, kube::Result<WatchEvent<Lease>>>, LockError> {
        let wp = WatchParams::default()
            .fields(&format!("metadata.name={}", self.name))
            .timeout(WATCH_TIMEOUT_SECS);
        let r = bounded(self.timeout(), self.api.watch(&wp, version)).await?;
        let s = r.map_err(|e| classify(&self.what("watch"), e))?;
        Ok(s.boxed())
    }
}

/// Forwards watch events until the receiver goes away or the watch breaks, keeping the lock's
/// copy of the Lease (`watched`) while it runs: watch `number` of this lock.
pub(super) async fn pump(
    inner: Arc<Inner>,
    number: u64,
    stream: BoxStream<'static, kube::Result<WatchEvent<Lease>>>,
    version: String,
    tx: mpsc::Sender<Result<LockEvent, LockError>>,
) {
    forward(&inner, number, stream, version, tx).await;
    // A copy nobody keeps up to date would only cost conflicts: attempts read again.
    let mut s = inner.state();
    if s.watching == Some(number) {
        s.watching = None;
        s.watched = None;
    }
}

async fn forward(
    inner: &Inner,
    number: u64,
    mut stream: BoxStream<'static, kube::Result<WatchEvent<Lease>>>,
    mut version: String,
    tx: mpsc::Sender<Result<LockEvent, LockError>>,
) {
    loop {
        let item = tokio::select! {
            _ = tx.closed() => return,
            item = stream.next() => item,
        };
        let ev = match item {
            // The server's watch timeout: carry on from where we were.
            None => match inner.open_watch(&version).await {
                Ok(s) => {
                    stream = s;
                    continue;
                }
                Err(e) => Err(e),
            },
            Some(Ok(WatchEvent::Added(l))) | Some(Ok(WatchEvent::Modified(l))) => {
                if let Some(v) = &l.metadata.resource_version {
                    version.clone_from(v);
                }
                let rec = inner.observe(&l);
                let mut s = inner.state();
                if s.watching == Some(number) {
                    s.watched = Some(l);
                }
                drop(s);
                Ok(LockEvent::Changed(Some(rec)))
            }
            Some(Ok(WatchEvent::Deleted(l))) => {
                if let Some(v) = &l.metadata.resource_version {
                    version.clone_from(v);
                }
                inner.gone(Some(&l), None);
                Ok(LockEvent::Changed(None))
            }
            Some(Ok(WatchEvent::Bookmark(b))) => {
                version = b.metadata.resource_version;
                continue;
            }
            // 410 Gone: our resourceVersion is too old; ending lets the elector reopen afresh.
            Some(Ok(WatchEvent::Error(s))) if s.code == 410 => return,
            Some(Ok(WatchEvent::Error(s))) => {
                Err(classify(&inner.what("watch"), kube::Error::Api(s)))
            }
            Some(Err(e)) => Err(classify(&inner.what("watch"), e)),
        };
        let broken = ev.is_err();
        if tx.send(ev).await.is_err() || broken {
            return;
        }
    }
}
