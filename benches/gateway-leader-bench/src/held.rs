//! What the apiserver held: every version of a Lease and of the objects its holders wrote,
//! recorded from watches, and the check that each write landed while the Lease named its writer.
//! The split-brain checker ([`crate::checker`]) reads what the processes logged; this reads
//! what the server kept.
//!
//! On one apiserver (one etcd) a resourceVersion is etcd's revision, one counter for every
//! object, so the Lease's versions and the written objects' versions fall on one line. A write
//! that made version R was made under the Lease as it stood at R: its newest version below R.
//! A deleted Lease is not free (docs/leader-election.md): its last holder may lead until it
//! notices the deletion, so until the Lease is created again it still names that holder.
//!
//! Who made a version: the Go peers write a ConfigMap whose data names the writer (`holder`);
//! our replicas write statuses, each replica with its own field manager
//! (`gateway-leader/<identity>`), and the apiserver's `managedFields` tell which. An update
//! hands the writer every field it changed and stamps the writer's entry with the time, so the
//! writer's entry is the one that is new, gained a field or was stamped again; the others only
//! lose fields. When no entry changed, the writer already held every field it changed and wrote
//! within the same second as its previous write: the previous status write was its own.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use futures::{StreamExt, TryStreamExt};
use kube::api::{ListParams, WatchEvent, WatchParams};
use kube::{Api, Resource};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

/// The field manager prefix of our replicas' status writes (`src/run.rs`'s `field_manager`).
pub const OUR_MANAGER: &str = "gateway-leader/";

/// One version of an object, as a watch delivered it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Version {
    /// Its resourceVersion (etcd's revision).
    pub rv: u64,
    /// A deletion: `object` is the last state.
    pub deleted: bool,
    /// The object.
    pub object: Value,
}

/// The resourceVersion of `object`, which on one apiserver is etcd's revision.
fn revision(object: &Value) -> Result<u64> {
    let rv = object["metadata"]["resourceVersion"]
        .as_str()
        .ok_or_else(|| anyhow!("an object without a resourceVersion"))?;
    rv.parse()
        .with_context(|| format!("resourceVersion {rv:?} is not an etcd revision"))
}

