//! `gateway-leader bench`: bad input exits 2 with one line naming the flag, before any server
//! or replica starts.

use std::process::Command;

fn bench(args: &[&str], out: &std::path::Path) -> (Option<i32>, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_gateway-leader"))
        .arg("bench")
        .args(args)
        .arg("--out")
        .arg(out)
        .env("HOME", "/nonexistent")
        .output()
        .expect("the binary runs");
    (
        o.status.code(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn bad_input_exits_2_naming_the_flag_before_anything_starts() {
    let dir = tempfile::tempdir().expect("temp dir");
    let out = dir.path().join("out");
    for (args, needle) in [
        (&["--scenario", "nap"][..], "--scenario \"nap\""),
        (
            &["--lock-backend", "zookeeper"][..],
            "--lock-backend \"zookeeper\"",
        ),
        (&["--replicas", "1"][..], "--replicas 1"),
        (&["--rounds", "0"][..], "--rounds 0"),
        (
            &[
                "--lock-backend",
                "etcd",
                "--lease-duration",
                "1s",
                "--renew-deadline",
                "800ms",
                "--retry-period",
                "200ms",
            ][..],
            "below this backend's minimum",
        ),
        (&["--renew-deadline", "9s"][..], "renew-deadline"),
        (
            &["--redis-url", "redis://user:secret@127.0.0.1"][..],
            "redis",
        ),
    ] {
        let (code, stderr) = bench(args, &out);
        assert_eq!(code, Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(needle), "{args:?}: {stderr}");
        assert_eq!(stderr.trim().lines().count(), 1, "{args:?}: {stderr}");
        assert!(!stderr.contains("secret"), "{stderr}");
        assert!(!out.exists(), "{args:?}: nothing may be created");
    }
}
