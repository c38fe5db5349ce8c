//! The client-go and controller-runtime anchors in a real `gateway-leader-bench run`: beside
//! Kubernetes × graceful and × crash, each Go peer's rounds all finish, with the apiserver's
//! version, and each peer's steady state gives its lease requests per renewal.

use std::process::Command;

#[test]
fn both_peers_run_beside_kubernetes_graceful_and_crash() {
    let dir = tempfile::tempdir().expect("temp dir");
    let out = dir.path().join("out");
    let rounds = 2;
    let o = Command::new(env!("CARGO_BIN_EXE_gateway-leader-bench"))
        .args(["run", "--lock-backend", "kubernetes"])
        .args(["--scenario", "graceful", "--scenario", "crash"])
        .arg("--binary")
        .arg(
            testkit::workspace_binary("gateway-leader", "gateway-leader")
                .expect("gateway-leader builds"),
        )
        .args(["--wakeup", "watch", "--steady", "3s", "--replicas", "3"])
        .args(["--rounds", &rounds.to_string()])
        .arg("--out")
        .arg(&out)
        .output()
        .expect("the binary runs");
    let stdout = String::from_utf8_lossy(&o.stdout);
    let stderr = String::from_utf8_lossy(&o.stderr);
    let said = format!("stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(o.status.success(), "exit {:?}; {said}", o.status.code());
    let results: serde_json::Value = serde_json::from_slice(
        &std::fs::read(out.join("results.json")).expect("results.json is written"),
    )
    .expect("results.json is JSON");
    assert!(
        results["apiserver"]
            .as_str()
            .is_some_and(|v| v.starts_with("v1.")),
        "{said}"
    );
    let anchors = results["anchors"].as_array().expect("anchors");
    for tool in ["client-go leaderelection", "controller-runtime manager"] {
        for scenario in ["graceful", "crash"] {
            let a = anchors
                .iter()
                .find(|a| a["tool"] == tool && a["scenario"] == scenario)
                .unwrap_or_else(|| panic!("no {tool} anchor beside {scenario}; {said}"));
            let samples = a["samples"].as_array().expect("samples");
            assert_eq!(samples.len(), rounds, "{a}");
            for s in samples {
                assert!(s["error"].is_null(), "{s}; {said}");
                let (led, wrote) = (&s["to_leader_ms"], &s["to_write_ms"]);
                assert!(
                    led.as_f64().is_some_and(|l| wrote.as_f64() >= Some(l)),
                    "{s}"
                );
                if scenario == "graceful" {
                    assert!(s["to_released_ms"].is_number(), "{s}");
                }
            }
        }
    }
    for wakeup in ["client-go anchor", "controller-runtime anchor"] {
        let c = results["costs"]
            .as_array()
            .expect("costs")
            .iter()
            .find(|c| c["wakeup"] == wakeup)
            .unwrap_or_else(|| panic!("no steady state for the {wakeup}; {said}"));
        // The leader's renewal and at least one follower's read per renewal.
        assert!(
            c["requests_per_renewal"].as_f64() > Some(1.0),
            "{c}; {said}"
        );
    }
    assert!(stdout.contains("violations: 0"), "{said}");
}
