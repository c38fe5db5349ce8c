//! Chaos in the suite: `gateway-leader-bench run --scenario chaos` on every backend, over real
//! `gateway-leader run` processes and real servers. Each backend gets every scenario (graceful,
//! crash, pause, vanish, backend-restart, partition) once, in a random order; the split-brain
//! checker must find nothing and the route's status must be right once it settles.
//!
//! Bounded to minutes; the overnight run is
//! `gateway-leader-bench run --scenario chaos --rounds 1000` (docs/benchmarks.md). The seed is
//! random and printed; set `GATEWAY_LEADER_CHAOS_SEED` to replay one.

use std::process::Command;

use gateway_leader_bench::scenario::Scenario;

#[test]
fn chaos_on_every_backend_has_no_split_brain_and_settles() {
    let dir = tempfile::tempdir().expect("temp dir");
    let out = dir.path().join("out");
    let seed = std::env::var("GATEWAY_LEADER_CHAOS_SEED")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .unwrap_or_else(rand::random);
    // One deck: every scenario once per backend.
    let rounds = Scenario::ALL.len();
    let o = Command::new(env!("CARGO_BIN_EXE_gateway-leader-bench"))
        .args(["run", "--lock-backend", "all", "--scenario", "chaos"])
        .arg("--binary")
        .arg(
            testkit::workspace_binary("gateway-leader", "gateway-leader")
                .expect("gateway-leader builds"),
        )
        .args(["--wakeup", "watch", "--steady", "0s", "--replicas", "3"])
        .args(["--rounds", &rounds.to_string(), "--seed", &seed.to_string()])
        .arg("--out")
        .arg(&out)
        .output()
        .expect("the binary runs");
    let stdout = String::from_utf8_lossy(&o.stdout);
    let stderr = String::from_utf8_lossy(&o.stderr);
    let replay = format!(
        "replay with GATEWAY_LEADER_CHAOS_SEED={seed}; logs in {}\n\
         stdout:\n{stdout}\nstderr:\n{stderr}",
        out.display()
    );
    if !o.status.success() {
        // Keep the replicas' logs for the failure's reader.
        let kept = dir.keep();
        panic!(
            "bench exited {:?} (kept {}); {replay}",
            o.status.code(),
            kept.display()
        );
    }
    assert!(stdout.contains("violations: 0"), "{replay}");
    let results: serde_json::Value = serde_json::from_slice(
        &std::fs::read(out.join("results.json")).expect("results.json is written"),
    )
    .expect("results.json is JSON");
    for backend in ["kubernetes", "etcd", "redis"] {
        let samples: Vec<&serde_json::Value> = results["results"]
            .as_array()
            .expect("results")
            .iter()
            .filter(|r| r["backend"] == backend)
            .flat_map(|r| r["samples"].as_array().expect("samples"))
            .collect();
        assert_eq!(
            samples.len(),
            rounds,
            "{backend}: every round reported; {replay}"
        );
        let mut drawn: Vec<&str> = samples
            .iter()
            .map(|s| s["scenario"].as_str().expect("scenario"))
            .collect();
        drawn.sort_unstable();
        drawn.dedup();
        assert_eq!(
            drawn.len(),
            rounds,
            "{backend}: each scenario once; {replay}"
        );
        for s in &samples {
            assert!(s["error"].is_null(), "{backend}: {s}; {replay}");
            assert!(s["to_leader_ms"].is_number(), "{backend}: {s}; {replay}");
        }
    }
    for v in results["verdicts"].as_array().expect("verdicts") {
        assert_eq!(
            v["verdict"]["violations"].as_array().map(Vec::len),
            Some(0),
            "{v}; {replay}"
        );
        assert!(
            v["verdict"]["leaderships"].as_u64() >= Some(rounds as u64),
            "{v}; {replay}"
        );
    }
}
