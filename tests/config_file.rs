//! The config file: what it may be (a regular file, at most 1 MiB, no YAML aliases, shallow)
//! and what it may hold (known keys only); bad input exits 2 with one clear message.

mod common;

use std::process::Command;

use common::cli::*;

#[test]
fn unknown_keys_in_the_config_file_are_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let f = write(&dir, "c.yaml", "lease_durration: 20s\n");
    let o = run(&["run", "--config", &f], &[]);
    assert_usage_error(&o, &["lease_durration"]);
}

#[test]
fn a_fifo_as_config_file_is_refused_not_waited_on() {
    let dir = tempfile::tempdir().expect("tempdir");
    let fifo = dir.path().join("c.yaml");
    let made = Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .expect("mkfifo runs");
    assert!(made.success());
    let o = run_bounded(&["run", "--config", path_str(&fifo)]);
    assert_usage_error(&o, &["--config", path_str(&fifo), "not a regular file"]);
}

#[test]
fn endless_and_oversized_config_files_are_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    // A symlink is followed: what counts is what it points to.
    let zero = dir.path().join("c.toml");
    std::os::unix::fs::symlink("/dev/zero", &zero).expect("symlink");
    let o = run_bounded(&["run", "--config", path_str(&zero)]);
    assert_usage_error(&o, &["--config", "not a regular file"]);
    let padding = "# padding\n".repeat(110_000);
    let big = write(
        &dir,
        "big.toml",
        &format!("lock_backend = \"etcd\"\n{padding}"),
    );
    let o = run_bounded(&["run", "--config", &big]);
    assert_usage_error(&o, &["--config", "larger than 1 MiB"]);
}

#[test]
fn a_yaml_alias_bomb_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    // "Billion laughs": nine levels of nine aliases expand to 9^9 strings.
    let mut text = format!("a0: &a0 [{}]\n", ["\"lol\""; 9].join(", "));
    for i in 1..=9 {
        let prev = format!("*a{}", i - 1);
        text.push_str(&format!(
            "a{i}: &a{i} [{}]\n",
            [prev.as_str(); 9].join(", ")
        ));
    }
    let bomb = write(&dir, "c.yaml", &text);
    let o = run_bounded(&["run", "--config", &bomb]);
    assert_usage_error(&o, &["--config", "anchors and aliases are not accepted"]);
    // Deep nesting is refused too, before anything recurses over it.
    let mut text = "etcd_endpoints:\n".to_string();
    for depth in 1..=40 {
        text.push_str(&format!("{}-\n", "  ".repeat(depth)));
    }
    let deep = write(&dir, "deep.yaml", &text);
    let o = run_bounded(&["run", "--config", &deep]);
    assert_usage_error(&o, &["--config", "nested deeper than 16"]);
}
