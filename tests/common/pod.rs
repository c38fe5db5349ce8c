//! A process that sees the files a pod sees: the service account's token, CA and namespace at
//! `/var/run/secrets/kubernetes.io/serviceaccount/`, and mounted Secrets, at their real paths.
//!
//! kube-rs reads the service account from those fixed paths, so a test cannot point it elsewhere.
//! Instead the child runs in a mount namespace of its own (`unshare --mount`, private
//! propagation), where a temporary directory is bind-mounted read-only over `/run` (`/var/run`
//! points there on Debian; where `/var/run` is a directory of its own, over that). Only the
//! child sees it: the host's `/run` is untouched, nothing is created under it, and the mount
//! goes away with the child's last process. `unshare` and the shell both `exec`, so the child's
//! process id is the binary's own and signals reach it. This needs root (`CAP_SYS_ADMIN`), which
//! the tests have on these machines; without it [`PodFiles::new`] fails and says so.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};
use std::time::SystemTime;

use tempfile::TempDir;

/// Where the service account's files are in a pod (kube-rs's fixed path).
pub const SERVICE_ACCOUNT_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// The directory that is `/var/run` once symlinks are followed: the mount point.
fn run_dir() -> &'static Path {
    static RUN: OnceLock<PathBuf> = OnceLock::new();
    RUN.get_or_init(|| {
        std::fs::canonicalize("/var/run")
            .unwrap_or_else(|e| panic!("/var/run must exist to be mounted over: {e}"))
    })
}