/// Every version of one object from a watch opened before anyone wrote it; stops on drop.
pub struct Recorder {
    what: String,
    versions: Arc<Mutex<Vec<Version>>>,
    seen: Arc<AtomicU64>,
    failed: Arc<Mutex<Option<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Recorder {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Recorder {
    /// Lists object `name` of `api` (its version then, if it exists, is the first) and watches
    /// it from there; a watch the server ends is opened again from the last version seen.
    ///
    /// # Errors
    /// The apiserver refuses the list.
    pub async fn start<K>(api: Api<K>, name: &str) -> Result<Recorder>
    where
        K: Resource + Clone + DeserializeOwned + Serialize + fmt::Debug + Send + 'static,
        K::DynamicType: Default,
    {
        let what = format!("{} {name}", K::kind(&Default::default()));
        let fields = format!("metadata.name={name}");
        let list = api
            .list(&ListParams::default().fields(&fields))
            .await
            .with_context(|| format!("listing {what}"))?;
        let mut from = list.metadata.resource_version.clone().unwrap_or_default();
        let mut first = Vec::new();
        for o in &list.items {
            let object = serde_json::to_value(o)?;
            first.push(Version {
                rv: revision(&object)?,
                deleted: false,
                object,
            });
        }
        let seen = Arc::new(AtomicU64::new(from.parse().unwrap_or(0)));
        let versions = Arc::new(Mutex::new(first));
        let failed = Arc::new(Mutex::new(None));
        let (v, s, f, w) = (versions.clone(), seen.clone(), failed.clone(), what.clone());
        let task = tokio::spawn(async move {
            // Only an error ends it.
            let r: Result<std::convert::Infallible> = async {
                loop {
                    let mut events = api
                        .watch(&WatchParams::default().fields(&fields), &from)
                        .await
                        .with_context(|| format!("watching {w}"))?
                        .boxed();
                    while let Some(e) = events.try_next().await? {
                        let (object, deleted) = match e {
                            WatchEvent::Added(o) | WatchEvent::Modified(o) => (o, false),
                            WatchEvent::Deleted(o) => (o, true),
                            WatchEvent::Bookmark(b) => {
                                from = b.metadata.resource_version;
                                s.fetch_max(from.parse().unwrap_or(0), Ordering::SeqCst);
                                continue;
                            }
                            WatchEvent::Error(e) => bail!("the watch on {w}: {e:?}"),
                        };
                        let object = serde_json::to_value(&object)?;
                        let rv = revision(&object)?;
                        from = rv.to_string();
                        if let Ok(mut all) = v.lock() {
                            all.push(Version {
                                rv,
                                deleted,
                                object,
                            });
                        }
                        s.fetch_max(rv, Ordering::SeqCst);
                    }
                }
            }
            .await;
            if let (Err(e), Ok(mut slot)) = (r, f.lock()) {
                *slot = Some(format!("{e:#}"));
            }
        });
        Ok(Recorder {
            what,
            versions,
            seen,
            failed,
            task,
        })
    }

    /// Waits up to `limit` until the watch has delivered everything up to revision `rv` (a
    /// version read since, say).
    ///
    /// # Errors
    /// The watch failed (its history has a hole), or it did not get there in time.
    pub async fn caught_up(&self, rv: u64, limit: Duration) -> Result<()> {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            if let Some(e) = self.failed.lock().ok().and_then(|f| f.clone()) {
                bail!("{}: {e}", self.what);
            }
            if self.seen.load(Ordering::SeqCst) >= rv {
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                bail!(
                    "{}: the watch did not reach revision {rv} within {limit:?}",
                    self.what
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Every version so far, in the order the watch delivered them (revision order).
    pub fn versions(&self) -> Vec<Version> {
        self.versions.lock().map(|v| v.clone()).unwrap_or_default()
    }
}

/// Who made a version of an object.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Writer {
    /// One of our replicas, by its identity's name: its holder is `<name>_<incarnation>`.
    Ours(String),
    /// A peer, by its exact holder identity.
    Peer(String),
    /// A field manager that is neither: it never holds the Lease.
    Other(String),
}

impl Writer {
    /// Whether `holder`, a Lease's holder identity, is this writer.
    pub fn holds(&self, holder: &str) -> bool {
        match self {
            Writer::Ours(name) => holder
                .strip_prefix(name.as_str())
                .is_some_and(|rest| rest.starts_with('_')),
            Writer::Peer(h) => h == holder,
            Writer::Other(_) => false,
        }
    }
}

impl fmt::Display for Writer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Writer::Ours(n) => write!(f, "replica {n}"),
            Writer::Peer(h) => write!(f, "peer {h}"),
            Writer::Other(m) => write!(f, "field manager {m}"),
        }
    }
}

/// One write the server kept: the version it made and who made it.
#[derive(Debug, Clone, PartialEq)]
pub struct Write {
    /// The object, e.g. `HTTPRoute route`.
    pub object: String,
    /// The version the write made.
    pub rv: u64,
    /// Who made it.
    pub writer: Writer,
}

/// A status manager's entry in `managedFields`: the fields it owns (as paths) and its time.
type Entry = (BTreeSet<String>, String);

/// The paths of a `fieldsV1` set, one per owned field. A field owned as such is written
/// either as an empty set (`"f:status": {}`) or, beside fields below it, with a `"."` key:
/// both become the field's own path.
fn paths(v: &Value, prefix: &str, out: &mut BTreeSet<String>) {
    match v.as_object() {
        Some(m) if !m.is_empty() => {
            for (k, child) in m {
                if k == "." {
                    out.insert(prefix.to_string());
                } else {
                    paths(child, &format!("{prefix}/{k}"), out);
                }
            }
        }
        _ => {
            out.insert(prefix.to_string());
        }
    }
}

/// The entries of the managers that wrote `object`'s status.
fn status_managers(object: &Value) -> BTreeMap<String, Entry> {
    let mut out = BTreeMap::new();
    for e in object["metadata"]["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
    {
        if e["subresource"] != "status" {
            continue;
        }
        let Some(manager) = e["manager"].as_str() else {
            continue;
        };
        let mut set = BTreeSet::new();
        paths(&e["fieldsV1"], "", &mut set);
        let time = e["time"].as_str().unwrap_or_default().to_string();
        out.insert(manager.to_string(), (set, time));
    }
    out
}

/// The manager whose entry shows it made the change from `prev` to `cur`; `None` when no
/// entry changed (see the module docs).
fn status_writer(
    prev: &BTreeMap<String, Entry>,
    cur: &BTreeMap<String, Entry>,
) -> Result<Option<String>> {
    let changed: Vec<&String> = cur
        .iter()
        .filter(|(m, (set, time))| match prev.get(*m) {
            None => true,
            Some((before, then)) => time != then || !set.is_subset(before),
        })
        .map(|(m, _)| m)
        .collect();
    match changed.as_slice() {
        [] => Ok(None),
        [one] => Ok(Some((*one).clone())),
        many => {
            let show = |m: &String| {
                let was = prev.get(m).map(|(f, t)| (f.len(), t.as_str()));
                let (f, t) = &cur[m];
                format!("{m}: {was:?} -> {:?}", (f.len(), t))
            };
            let many: Vec<String> = many.iter().map(|m| show(m)).collect();
            bail!("more than one status manager changed at once (fields, time): {many:?}")
        }
    }
}

fn writer_of(manager: &str) -> Writer {
    match manager.strip_prefix(OUR_MANAGER) {
        Some(name) => Writer::Ours(name.to_string()),
        None => Writer::Other(manager.to_string()),
    }
}

/// The status writes among `versions` of object `object`: every version after the first
/// whose `status` differs from the one before, each with its writer by `managedFields`.
///
/// # Errors
/// A version whose writer cannot be told.
pub fn status_writes(object: &str, versions: &[Version]) -> Result<Vec<Write>> {
    let mut out: Vec<Write> = Vec::new();
    let mut prev: Option<&Version> = None;
    for v in versions.iter().filter(|v| !v.deleted) {
        // The first version is the object as created: a status it has then is the CRD's
        // default (a create cannot set a status subresource).
        let Some(p) = prev.replace(v) else {
            continue;
        };
        let before = status_managers(&p.object);
        if v.object["status"] == p.object["status"] {
            continue;
        }
        let writer = match status_writer(&before, &status_managers(&v.object))
            .with_context(|| format!("{object} at revision {}", v.rv))?
        {
            Some(m) => writer_of(&m),
            None => out
                .last()
                .map(|w| w.writer.clone())
                .ok_or_else(|| anyhow!("{object} at revision {}: no status manager", v.rv))?,
        };
        out.push(Write {
            object: object.to_string(),
            rv: v.rv,
            writer,
        });
    }
    Ok(out)
}

/// The peers' writes among `versions` of ConfigMap `object`: every version, its writer the
/// holder its data names.
pub fn data_writes(object: &str, versions: &[Version]) -> Vec<Write> {
    versions
        .iter()
        .filter(|v| !v.deleted)
        .map(|v| Write {
            object: object.to_string(),
            rv: v.rv,
            writer: match v.object["data"]["holder"].as_str() {
                Some(h) => Writer::Peer(h.to_string()),
                None => Writer::Other("a ConfigMap version without a holder".to_string()),
            },
        })
        .collect()
}

/// The Lease as the server held it from one revision on.
#[derive(Debug, Clone, PartialEq)]
pub struct LeaseState {
    /// From this revision.
    pub rv: u64,
    /// Its holder (empty: released), or its last holder when deleted.
    pub holder: String,
    /// Deleted (not yet created again).
    pub deleted: bool,
}

/// The Lease's states from its versions.
pub fn lease_states(versions: &[Version]) -> Vec<LeaseState> {
    versions
        .iter()
        .map(|v| LeaseState {
            rv: v.rv,
            holder: v.object["spec"]["holderIdentity"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            deleted: v.deleted,
        })
        .collect()
}

/// A write that landed while the Lease named someone else.
#[derive(Debug, Clone, PartialEq)]
pub struct Stale {
    /// The write.
    pub write: Write,
    /// The Lease as it stood (`None`: before its first version).
    pub lease: Option<LeaseState>,
}

impl fmt::Display for Stale {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let w = &self.write;
        match &self.lease {
            Some(l) => write!(
                f,
                "{} wrote {} at revision {} while the Lease (revision {}{}) named {:?}",
                w.writer,
                w.object,
                w.rv,
                l.rv,
                if l.deleted { ", deleted" } else { "" },
                l.holder
            ),
            None => write!(
                f,
                "{} wrote {} at revision {} before the Lease existed",
                w.writer, w.object, w.rv
            ),
        }
    }
}

/// Every write of `writes` that landed while the Lease (`leases`, in revision order) named
/// someone else than its writer.
pub fn stale(leases: &[LeaseState], writes: &[Write]) -> Vec<Stale> {
    writes
        .iter()
        .filter_map(|w| {
            let at = leases.partition_point(|l| l.rv < w.rv);
            let lease = at.checked_sub(1).map(|i| leases[i].clone());
            match &lease {
                Some(l) if w.writer.holds(&l.holder) => None,
                _ => Some(Stale {
                    write: w.clone(),
                    lease,
                }),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn lease(rv: u64, holder: &str, deleted: bool) -> Version {
        Version {
            rv,
            deleted,
            object: json!({"metadata": {"resourceVersion": rv.to_string()},
                           "spec": {"holderIdentity": holder}}),
        }
    }

    fn route(rv: u64, resolved: &str, managers: Value) -> Version {
        Version {
            rv,
            deleted: false,
            object: json!({
                "metadata": {"resourceVersion": rv.to_string(), "managedFields": managers},
                "status": {"parents": [
                    {"conditions": [{"type": "ResolvedRefs", "status": resolved}]}
                ]}
            }),
        }
    }

    fn entry(manager: &str, time: &str, fields: Value) -> Value {
        json!({"manager": manager, "operation": "Update", "subresource": "status", "time": time,
               "fieldsType": "FieldsV1", "fieldsV1": fields})
    }

    #[test]
    fn the_writer_is_the_entry_that_gained_or_was_stamped() {
        let all = json!({"f:status": {"f:parents": {".": {}, "f:x": {}}}});
        let part = json!({"f:status": {"f:parents": {".": {}}}});
        let rest = json!({"f:status": {"f:parents": {"f:x": {}}}});
        let versions = vec![
            // Created by the test: no status yet; a spec change is no status write.
            Version {
                rv: 1,
                deleted: false,
                object: json!({"metadata": {"resourceVersion": "1"}}),
            },
            route(
                2,
                "True",
                json!([entry("gateway-leader/a", "t1", all.clone())]),
            ),
            // b took one field from a.
            route(
                3,
                "False",
                json!([
                    entry("gateway-leader/a", "t1", part.clone()),
                    entry("gateway-leader/b", "t2", rest.clone())
                ]),
            ),
            // b again, same second, same fields: nothing changed in managedFields.
            route(
                4,
                "True",
                json!([
                    entry("gateway-leader/a", "t1", part.clone()),
                    entry("gateway-leader/b", "t2", rest.clone())
                ]),
            ),
            // a took its field back.
            route(
                5,
                "False",
                json!([entry("gateway-leader/a", "t1", all.clone())]),
            ),
        ];
        let writes = status_writes("HTTPRoute route", &versions).expect("writers");
        let who: Vec<(u64, Writer)> = writes.iter().map(|w| (w.rv, w.writer.clone())).collect();
        assert_eq!(
            who,
            vec![
                (2, Writer::Ours("a".into())),
                (3, Writer::Ours("b".into())),
                (4, Writer::Ours("b".into())),
                (5, Writer::Ours("a".into())),
            ]
        );
    }

    #[test]
    fn a_field_owned_as_such_has_one_path_however_it_is_written() {
        let mut dotted = BTreeSet::new();
        paths(
            &json!({"f:status": {".": {}, "f:parents": {}}}),
            "",
            &mut dotted,
        );
        let mut empty = BTreeSet::new();
        paths(&json!({"f:status": {}}), "", &mut empty);
        assert!(empty.is_subset(&dotted), "{empty:?} {dotted:?}");
        assert_eq!(dotted.len(), 2);
    }

    #[test]
    fn a_write_is_checked_against_the_lease_below_its_revision() {
        let leases = lease_states(&[
            lease(10, "a_1", false),
            lease(20, "", false),
            lease(30, "p_9", false),
            lease(40, "p_9", true),
            lease(50, "q_7", false),
        ]);
        let w = |rv, writer: Writer| Write {
            object: "o".into(),
            rv,
            writer,
        };
        let writes = vec![
            w(5, Writer::Ours("a".into())),
            w(15, Writer::Ours("a".into())),
            // After a's release: stale.
            w(25, Writer::Ours("a".into())),
            w(35, Writer::Peer("p_9".into())),
            // A deleted Lease still names its last holder...
            w(45, Writer::Peer("p_9".into())),
            // ... until it is created again.
            w(55, Writer::Peer("p_9".into())),
            // A name is a prefix up to the incarnation only.
            w(16, Writer::Ours("a_".into())),
        ];
        let rvs: Vec<u64> = stale(&leases, &writes).iter().map(|s| s.write.rv).collect();
        assert_eq!(rvs, vec![5, 25, 55, 16]);
        assert!(Writer::Ours("ours-1".into()).holds("ours-1_5f3c9e1a"));
        assert!(!Writer::Ours("ours-1".into()).holds("ours-10_5f3c9e1a"));
        assert!(!Writer::Other("kubectl".into()).holds(""));
    }
}
