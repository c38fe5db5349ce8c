//! What etcd keeps of the lock, for [`LeaderLock::inspect`]: the key's revisions and the TTL of
//! its lease, the release marker, and, once the key is gone, its last version from the key's
//! history (docs/etcd.md, "Inspecting the lock").
//!
//! [`LeaderLock::inspect`]: leader_lock::backend::LeaderLock::inspect

use std::time::{Duration, SystemTime};

use etcd_client::{GetOptions, KeyValue, Txn, TxnOp, TxnOpResponse, WatchOptions};
use leader_lock::backend::{FactValue, Inspection, LastHolder, LockError};
use leader_lock::Term;
use tokio::time::Instant;

use crate::client::Conn;
use crate::keys::Keys;
use crate::value::{record, revision, term, StoredValue};

/// How far back the search for a vanished key's last version goes: 2^40 revisions, far more
/// than any etcd keeps, in at most this many reads.
const MAX_PROBES: u32 = 40;

/// Reads the key and the release marker in one transaction (one revision), then what etcd keeps
/// beside them: the key's lease TTL, or, with the key gone, its last version.
pub(crate) async fn inspect(conn: &Conn, keys: &Keys) -> Result<Inspection, LockError> {
    let txn = Txn::new().and_then([
        TxnOp::get(keys.key.clone(), None),
        TxnOp::get(keys.marker.clone(), None),
    ]);
    let resp = conn
        .call("inspect", |c| async move { c.kv_client().txn(txn).await })
        .await?;
    let rev = resp.header().map_or(0, |h| h.revision());
    let mut gets = resp.op_responses().into_iter().filter_map(|r| match r {
        TxnOpResponse::Get(g) => Some(g),
        _ => None,
    });
    let kv = gets.next().and_then(|g| g.kvs().first().cloned());
    let released = gets
        .next()
        .and_then(|g| g.kvs().first().map(|kv| kv.value().to_vec()))
        .and_then(|v| String::from_utf8(v).ok())
        .and_then(|v| v.parse::<u64>().ok());
    let mut i = Inspection::of_record(None);
    if let Some(kv) = &kv {
        i = revisions(i, kv);
    }
    if let Some(t) = released {
        i = i.with_fact("releasedTerm", FactValue::Number(t));
    }
    match kv {
        Some(kv) => {
            let rec = record(&kv).map_err(|why| {
                LockError::malformed(format!("{} holds a foreign value: {why}", keys.text))
            })?;
            i.record = Some(rec);
            Ok(i.with_server_ttl(lease_ttl(conn, kv.lease()).await?))
        }
        None => {
            let last = last_version(conn, keys, rev).await?;
            Ok(i.with_last_holder(last.and_then(|kv| last_holder(&kv, released))))
        }
    }
}

/// The key's revisions: the term's source and how often it was written.
fn revisions(i: Inspection, kv: &KeyValue) -> Inspection {
    let i = i
        .with_fact(
            "createRevision",
            FactValue::Number(revision(kv.create_revision())),
        )
        .with_fact(
            "modRevision",
            FactValue::Number(revision(kv.mod_revision())),
        )
        .with_fact("version", FactValue::Number(revision(kv.version())));
    if kv.lease() == 0 {
        return i;
    }
    i.with_fact("lease", FactValue::Text(format!("{:x}", kv.lease())))
}

/// The remaining TTL of `lease` (0: none) by etcd's clock; `None` for no lease, or one gone.
async fn lease_ttl(conn: &Conn, lease: i64) -> Result<Option<Duration>, LockError> {
    if lease == 0 {
        return Ok(None);
    }
    let r = conn
        .call("lease time-to-live", |c| async move {
            c.lease_client().time_to_live(lease, None).await
        })
        .await?;
    Ok(u64::try_from(r.ttl()).ok().map(Duration::from_secs))
}

/// The key's last version before `rev`, where it is missing: the latest revision it was present
/// at is found by reads at doubling distances back, then the history from there up to `rev`
/// gives the very last version (the key may have come and gone in between). `None` when the
/// key never existed within what etcd kept (compacted, or never written).
async fn last_version(conn: &Conn, keys: &Keys, rev: i64) -> Result<Option<KeyValue>, LockError> {
    let mut back = 1i64;
    let mut found = None;
    for _ in 0..MAX_PROBES {
        let at = rev - back;
        if at < 1 {
            break;
        }
        let key = keys.key.clone();
        let r = conn
            .call("history get", |c| async move {
                c.kv_client()
                    .get(key, Some(GetOptions::new().with_revision(at)))
                    .await
            })
            .await;
        match r {
            Ok(g) => {
                if let Some(kv) = g.kvs().first() {
                    found = Some(kv.clone());
                    break;
                }
            }
            // Older than etcd keeps: nothing more to learn.
            Err(e) if e.chain().to_string().contains("compacted") => return Ok(None),
            Err(e) => return Err(e),
        }
        back = back.saturating_mul(2);
    }
    let Some(mut last) = found else {
        return Ok(None);
    };
    // The history after the version found, up to `rev`: its last put is the version deleted.
    let options = WatchOptions::new().with_start_revision(last.mod_revision() + 1);
    let deadline = Instant::now() + conn.timeout();
    let key = keys.key.clone();
    let mut stream = conn
        .call("history watch", |c| async move {
            c.watch_client().watch(key, Some(options)).await
        })
        .await?;
    loop {
        let msg = match tokio::time::timeout_at(deadline, stream.message()).await {
            Ok(m) => m.map_err(|e| conn.error("history watch", e))?,
            Err(_) => return Err(LockError::Timeout(conn.timeout())),
        };
        let Some(resp) = msg else { break };
        if resp.canceled() {
            return Ok(None);
        }
        if resp.created() && resp.events().is_empty() {
            continue;
        }
        for ev in resp.events() {
            if ev.event_type() == etcd_client::EventType::Put {
                if let Some(kv) = ev.kv() {
                    last = kv.clone();
                }
            }
        }
        if resp.header().map_or(0, |h| h.revision()) >= rev {
            break;
        }
    }
    Ok(Some(last))
}

/// The holder of a deleted version of ours, released when the marker names its term; one that
/// vanished holds the lock off until a lease after its last renew, as its record gave it (on the
/// holder's clock: etcd keeps no time of its own for a write).
fn last_holder(kv: &KeyValue, released: Option<u64>) -> Option<LastHolder> {
    let v = StoredValue::parse(kv.value()).ok()?;
    let t = revision(term(&v, kv.create_revision(), kv.mod_revision()));
    let released = released == Some(t);
    let held_off_for = if released {
        None
    } else {
        v.renew_time().or(v.acquire_time()).and_then(|at| {
            (at + v.lease_duration())
                .duration_since(SystemTime::now())
                .ok()
        })
    };
    Some(LastHolder {
        holder: v.holder,
        term: Term(t),
        released,
        held_off_for,
    })
}
