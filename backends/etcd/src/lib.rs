//! A [`LeaderLock`](leader_lock::backend::LeaderLock) on etcd: a key bound to a lease, rewritten
//! on every renew.
//!
//! - Acquire: one transaction that creates the key only if it does not exist, on a lease granted
//!   beforehand (a spare lease kept alive while following, with the follower's candidacy
//!   `<key>#candidates/<holder>` attached), sent together with that lease's keep-alive. The term
//!   is the key's create revision.
//! - Renew: a keep-alive on the lease's one open stream, sent together with a transaction that
//!   rewrites the value only if the key is still the one we wrote last (create revision, lease
//!   and mod revision). Anything else — the key deleted, its lease revoked, the record moved
//!   onto another lease or rewritten — is lost leadership at once, never recreated.
//! - Release: one transaction that hands the key to the oldest live candidate (onto its spare
//!   lease, under its name; it leads on that write with a keep-alive and a read, and its term is
//!   that write's revision), or else deletes the key and writes the released term to the
//!   release marker `<key>#released`, so followers tell a release from a deletion by hand. Our
//!   candidacy goes in the same write; the lease, holding nothing then, is left to expire.
//! - Follow: a watch on the key. A release wakes followers at once; a record that vanished
//!   without a release is free `lease` after its last version was first seen; a record that
//!   stops changing for `lease` (its holder no longer renews it, e.g. it was moved onto another
//!   lease) is deleted and taken.
//!
//! See `docs/etcd.md` for the guarantees and the settings.

mod client;
mod config;
mod connect;
mod error;
mod held;
mod inspect;
mod keepalive;
mod keys;
mod knowledge;
mod lock;
mod members;
mod spare;
mod successor;
mod timeout;
mod tls;
mod value;
mod watch;

pub use config::{EtcdConfig, DEFAULT_KEY_PREFIX, MIN_LEASE};
pub use lock::EtcdLock;
