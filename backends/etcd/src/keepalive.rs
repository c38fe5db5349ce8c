//! One `LeaseKeepAlive` stream per lease, kept open across renewals.
//!
//! Opening a stream for every renew and dropping it makes etcd end one stream per renew, which
//! it counts in `grpc_server_handled_total` with a non-OK code and which trips alerts on real
//! clusters. Here a lease's stream opens once, carries every keep-alive, and is reopened only
//! after it broke; when the lease is let go, the request side is closed first so etcd sees a
//! clean end of stream. The stream lives on one member: when the lock has moved to another
//! member (`members.rs`), the next keep-alive closes it and opens a new one there.

use std::time::Duration;

use etcd_client::{Client, LeaseKeepAliveStream, LeaseKeeper};
use tokio::time::Instant;

use crate::members::{member_fault, Members};

/// The outcome of one keep-alive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LeaseState {
    /// The lease lives; its TTL starts again from the server's receipt of our request.
    Alive,
    /// The server no longer knows the lease (expired or revoked).
    Gone,
}

/// Why a keep-alive gave no answer.
#[derive(Debug)]
pub(crate) enum KeepAliveError {
    /// No answer in time; the stream is dropped, since a late answer would pair with the next request.
    Timeout,
    /// The client or the stream failed.
    Client(etcd_client::Error),
    /// The current member could not be connected.
    Connect(leader_lock::backend::LockError),
}

/// A request that made sure of the lease (its grant, a keep-alive answered alive): the lease
/// lives at least its TTL past `sent`, and the answer carried the store's revision `rev`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Sure {
    sent: Instant,
    rev: i64,
}

/// A lease and its keep-alive stream (opened on first use, reopened after a failure).
pub(crate) struct LeaseStream {
    id: i64,
    ttl: i64,
    /// The stream and the member it is open on.
    stream: Option<(LeaseKeeper, LeaseKeepAliveStream, usize)>,
    /// The last two requests that made sure of the lease, oldest first.
    sure: [Option<Sure>; 2],
}

impl LeaseStream {
    /// A lease granted with `ttl` seconds; no stream yet.
    pub fn new(id: i64, ttl: i64) -> Self {
        LeaseStream {
            id,
            ttl,
            stream: None,
            sure: [None; 2],
        }
    }

    /// A lease granted by a request sent at `sent`, answered as of revision `rev`.
    pub fn granted(id: i64, ttl: i64, sent: Instant, rev: i64) -> Self {
        let mut lease = LeaseStream::new(id, ttl);
        lease.note_sure(sent, rev);
        lease
    }

    fn note_sure(&mut self, sent: Instant, rev: i64) {
        if rev > 0 {
            self.sure = [self.sure[1], Some(Sure { sent, rev })];
        }
    }

    /// When the last request that made sure of the lease before revision `rev` was sent: the
    /// lease lives at least its TTL past that instant, and that instant came before `rev` was
    /// written (the answer's revision was older; etcd renews a lease only once it has applied
    /// what it committed). `None` when neither of the last two was.
    pub fn sure_before(&self, rev: i64) -> Option<Instant> {
        self.sure
            .iter()
            .rev()
            .flatten()
            .find(|s| s.rev < rev)
            .map(|s| s.sent)
    }

    /// The lease id.
    pub fn id(&self) -> i64 {
        self.id
    }

    /// The TTL it was granted with.
    pub fn ttl(&self) -> i64 {
        self.ttl
    }