/// Checks once that this process may make a mount namespace and mount in it.
fn require_mount_namespaces() {
    static CHECKED: OnceLock<()> = OnceLock::new();
    CHECKED.get_or_init(|| {
        let out = Command::new("unshare")
            .args(["--mount", "--propagation", "private", "--"])
            .args(["mount", "-n", "-t", "tmpfs", "tmpfs"])
            .arg(run_dir())
            .output()
            .unwrap_or_else(|e| {
                panic!("cannot run unshare (util-linux) to simulate a pod's files: {e}")
            });
        assert!(
            out.status.success(),
            "a private mount namespace is needed to put a service account where kube-rs looks \
             for it ({SERVICE_ACCOUNT_DIR}) without touching the host's: run the tests as root \
             (they need CAP_SYS_ADMIN for `unshare --mount`; scripts/test.sh runs as root on \
             these machines). unshare said: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    });
}

/// The files a pod's process finds under `/var/run`, and the command that runs one.
pub struct PodFiles {
    dir: TempDir,
    /// What [`service_account`](Self::service_account) was given, kept for each rotation.
    account: Mutex<Option<Account>>,
}

/// The service account's files other than the token, and how many times they were written.
struct Account {
    ca_pem: String,
    namespace: String,
    generation: u32,
}

impl PodFiles {
    /// An empty `/var/run`. Panics, saying why, when mount namespaces are not available.
    pub fn new() -> PodFiles {
        require_mount_namespaces();
        PodFiles {
            dir: tempfile::tempdir().expect("temp dir"),
            account: Mutex::new(None),
        }
    }

    /// Puts `content` at `path`, an absolute path under `/var/run` as the child will see it.
    pub fn file(&self, path: &str, content: &[u8]) {
        let rel = Path::new(path)
            .strip_prefix("/var/run")
            .or_else(|_| Path::new(path).strip_prefix("/run"))
            .unwrap_or_else(|_| panic!("{path} is not under /var/run"));
        let at = self.dir.path().join(rel);
        std::fs::create_dir_all(at.parent().expect("a parent")).expect("creating dirs");
        std::fs::write(&at, content).unwrap_or_else(|e| panic!("writing {}: {e}", at.display()));
    }

    /// The service account's token, the cluster's CA (PEM) and the pod's namespace, where the
    /// kubelet puts them and laid out as its projected volume is: each name a symlink into
    /// `..data`, itself a symlink to a timestamped folder (see
    /// [`rotate_token`](Self::rotate_token)).
    pub fn service_account(&self, token: &str, ca_pem: &str, namespace: &str) {
        *self.lock_account() = Some(Account {
            ca_pem: ca_pem.to_string(),
            namespace: namespace.to_string(),
            generation: 0,
        });
        self.publish(token);
        for name in ["token", "ca.crt", "namespace"] {
            let link = self.account_dir().join(name);
            std::os::unix::fs::symlink(format!("..data/{name}"), &link)
                .unwrap_or_else(|e| panic!("linking {}: {e}", link.display()));
        }
    }

    /// Puts a new token where the running child reads it, as the kubelet rotates a projected
    /// token: the three files are written into a new timestamped folder, and `..data` is
    /// switched to it with one rename, so a reader sees the old files or the new ones, never
    /// half of them; the old folder is removed.
    pub fn rotate_token(&self, token: &str) {
        self.publish(token);
    }

    fn account_dir(&self) -> PathBuf {
        let rel = Path::new(SERVICE_ACCOUNT_DIR)
            .strip_prefix("/var/run")
            .expect("the service account is under /var/run");
        self.dir.path().join(rel)
    }

    fn lock_account(&self) -> std::sync::MutexGuard<'_, Option<Account>> {
        self.account.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Writes the service account's files into a new `..<timestamp>` folder and points `..data`
    /// at it (kubelet's AtomicWriter).
    fn publish(&self, token: &str) {
        let mut account = self.lock_account();
        let a = account
            .as_mut()
            .expect("service_account comes before rotate_token");
        a.generation += 1;
        let dir = self.account_dir();
        std::fs::create_dir_all(&dir).expect("creating the service account dir");
        // The kubelet names it after the time; a generation keeps two in one second apart.
        let stamp = format!(
            "..{}_{:09}",
            humantime::format_rfc3339_seconds(SystemTime::now())
                .to_string()
                .replace([':', '-'], "_")
                .trim_end_matches('Z'),
            a.generation
        );
        let fresh = dir.join(&stamp);
        std::fs::create_dir(&fresh).expect("creating the timestamped folder");
        for (name, content) in [
            ("token", token),
            ("ca.crt", &a.ca_pem),
            ("namespace", &a.namespace),
        ] {
            std::fs::write(fresh.join(name), content)
                .unwrap_or_else(|e| panic!("writing {name}: {e}"));
        }
        let old = std::fs::read_link(dir.join("..data")).ok();
        let tmp = dir.join("..data_tmp");
        std::os::unix::fs::symlink(&stamp, &tmp).expect("linking ..data_tmp");
        std::fs::rename(&tmp, dir.join("..data")).expect("switching ..data");
        if let Some(old) = old {
            std::fs::remove_dir_all(dir.join(old)).expect("removing the old folder");
        }
    }

    /// A command that runs `program` with `args` and exactly the environment `env` (plus a
    /// `PATH` for `mount`), seeing these files under `/var/run`. Keep `self` alive while it runs.
    pub fn command(&self, program: &Path, args: &[String], env: &[(String, String)]) -> Command {
        let mut cmd = Command::new("unshare");
        cmd.args(["--mount", "--propagation", "private", "--", "sh", "-c"])
            // `ro` with `--bind` makes mount remount it read-only, as the kubelet's volumes are;
            // `-n` keeps mount from recording it in the host's /run/mount/utab.
            .arg(r#"mount -n --bind -o ro "$1" "$2" || exit 125; shift 2; exec "$@""#)
            .arg("pod")
            .arg(self.dir.path())
            .arg(run_dir())
            .arg(program)
            .args(args)
            .env_clear()
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
            .envs(env.iter().map(|(k, v)| (k, v)));
        cmd
    }
}

/// The CA of the apiserver that `config` trusts, as PEM (a pod's `ca.crt`).
pub fn ca_pem(config: &kube::Config) -> String {
    config
        .root_cert
        .as_ref()
        .expect("the test apiserver's config names its CA")
        .iter()
        .map(|der| {
            pem::encode_config(
                &pem::Pem::new("CERTIFICATE", der.clone()),
                pem::EncodeConfig::new().set_line_ending(pem::LineEnding::LF),
            )
        })
        .collect()
}

/// `KUBERNETES_SERVICE_HOST` and `KUBERNETES_SERVICE_PORT` for the apiserver at `config`, as the
/// kubelet sets them.
pub fn service_env(config: &kube::Config) -> Vec<(String, String)> {
    let url = &config.cluster_url;
    let host = url.host().expect("the apiserver URL has a host");
    let port = url.port_u16().unwrap_or(443);
    vec![
        (
            "KUBERNETES_SERVICE_HOST".into(),
            host.trim_start_matches('[').trim_end_matches(']').into(),
        ),
        ("KUBERNETES_SERVICE_PORT".into(), port.to_string()),
    ]
}
