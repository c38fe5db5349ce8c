//! Leader election on etcd alone: connect, campaign, wait to lead, do guarded work once a second
//! while leading, and release the lock on Ctrl-C or SIGTERM so another copy takes over at once.
//!
//! ```sh
//! etcd &    # or any etcd at hand
//! cargo run -p leader-lock-etcd --example etcd_elector -- http://127.0.0.1:2379 &
//! cargo run -p leader-lock-etcd --example etcd_elector -- http://127.0.0.1:2379 &
//! kill %2   # if it leads (it says so): it releases, and the other leads within milliseconds
//! ```
//!
//! `tests/example.rs` runs it against a throwaway etcd.

use std::sync::Arc;
use std::time::Duration;

use leader_lock::leadership::NotLeader;
use leader_lock::{Elector, ElectorConfig, Identity, Leadership, Timing};
use leader_lock_etcd::{EtcdConfig, EtcdLock};
use tokio::signal::unix::{signal, SignalKind};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let endpoint = std::env::args().nth(1);
    let endpoint = endpoint.unwrap_or_else(|| "http://127.0.0.1:2379".to_string());
    let lock = EtcdLock::connect(EtcdConfig::new(vec![endpoint]), "etcd-example").await?;
    let config = ElectorConfig {
        identity: Identity::new("etcd-example"),
        timing: Timing::default(),
        release_on_shutdown: true,
    };
    let elector = Elector::spawn(Arc::new(lock), config)?;
    println!("campaigning as {}", elector.candidate().holder());
    let mut term = signal(SignalKind::terminate())?;
    tokio::select! {
        r = lead(elector.leadership()) => r?,
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    println!("released: {}", elector.shutdown().await?);
    Ok(())
}

/// Waits to lead, then works under the leadership once a second until it ends; and again.
async fn lead(leadership: Leadership) -> anyhow::Result<()> {
    loop {
        println!(
            "leading under term {}",
            leadership.wait_leader().await?.term
        );
        loop {
            // The work starts only while leadership is valid and is cut off when it ends.
            let worked = leadership.run(|permit| async move {
                let term = permit.check()?; // right before the side effect
                println!("working under term {term}");
                Ok::<_, NotLeader>(())
            });
            if let Err(e) = worked.await {
                println!("stopped leading: {e}");
                break;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }
}