    /// One keep-alive round trip on the lease's stream on the current member, under `timeout`;
    /// a failure that may be the member's own moves the lock to the next member.
    pub async fn keep_alive(
        &mut self,
        members: &Members,
        timeout: Duration,
    ) -> Result<LeaseState, KeepAliveError> {
        let (member, client) = members.client().await.map_err(KeepAliveError::Connect)?;
        if self.stream.as_ref().is_some_and(|s| s.2 != member) {
            self.close();
        }
        let e = match tokio::time::timeout(timeout, self.round_trip(&client, member)).await {
            Ok(Ok(state)) => return Ok(state),
            Ok(Err(e)) => {
                self.close();
                if !member_fault(&e) {
                    return Err(KeepAliveError::Client(e));
                }
                KeepAliveError::Client(e)
            }
            Err(_) => {
                self.close();
                KeepAliveError::Timeout
            }
        };
        let why = match &e {
            KeepAliveError::Client(c) => {
                leader_lock::backend::LockError::unavailable(format!("lease keep-alive: {c}"))
            }
            _ => leader_lock::backend::LockError::Timeout(timeout),
        };
        members.failed(member, &why);
        Err(e)
    }

    async fn round_trip(
        &mut self,
        client: &Client,
        member: usize,
    ) -> Result<LeaseState, etcd_client::Error> {
        let sent = Instant::now();
        if let Some((keeper, stream, _)) = &mut self.stream {
            // A send fails only when the stream already broke: open a new one below.
            if keeper.keep_alive().await.is_ok() {
                return match stream.message().await? {
                    Some(r) if r.ttl() > 0 => {
                        if let Some(h) = r.header() {
                            self.note_sure(sent, h.revision());
                        }
                        Ok(LeaseState::Alive)
                    }
                    Some(_) => {
                        self.close();
                        Ok(LeaseState::Gone)
                    }
                    None => {
                        self.stream = None;
                        Err(etcd_client::Error::LeaseKeepAliveError(
                            "keep-alive stream ended".into(),
                        ))
                    }
                };
            }
            self.stream = None;
        }
        // Opening sends the first keep-alive and waits for its answer (which the client keeps
        // to itself: no revision to note).
        match client.lease_client().keep_alive(self.id).await {
            Ok((keeper, stream)) => {
                self.stream = Some((keeper, stream, member));
                Ok(LeaseState::Alive)
            }
            // The client reports TTL <= 0 ("lease not found") this way.
            Err(etcd_client::Error::LeaseKeepAliveError(_)) => Ok(LeaseState::Gone),
            Err(etcd_client::Error::GRpcStatus(s)) if s.code() == tonic::Code::NotFound => {
                Ok(LeaseState::Gone)
            }
            Err(e) => Err(e),
        }
    }

    /// Ends the stream cleanly: the request side first, so etcd reads an end of stream (an OK
    /// call) instead of a cancelled one; the response side drains in the background.
    pub fn close(&mut self) {
        if let Some((keeper, mut stream, _)) = self.stream.take() {
            drop(keeper);
            if let Ok(rt) = tokio::runtime::Handle::try_current() {
                rt.spawn(async move {
                    let _ = tokio::time::timeout(Duration::from_secs(5), async {
                        while let Ok(Some(_)) = stream.message().await {}
                    })
                    .await;
                });
            }
        }
    }
}

impl Drop for LeaseStream {
    fn drop(&mut self) {
        self.close();
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn the_hold_counts_from_the_last_request_answered_before_the_revision() {
        let t0 = Instant::now();
        let at = |s| t0 + Duration::from_secs(s);
        let mut lease = LeaseStream::granted(7, 15, at(0), 10);
        assert_eq!(
            lease.sure_before(10),
            None,
            "answered as of the revision itself"
        );
        assert_eq!(lease.sure_before(11), Some(at(0)));
        lease.note_sure(at(5), 20);
        lease.note_sure(at(10), 30);
        assert_eq!(
            lease.sure_before(31),
            Some(at(10)),
            "the newest one before it"
        );
        assert_eq!(
            lease.sure_before(25),
            Some(at(5)),
            "not a keep-alive answered after the revision was written"
        );
        assert_eq!(lease.sure_before(15), None, "only the last two are kept");
        lease.note_sure(at(11), 0);
        assert_eq!(
            lease.sure_before(31),
            Some(at(10)),
            "an answer without a revision tells nothing"
        );
    }
}
