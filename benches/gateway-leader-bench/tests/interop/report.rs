//! What the whole run found, and its summary.

use std::collections::BTreeMap;

use gateway_leader_bench::checker;
use gateway_leader_bench::held::{self, Writer};
use testkit::replica::peer::Peer;

use crate::rounds::{Card, Played, Side};

/// What the whole run found.
pub(crate) struct Outcome {
    pub(crate) played: Vec<Played>,
    pub(crate) verdict: checker::Verdict,
    pub(crate) ours_writes: usize,
    pub(crate) peer_writes: usize,
    pub(crate) ours_stale: Vec<held::Stale>,
    pub(crate) peers_stale: Vec<held::Stale>,
    /// For each thawed leader: its side, how many writes it logged after SIGCONT, and over
    /// how long.
    pub(crate) after_thaw: Vec<(Side, usize, f64)>,
}

/// The peer a holder identity belongs to (`interop-<peer>-<index>_<uuid>`).
fn peer_of(holder: &str) -> &'static str {
    Peer::ALL
        .into_iter()
        .find(|p| holder.starts_with(&format!("interop-{p}-")))
        .map_or("unknown", Peer::name)
}

/// The summary: takeovers by card, the checker's findings by rule, the stale writes by writer.
pub(crate) fn report(o: &Outcome) -> String {
    let mut out = String::new();
    let mut by_card: BTreeMap<Card, Vec<f64>> = BTreeMap::new();
    for p in &o.played {
        by_card.entry(p.card).or_default().push(p.to_leader_ms);
    }
    out.push_str("rounds by card (count, median takeover ms):\n");
    for (card, mut ms) in by_card {
        ms.sort_by(f64::total_cmp);
        out.push_str(&format!(
            "  {:<24} {:>3}  {:>7.0}\n",
            card.to_string(),
            ms.len(),
            ms[ms.len() / 2]
        ));
    }
    out.push_str(&format!(
        "split-brain checker: {} leaderships, {} logged writes, {} violations, \
         {} findings about the peers\n",
        o.verdict.leaderships,
        o.verdict.writes,
        o.verdict.violations.len(),
        o.verdict.findings.len()
    ));
    // Grouped by rule, a few lines each: one frozen peer alone breaks a rule a dozen times.
    let mut by_rule: BTreeMap<&str, Vec<&String>> = BTreeMap::new();
    for f in &o.verdict.findings {
        by_rule
            .entry(f.split(':').next().unwrap_or_default())
            .or_default()
            .push(f);
    }
    for (rule, lines) in by_rule {
        out.push_str(&format!("  {rule}: {} findings\n", lines.len()));
        for l in lines.iter().take(5) {
            out.push_str(&format!("    {l}\n"));
        }
    }
    // Stale writes grouped by writer and by the holder the Lease named meanwhile.
    let mut stale: BTreeMap<(&'static str, String, String), Vec<u64>> = BTreeMap::new();
    for s in &o.peers_stale {
        let holder = s
            .lease
            .as_ref()
            .map(|l| l.holder.clone())
            .unwrap_or_default();
        if let Writer::Peer(h) = &s.write.writer {
            stale
                .entry((peer_of(h), h.clone(), holder))
                .or_default()
                .push(s.write.rv);
        }
    }
    out.push_str(&format!(
        "what the server held: {} status writes of ours, {} stale; {} ConfigMap writes of the \
         peers, {} stale\n",
        o.ours_writes,
        o.ours_stale.len(),
        o.peer_writes,
        o.peers_stale.len()
    ));
    for (side, n, last) in &o.after_thaw {
        out.push_str(&format!(
            "  a thawed leader ({side}) wrote {n} times after SIGCONT, \
             the last {last:.0} ms after\n"
        ));
    }
    for ((peer, writer, holder), rvs) in &stale {
        out.push_str(&format!(
            "  {peer} {writer}: {} writes (revisions {}..={}) while the Lease named {holder:?}\n",
            rvs.len(),
            rvs.first().copied().unwrap_or_default(),
            rvs.last().copied().unwrap_or_default()
        ));
    }
    // Each stale write with the Lease version it landed under, for the few that are not a
    // thawed leader's run of them.
    for s in o.peers_stale.iter().filter(|s| {
        let same = |t: &&held::Stale| t.write.writer == s.write.writer;
        o.peers_stale.iter().filter(same).count() <= 3
    }) {
        out.push_str(&format!("    {s}\n"));
    }
    out
}
