//! The phases of the demo: the first leader and its statuses, then a handover.

use std::time::{Duration, SystemTime};

use anyhow::Result;
use gateway_api::httproutes::HttpRoute;
use gateway_leader_log::{message, Event};
use k8s_openapi::jiff::Timestamp;
use kube::{Api, Client};
use nix::sys::signal::Signal;
use testkit::replica::Line;

use crate::fleet::{leader_in, since, term_of, written_object, Fleet, Leading};
use crate::lock::LockServer;
use crate::out::{human, list, Out, Tone};
use crate::sample::{point_route, Key, TABLE};
use crate::status::{await_object, has_status, read_status, route_says, status_writers};
use crate::{CONTROLLER, LEASE, NS, REPLICAS};

/// The route change made during a handover, and what its ResolvedRefs must turn to.
pub struct Change {
    pub route: Key,
    pub service: &'static str,
    pub resolved: &'static str,
}

/// One handover: the new leader, and its first status write when there was one.
pub struct Handover {
    pub leader: Leading,
    pub led_after: Duration,
    pub first_write: Option<Duration>,
}

pub struct Demo<'a> {
    pub out: &'a Out,
    pub client: Client,
    pub fleet: Fleet,
    pub lock: LockServer,
}

impl Demo<'_> {
    /// Which replica wrote the object's status, under which term.
    ///
    /// managedFields names the replicas that own fields of the status; the newest entry wins,
    /// and within its one-second resolution the newest "status written" line. That replica's
    /// last such line for the object carries the term (waited for: the line follows the write).
    pub async fn attribute(
        &self,
        key: Key,
        writers: &[(String, Option<Timestamp>)],
    ) -> Result<Option<(String, String)>> {
        let last_line = |name: &str| -> Option<SystemTime> {
            self.fleet.journal.read(|s| {
                since(&s, name, 0)
                    .rev()
                    .find(|l| key.written_by(l))
                    .map(|l| l.at)
            })
        };
        let Some((writer, _)) = writers
            .iter()
            .max_by_key(|(name, time)| (*time, last_line(name)))
        else {
            return Ok(None);
        };
        if !REPLICAS.contains(&writer.as_str()) {
            return Ok(Some((writer.clone(), "?".into())));
        }
        let line = self
            .fleet
            .wait_line(
                writer,
                0,
                &format!("a {:?} line for {key}", message::WRITTEN),
                |l| key.written_by(l),
            )
            .await?;
        Ok(Some((
            writer.clone(),
            term_of(&line).map_or_else(|| "?".into(), |t| t.to_string()),
        )))
    }

    pub async fn table(&self) -> Result<()> {
        struct Row {
            key: Key,
            lines: Vec<(String, Tone)>,
            writer: String,
            term: String,
        }
        let mut rows = Vec::new();
        for key in TABLE {
            let status = read_status(&self.client, key).await?;
            let (writer, term) = self
                .attribute(key, &status.writers)
                .await?
                .unwrap_or_else(|| ("-".into(), "-".into()));
            let lines = if status.lines.is_empty() {
                vec![("(no status)".to_string(), Tone::Dim)]
            } else {
                status.lines
            };
            rows.push(Row {
                key,
                lines,
                writer,
                term,
            });
        }
        let header = ["KIND", "OBJECT", "STATUS", "WRITTEN BY", "TERM"];
        let width = |i: usize, f: &dyn Fn(&Row) -> usize| {
            rows.iter().map(f).max().unwrap_or(0).max(header[i].len())
        };
        let w = [
            width(0, &|r| r.key.kind.len()),
            width(1, &|r| r.key.object().len()),
            width(2, &|r| {
                r.lines.iter().map(|(t, _)| t.len()).max().unwrap_or(0)
            }),
            width(3, &|r| r.writer.len()),
        ];
        let out = self.out;
        let cell =
            |text: &str, width: usize, tone: Tone| out.paint(tone, &format!("{text:<width$}"));
        println!(
            "{}  {}  {}  {}  {}",
            cell(header[0], w[0], Tone::Bold),
            cell(header[1], w[1], Tone::Bold),
            cell(header[2], w[2], Tone::Bold),
            cell(header[3], w[3], Tone::Bold),
            out.paint(Tone::Bold, header[4])
        );
        for row in &rows {
            for (i, (text, tone)) in row.lines.iter().enumerate() {
                let (kind, object, writer, term) = if i == 0 {
                    (
                        row.key.kind.to_string(),
                        row.key.object(),
                        row.writer.as_str(),
                        row.term.as_str(),
                    )
                } else {
                    (String::new(), String::new(), "", "")
                };
                let line = format!(
                    "{}  {}  {}  {}  {}",
                    cell(&kind, w[0], Tone::Plain),
                    cell(&object, w[1], Tone::Plain),
                    cell(text, w[2], *tone),
                    cell(writer, w[3], Tone::Plain),
                    term
                );
                println!("{}", line.trim_end());
            }
        }
        Ok(())
    }

    /// The first leader, with a word on Redis's restart guard when it holds everyone back.
    pub async fn first_leader(&self) -> Result<Leading> {
        let mut told = false;
        let redis_up = match &self.lock {
            LockServer::Redis { up_since, .. } => Some(*up_since),
            _ => None,
        };
        self.fleet
            .wait("a first leader", |s| {
                if let Some(l) = leader_in(s, &REPLICAS, 0) {
                    return Ok(Some(l));
                }
                // A follower that sees no holder on a fresh Redis is held back by the guard.
                let guarded = REPLICAS.iter().any(|n| {
                    since(s, n, 0)
                        .any(|l| matches!(l.event, Some(Event::Following { holder: None, .. })))
                });
                if let (Some(up), true, false) = (redis_up, guarded, told) {
                    told = true;
                    let left = (LEASE + Duration::from_secs(1)).saturating_sub(up.elapsed());
                    self.out.note(format!(
                        "a fresh Redis hands out no lock until it has been up for one lease \
                         (restart guard, docs/redis.md): nobody leads for about {}",
                        human(left)
                    ));
                }
                self.fleet.ensure_alive(s, &REPLICAS)?;
                Ok(None)
            })
            .await
    }

    /// Phase 1: who leads, and the statuses it wrote.
    pub async fn start(&self) -> Result<Leading> {
        let leader = self.first_leader().await?;
        let others: Vec<&str> = REPLICAS
            .iter()
            .copied()
            .filter(|n| *n != leader.replica)
            .collect();
        for name in &others {
            self.fleet
                .wait_line(name, 0, &format!("{:?}", message::FOLLOWING), |l| {
                    matches!(l.event, Some(Event::Following { .. }))
                })
                .await?;
        }
        self.out.step(format!(
            "{} leads with term {}; {} follow",
            leader.replica,
            leader.term,
            list(&others.iter().map(|s| s.to_string()).collect::<Vec<_>>())
        ));
        for key in TABLE {
            has_status(&self.client, key, &self.fleet.dir).await?;
        }
        self.out.heading(format!(
            "Statuses, computed by every replica, written by the leader only ({CONTROLLER})"
        ));
        self.table().await?;
        Ok(leader)
    }

    /// The line of `leader`'s first status write after `mark`.
    ///
    /// [`message::FIRST_WRITE`] says so, but only while the new leader is still checking its
    /// cached statuses; a write after that check (a change that reached it later) has only its
    /// [`message::WRITTEN`] line. Both come from the same moment of the same write, the first
    /// just before the second, so waiting for the second finds the first if there is one.
    pub async fn first_write(&self, leader: &Leading, mark: usize) -> Result<Line> {
        let of_term = |l: &Line| term_of(l) == Some(leader.term);
        let write = |l: &Line| matches!(l.event, Some(Event::Written { .. })) && of_term(l);
        let written = self
            .fleet
            .wait_line(&leader.replica, mark, "a status write", write)
            .await?;
        let first = self.fleet.journal.read(|s| {
            since(&s, &leader.replica, mark)
                .find(|l| matches!(l.event, Some(Event::FirstWrite { .. })) && of_term(l))
                .or_else(|| since(&s, &leader.replica, mark).find(|l| write(l)))
                .cloned()
        });
        Ok(first.unwrap_or(written))
    }

    /// Stops or kills `leader`, changes `route`, and waits for the next leader to write it.
    pub async fn handover(
        &self,
        leader: &Leading,
        sig: Signal,
        among: &[&str],
        change: Change,
    ) -> Result<Handover> {
        let Change {
            route,
            service,
            resolved,
        } = change;
        let mark = self.fleet.mark();
        let sent = self.fleet.signal(&leader.replica, sig)?;
        let signame = if sig == Signal::SIGKILL {
            "SIGKILL"
        } else {
            "SIGTERM"
        };
        self.out.step(format!(
            "{signame} to {} (term {})",
            leader.replica, leader.term
        ));
        // At once, so the change lands while the lock changes hands.
        let generation = point_route(&self.client, route, service).await?;
        self.out.step(format!(
            "{route} now points at {service}:80, so its ResolvedRefs must turn {resolved}"
        ));
        let next = self.fleet.wait_leader(among, mark).await?;
        let led_after = next.at.duration_since(sent).unwrap_or_default();
        self.out.step(format!(
            "{} leads with term {}, {} after the {signame}",
            next.replica,
            next.term,
            human(led_after)
        ));
        // The writer's own account of its new leadership: how many statuses it holds.
        let what = format!("{:?}", message::SWEEP_STARTED);
        let sweep_start = self
            .fleet
            .wait_line(
                &next.replica,
                mark,
                &what,
                |l| matches!(l.event, Some(Event::SweepStarted { term, .. }) if term == next.term),
            )
            .await?;
        let cached = match sweep_start.event {
            Some(Event::SweepStarted { statuses, .. }) => statuses,
            _ => 0,
        };
        let api = Api::<HttpRoute>::namespaced(self.client.clone(), route.namespace.unwrap_or(NS));
        let what = format!("ResolvedRefs {resolved} from a replica");
        let r = await_object(api, route, &what, &self.fleet.dir, move |r| {
            route_says(r, "ResolvedRefs", resolved, generation)
        })
        .await?;
        let writer = self.attribute(route, &status_writers(&r.metadata)).await?;
        let mut first_write = None;
        match writer {
            Some((w, _)) if w == next.replica => {
                let first = self.first_write(&next, mark).await?;
                let after = first.at.duration_since(sent).unwrap_or_default();
                first_write = Some(after);
                self.out.step(format!(
                    "{}'s first status write ({}): {} after the {signame}",
                    next.replica,
                    written_object(&first),
                    human(after)
                ));
                // Only a leadership that began with cached statuses checks them all and says so.
                if cached > 0 {
                    let what = format!("{:?}", message::SWEEP_DONE);
                    let done = self
                        .fleet
                        .wait_line(&next.replica, mark, &what, |l| {
                            matches!(
                                l.event,
                                Some(Event::SweepDone { term, .. }) if term == next.term
                            )
                        })
                        .await?;
                    if let Some(Event::SweepDone {
                        written,
                        unchanged,
                        other,
                        took_ms,
                        ..
                    }) = done.event
                    {
                        let took = Duration::try_from_secs_f64(took_ms / 1e3).unwrap_or_default();
                        self.out.step(format!(
                            "{} checked its {cached} cached statuses in {}: {written} written, \
                             {unchanged} unchanged, {other} other",
                            next.replica,
                            human(took),
                        ));
                    }
                }
            }
            Some((w, term)) if w == leader.replica => self.out.note(format!(
                "{route} was written by {w} under term {term}, just before it stepped down"
            )),
            Some((w, term)) => self
                .out
                .note(format!("{route} names {w} (term {term}) as its writer")),
            None => self
                .out
                .note(format!("no replica is named as the writer of {route}")),
        }
        Ok(Handover {
            leader: next,
            led_after,
            first_write,
        })
    }
}
