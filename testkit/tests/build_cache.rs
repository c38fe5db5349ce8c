//! The build scripts' cache (`scripts/go.sh`), driven as a recipe drives it, with a recipe whose
//! build writes a file instead of running Go: a finished build is found again on the next run, a
//! recipe that would never be found fails at once, and a prune removes only the builds that no
//! checkout is using.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant, SystemTime};

use tempfile::TempDir;

/// A recipe as `scripts/build-*.sh` are written, but with `ensure_go` off (Go is not under test)
/// and a build that installs `$INSTALLED`, a tiny executable.
const RECIPE: &str = r#"set -euo pipefail
. "$GO_SH"
go_script build-fake "$@"
ensure_go() { :; }
check() { [ -x "$1" ]; }
build() { printf '#!/bin/sh\n' >"$1/$INSTALLED"; chmod +x "$1/$INSTALLED"; }
go_build fake v1.0.0 check build "$INSTALLED" "$INSTALLED"
"#;

/// Older than the day a prune spares a used build for.
const TWO_DAYS: Duration = Duration::from_secs(2 * 24 * 3600);

struct Cache {
    dir: TempDir,
    recipe: PathBuf,
}

impl Cache {
    fn new() -> Cache {
        let dir = tempfile::tempdir().expect("a temporary dir");
        let recipe = dir.path().join("build-fake.sh");
        std::fs::write(&recipe, RECIPE).expect("writing the recipe");
        Cache { dir, recipe }
    }

    fn root(&self) -> PathBuf {
        self.dir.path().join("cache")
    }

    /// Runs the recipe, its build installing `installed`.
    fn run(&self, installed: &str) -> Output {
        let go_sh = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/go.sh");
        Command::new("bash")
            .arg(&self.recipe)
            .env("GO_SH", go_sh)
            .env("INSTALLED", installed)
            .env("GATEWAY_LEADER_CACHE_DIR", self.root())
            .output()
            .expect("bash runs")
    }

    /// An older build of `fake` by another recipe, as another checkout leaves it.
    fn older(&self, recipe: &str) -> PathBuf {
        let dir = self.root().join(format!("fake-v0.9.0-{recipe}"));
        std::fs::create_dir_all(&dir).expect("creating an older build");
        std::fs::write(dir.join("fake"), "#!/bin/sh\n").expect("writing an older build");
        dir
    }
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Stamps `path` as last changed `ago` (creating it), as a use that long ago left it.
fn stamp(path: &Path, ago: Duration) {
    std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .and_then(|f| f.set_modified(SystemTime::now() - ago))
        .unwrap_or_else(|e| panic!("stamping {}: {e}", path.display()));
}

/// Holds `lock` as a build in progress does, until dropped.
struct Held(Child);

impl Held {
    fn new(lock: &Path) -> Held {
        // The holder is the process itself (exec), so killing it frees the lock.
        let child = Command::new("sh")
            .args(["-c", r#"exec 9>>"$0" && flock 9 && exec sleep 600"#])
            .arg(lock)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("sh and flock(1) (util-linux) run");
        let deadline = Instant::now() + Duration::from_secs(60);
        while Command::new("flock")
            .arg("-n")
            .arg(lock)
            .arg("true")
            .status()
            .expect("flock(1) runs")
            .success()
        {
            assert!(
                Instant::now() < deadline,
                "flock never took {}",
                lock.display()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Held(child)
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn a_finished_build_is_found_on_the_next_run() {
    let cache = Cache::new();
    let first = cache.run("fake");
    assert!(first.status.success(), "first run: {}", stderr(&first));
    let built = String::from_utf8_lossy(&first.stdout).trim().to_owned();
    assert!(built.ends_with("/fake"), "the path printed: {built:?}");

    // Each use stamps the build, which keeps it from another checkout's prune.
    let used = Path::new(&built).with_file_name(".used");
    stamp(&used, TWO_DAYS);
    let second = cache.run("fake");
    assert!(second.status.success(), "second run: {}", stderr(&second));
    assert!(
        stderr(&second).contains("cached fake v1.0.0 is fine"),
        "the second run built again: {}",
        stderr(&second)
    );
    assert_eq!(String::from_utf8_lossy(&second.stdout).trim(), built);
    let age = std::fs::metadata(&used)
        .and_then(|m| m.modified())
        .expect("the build's .used stamp")
        .elapsed()
        .unwrap_or_default();
    assert!(
        age < Duration::from_secs(3600),
        "the cached build was not stamped as used: {age:?} old"
    );
}

#[test]
fn a_recipe_whose_binary_is_not_its_name_fails_at_once() {
    let cache = Cache::new();
    let out = cache.run("fake.test");
    assert!(!out.status.success(), "it passed: {}", stderr(&out));
    assert!(
        stderr(&out).contains("every run would build it again"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_prune_removes_only_the_builds_no_checkout_is_using() {
    let cache = Cache::new();
    let unused = cache.older("unused");
    let stale = cache.older("stale");
    stamp(&stale.join(".used"), TWO_DAYS);
    let recent = cache.older("recent");
    stamp(&recent.join(".used"), Duration::from_secs(3600));
    let building = cache.older("building");
    let lock = building.join(".lock");
    std::fs::write(&lock, "").expect("writing a lock file");
    let held = Held::new(&lock);

    let out = cache.run("fake");
    assert!(out.status.success(), "{}", stderr(&out));
    drop(held);

    assert!(!unused.exists(), "a build never stamped as used stayed");
    assert!(!stale.exists(), "a build last used two days ago stayed");
    assert!(recent.exists(), "a build used an hour ago was removed");
    assert!(building.exists(), "a build whose lock is held was removed");
}
