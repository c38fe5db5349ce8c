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
use std::sync::OnceLock;

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
}

impl PodFiles {
    /// An empty `/var/run`. Panics, saying why, when mount namespaces are not available.
    pub fn new() -> PodFiles {
        require_mount_namespaces();
        PodFiles {
            dir: tempfile::tempdir().expect("temp dir"),
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
    /// kubelet puts them.
    pub fn service_account(&self, token: &str, ca_pem: &str, namespace: &str) {
        self.file(&format!("{SERVICE_ACCOUNT_DIR}/token"), token.as_bytes());
        self.file(&format!("{SERVICE_ACCOUNT_DIR}/ca.crt"), ca_pem.as_bytes());
        self.file(
            &format!("{SERVICE_ACCOUNT_DIR}/namespace"),
            namespace.as_bytes(),
        );
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
