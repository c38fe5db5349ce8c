//! A local apiserver that its test binary never drops (kept in a static, leaked, or the binary
//! exits at once) leaves nothing behind: once the binary is gone, its processes are killed and
//! their temporary dirs removed, a restarted apiserver's included.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use testkit::kube::KubeApiServer;

/// Set in the copy of this test binary that starts the servers and exits without a drop (not
/// `GATEWAY_LEADER_`: no replica ever reads it).
const CHILD_ENV: &str = "TESTKIT_WATCHDOG_CHILD";
const TEST: &str = "a_server_never_dropped_is_gone_once_its_test_binary_exits";

fn alive(pid: u32) -> bool {
    // A zombie (reaped by nobody yet) is gone for this purpose.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            !s.rsplit(')')
                .next()
                .unwrap_or("")
                .trim_start()
                .starts_with('Z')
        })
        .unwrap_or(false)
}

/// The child: two servers, one of them restarted, each named on stdout; then an exit that
/// drops nothing.
async fn child() -> ! {
    let kept = KubeApiServer::start_local()
        .await
        .expect("an apiserver starts");
    let mut restarted = KubeApiServer::start_local()
        .await
        .expect("an apiserver starts");
    restarted.restart().await.expect("the apiserver restarts");
    for s in [&kept, &restarted] {
        let dir = s.kubeconfig_path().parent().expect("the server's dir");
        let pid = s.pid().expect("a local server's pid");
        println!("SERVER {pid} {}", dir.display());
    }
    std::process::exit(0)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_server_never_dropped_is_gone_once_its_test_binary_exits() {
    if std::env::var_os(CHILD_ENV).is_some() {
        child().await;
    }
    let out = Command::new(std::env::current_exe().expect("this test binary"))
        .args(["--exact", TEST, "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, "1")
        .output()
        .expect("this test binary runs again");
    let said = String::from_utf8_lossy(&out.stdout);
    let servers: Vec<(u32, PathBuf)> = said
        .lines()
        // libtest's own "test NAME ... " may stand before the first, on the same line.
        .filter_map(|l| l.split_once("SERVER ").map(|(_, rest)| rest))
        .filter_map(|l| l.split_once(' '))
        .filter_map(|(pid, dir)| Some((pid.parse().ok()?, PathBuf::from(dir))))
        .collect();
    assert_eq!(
        servers.len(),
        2,
        "the child named its servers: {said}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The watchdogs poll once a second; a busy machine may take far longer.
    let deadline = Instant::now() + Duration::from_secs(120);
    let left = |servers: &[(u32, PathBuf)]| -> Vec<String> {
        servers
            .iter()
            .flat_map(|(pid, dir)| {
                let p = alive(*pid).then(|| format!("process {pid}"));
                let d = Path::new(dir).exists().then(|| dir.display().to_string());
                [p, d].into_iter().flatten()
            })
            .collect()
    };
    while !left(&servers).is_empty() {
        assert!(
            Instant::now() < deadline,
            "still there 120 s after the test binary exited: {:?}",
            left(&servers)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
