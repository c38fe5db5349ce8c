//! What the lock holds: the key it leads on (its instance, our term, our last write and its
//! lease), the renews whose answers were lost, and an acquire whose answer was lost.

use etcd_client::{Compare, CompareOp, KeyValue, PutOptions, Txn, TxnOp};

use crate::keepalive::LeaseStream;
use crate::keys::Keys;
use crate::knowledge::Seen;
use crate::value::StoredValue;

/// What this lock holds, or may hold. Behind its own lock (`Inner::holding`), taken for a whole
/// attempt, release or withdrawal, so that none of them sees another half-done.
#[derive(Default)]
pub(crate) struct Holding {
    /// The key we lead on.
    pub(crate) held: Option<Held>,
    /// An acquire whose answer was lost: the key may be ours on its lease.
    pub(crate) pending: Option<Pending>,
}

/// The key we hold: its instance (create revision), our term, our last write, and its lease.
pub(crate) struct Held {
    pub(crate) holder: String,
    /// The key's create revision: what renews and the release compare. A key handed over keeps
    /// the create revision of its first holder, so this is not the term.
    pub(crate) create_rev: i64,
    /// Our term (`value::term`): the create revision, or the revision of the handover write.
    pub(crate) term: i64,
    /// The mod revision of our last write; a renew only goes through if it is still current.
    pub(crate) mod_rev: i64,
    pub(crate) value: StoredValue,
    /// The bytes of our last write.
    pub(crate) written: Vec<u8>,
    /// The renews sent since that write whose answers we did not get.
    pub(crate) unanswered: Unanswered,
    pub(crate) lease: LeaseStream,
}

impl Held {
    /// `holder` holds the key as `kv` shows it (our write, or a handover's), on `lease`,
    /// under `term`, with `value` to renew.
    pub(crate) fn new(
        holder: &str,
        kv: Seen<'_>,
        term: i64,
        value: StoredValue,
        lease: LeaseStream,
    ) -> Self {
        Held {
            holder: holder.to_string(),
            create_rev: kv.create_rev,
            term,
            mod_rev: kv.mod_rev,
            value,
            written: kv.value.to_vec(),
            unanswered: Unanswered::default(),
            lease,
        }
    }

    /// Our last write, as the key shows it.
    pub(crate) fn seen(&self) -> Seen<'_> {
        Seen {
            create_rev: self.create_rev,
            mod_rev: self.mod_rev,
            lease: self.lease.id(),
            value: &self.written,
        }
    }

    /// The next renew: the value with a new `renewTime`, its bytes, and the transaction that
    /// writes them if the key is still our last write (create revision, lease, mod revision),
    /// else reads it. Its bytes are remembered until an answer settles them: a renew whose
    /// answer we never get may still be applied.
    pub(crate) fn renewal(&mut self, keys: &Keys) -> (StoredValue, Vec<u8>, Txn) {
        let value = self.value.renewed();
        let bytes = value.encode();
        let txn = Txn::new()
            .when([
                Compare::create_revision(keys.key.clone(), CompareOp::Equal, self.create_rev),
                Compare::lease(keys.key.clone(), CompareOp::Equal, self.lease.id()),
                Compare::mod_revision(keys.key.clone(), CompareOp::Equal, self.mod_rev),
            ])
            .and_then([TxnOp::put(
                keys.key.clone(),
                bytes.clone(),
                Some(PutOptions::new().with_lease(self.lease.id())),
            )])
            .or_else([TxnOp::get(keys.key.clone(), None)]);
        self.unanswered.sent(&bytes);
        (value, bytes, txn)
    }

    /// A renew of `value` (`bytes`) went through at revision `rev`.
    pub(crate) fn wrote(&mut self, rev: i64, value: StoredValue, bytes: Vec<u8>) {
        self.mod_rev = rev;
        self.value = value;
        self.written = bytes;
        self.unanswered.clear();
    }

    /// Whether `kv` is this key on our lease with the bytes of one of our writes: an earlier
    /// renew whose answer was lost went through.
    pub(crate) fn is_own_write(&self, kv: &KeyValue) -> bool {
        kv.create_revision() == self.create_rev
            && kv.lease() == self.lease.id()
            && (self.unanswered.contains(kv.value()) || kv.value() == self.written)
    }

    /// Catches up on our own write `kv` (`is_own_write`): the next renew compares it.
    pub(crate) fn catch_up(&mut self, kv: &KeyValue) {
        self.mod_rev = kv.mod_revision();
        self.written = kv.value().to_vec();
        self.unanswered.clear();
    }
}

/// How many unanswered renews a holder remembers; past that, the oldest is forgotten (and, if
/// it was the one etcd applied, the holder steps down: safe, only needless).
const UNANSWERED: usize = 16;

/// The bytes of the renews sent since our last confirmed write. Each compared the same mod
/// revision, so etcd applied at most one of them, and it may be any one: a renew forwarded to a
/// frozen or dying Raft leader can be committed after the retries that followed it timed out
/// too. Remembering only the last one took such a record for someone else's and stepped down.
#[derive(Default)]
pub(crate) struct Unanswered(Vec<Vec<u8>>);

impl Unanswered {
    /// Remembers a renew's bytes before they are sent.
    pub(crate) fn sent(&mut self, bytes: &[u8]) {
        if self.0.len() >= UNANSWERED {
            self.0.remove(0);
        }
        self.0.push(bytes.to_vec());
    }

    /// Whether `value` is one of them.
    pub(crate) fn contains(&self, value: &[u8]) -> bool {
        self.0.iter().any(|b| b == value)
    }

    /// Forgets them all: the mod revision they compared is gone, so none can apply any more.
    pub(crate) fn clear(&mut self) {
        self.0.clear();
    }
}

/// An acquire whose answer was lost: the key may be ours on this lease.
pub(crate) struct Pending {
    pub(crate) lease: LeaseStream,
    pub(crate) value: Vec<u8>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_unanswered_renew_is_recognised_not_only_the_last() {
        let mut u = Unanswered::default();
        u.sent(b"renew 1");
        u.sent(b"renew 2");
        u.sent(b"renew 3");
        // etcd applied the first, forwarded to a frozen Raft leader, after the others timed out.
        assert!(u.contains(b"renew 1"));
        assert!(u.contains(b"renew 3"));
        assert!(!u.contains(b"someone else's"));
        u.clear();
        assert!(!u.contains(b"renew 1"));
        for i in 0..UNANSWERED + 1 {
            u.sent(format!("renew {i}").as_bytes());
        }
        assert!(!u.contains(b"renew 0"), "bounded");
        assert!(u.contains(format!("renew {UNANSWERED}").as_bytes()));
    }
}
