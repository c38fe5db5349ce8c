//! What `gateway-leader proxy` costs beside talking to the apiserver directly, in one run on a
//! real kube-apiserver: a GET's added latency, a list and a watch of 10,000 objects, writes per
//! second through the leader's proxy, and the proxy's RSS with 1,000 open watches. The GETs
//! and the writes also go through `kubectl proxy` (the anchor: the Kubernetes API proxy every
//! operator knows, client-go's transport, no gate) in the same run.
//!
//! ```text
//! cargo bench --bench proxy                    # 10,000 objects, 2,000 GETs, 9 x 3 x 2,000 creates
//! cargo bench --bench proxy -- --objects 2000  # smaller
//! cargo bench --bench proxy -- --binary /tmp/gateway-leader-before  # an earlier build's proxy
//! ```
//!
//! Direct, proxied and anchor runs alternate, so all see the same machine. The proxy is the release
//! binary (`cargo bench` builds with the release profile) unless `--binary` names another, to
//! measure a change before and after on the same machine. Each figure is printed beside the
//! target issue 32 sets for it.

#[path = "../tests/common/mod.rs"]
mod common;

use std::net::SocketAddr;
use std::process::Command;
use std::time::{Duration, Instant};

use common::Replica;
use futures::{StreamExt, TryStreamExt};
use gateway_leader_log::message;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams, ObjectMeta, PostParams, WatchEvent, WatchParams};
use kube::Client;
use testkit::kube::KubeApiServer;
use testkit::process::{cpu_seconds, rss_mib};

const PATIENCE: Duration = Duration::from_secs(120);
/// Rounds of creates, each of them direct, through the proxy and through the anchor.
const WRITE_ROUNDS: usize = 9;

struct Options {
    objects: usize,
    gets: usize,
    writes: usize,
    watches: usize,
    /// The `gateway-leader` to run instead of this workspace's.
    binary: Option<std::path::PathBuf>,
}

fn options() -> Options {
    let mut o = Options {
        objects: 10_000,
        gets: 2_000,
        writes: 2_000,
        watches: 1_000,
        binary: None,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = |name: &str| -> usize {
            args.next()
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("{name} needs a count"))
        };
        match a.as_str() {
            "--objects" => o.objects = value("--objects"),
            "--gets" => o.gets = value("--gets"),
            "--writes" => o.writes = value("--writes"),
            "--watches" => o.watches = value("--watches"),
            "--binary" => {
                o.binary = Some(args.next().expect("--binary needs a path").into());
            }
            // `cargo bench` passes --bench.
            _ => {}
        }
    }
    o
}

fn config_map(name: &str) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            ..Default::default()
        },
        data: Some([("k".to_string(), "v".repeat(64))].into()),
        ..Default::default()
    }
}

/// How a figure stands against its target.
fn verdict(met: bool) -> &'static str {
    if met {
        "met"
    } else {
        "MISSED"
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    percentile(&v, 0.5)
}

/// Creates `n` config maps named `{prefix}-{i}` with 16 requests in flight; returns the time.
async fn create_many(api: &Api<ConfigMap>, prefix: &str, n: usize) -> Duration {
    let started = Instant::now();
    futures::stream::iter(0..n)
        .map(|i| {
            let api = api.clone();
            let name = format!("{prefix}-{i}");
            async move {
                api.create(&PostParams::default(), &config_map(&name))
                    .await
                    .map(|_| ())
            }
        })
        .buffer_unordered(16)
        .try_collect::<Vec<()>>()
        .await
        .expect("every create lands");
    started.elapsed()
}

/// Time until a watch from resourceVersion 0 has delivered `n` ADDED events.
async fn watch_initial(api: &Api<ConfigMap>, n: usize) -> Duration {
    let started = Instant::now();
    let stream = api
        .watch(&WatchParams::default().timeout(290), "0")
        .await
        .expect("a watch");
    let mut stream = std::pin::pin!(stream);
    let mut added = 0;
    while added < n {
        match stream.next().await {
            Some(Ok(WatchEvent::Added(_))) => added += 1,
            Some(Ok(_)) => {}
            other => panic!("the watch ended after {added} events: {other:?}"),
        }
    }
    started.elapsed()
}

/// `kubectl proxy` on the test apiserver: the anchor, stopped when dropped.
struct KubectlProxy {
    child: std::process::Child,
    pid: u32,
    client: Client,
}

impl KubectlProxy {
    async fn start(server: &KubeApiServer) -> KubectlProxy {
        let port = testkit::process::free_port().expect("a port");
        let child = Command::new(common::deploy::kubectl())
            .arg("proxy")
            .arg("--kubeconfig")
            .arg(server.kubeconfig_path())
            .args(["--address", "127.0.0.1", "--port", &port.to_string()])
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("kubectl proxy starts");
        let pid = child.id();
        let addr: SocketAddr = ([127, 0, 0, 1], port).into();
        testkit::process::wait_until(PATIENCE, "kubectl proxy listens", || async move {
            tokio::net::TcpStream::connect(addr).await.is_ok()
        })
        .await
        .expect("kubectl proxy listens");
        let client = Client::try_from(kube::Config::new(
            format!("http://{addr}").parse().expect("a URL"),
        ))
        .expect("a client for kubectl proxy");
        KubectlProxy { child, pid, client }
    }
}

impl Drop for KubectlProxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let o = options();
    let binary = match &o.binary {
        Some(b) => b.clone(),
        None => testkit::workspace_binary("gateway-leader", "gateway-leader")
            .expect("gateway-leader builds"),
    };
    let server = KubeApiServer::start()
        .await
        .expect("kube-apiserver starts (scripts/build-kube-apiserver.sh builds it)");
    let ns = "bench-proxy";
    server.create_namespace(ns).await.expect("namespace");
    let port = testkit::process::free_port().expect("a port");
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    let mut cmd = Command::new(&binary);
    cmd.arg("proxy")
        .args(["--lock-backend", "kubernetes", "--kubeconfig"])
        .arg(server.kubeconfig_path())
        .args(["--leader-election-namespace", ns])
        .args(["--proxy-listen", &addr.to_string()])
        .args(["--health-addr", "127.0.0.1:0", "--log-format", "json"])
        .args(["--leader-election-identity", "bench"])
        .env("RUST_LOG", "warn,gateway_leader=info");
    testkit::replica::clear_settings(&mut cmd);
    let mut proxy = tokio::task::block_in_place(|| {
        let mut r = Replica::spawn("bench", cmd);
        r.wait_for(message::PROXY_SERVING, PATIENCE);
        r.wait_for(message::LEADING, PATIENCE);
        r
    });
    let pid = proxy.pid();
    let anchor = KubectlProxy::start(&server).await;
    let direct = server.admin_client();
    let through = Client::try_from(kube::Config::new(
        format!("http://{addr}").parse().expect("a URL"),
    ))
    .expect("a client for the proxy");
    let d_api: Api<ConfigMap> = Api::namespaced(direct.clone(), ns);
    let p_api: Api<ConfigMap> = Api::namespaced(through.clone(), ns);
    let k_api: Api<ConfigMap> = Api::namespaced(anchor.client.clone(), ns);
    println!("binary: {}", binary.display());
    println!("apiserver: {}", server.url());

    // 1. A GET's latency, alternating direct, proxied and through the anchor.
    d_api
        .create(&PostParams::default(), &config_map("probe"))
        .await
        .expect("probe");
    for api in [&d_api, &p_api, &k_api] {
        for _ in 0..100 {
            api.get("probe").await.expect("warm-up");
        }
    }
    let (mut d, mut p, mut k) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..o.gets {
        for (api, out) in [(&d_api, &mut d), (&p_api, &mut p), (&k_api, &mut k)] {
            let t = Instant::now();
            api.get("probe").await.expect("get");
            out.push(t.elapsed());
        }
    }
    for v in [&mut d, &mut p, &mut k] {
        v.sort();
    }
    let ms = |v: &[Duration], q: f64| percentile(v, q).as_secs_f64() * 1e3;
    let added = ms(&p, 0.5) - ms(&d, 0.5);
    println!(
        "GET x{}: direct p50 {:.3} ms p99 {:.3} ms; proxy p50 {:.3} ms p99 {:.3} ms; added p50 \
         {added:.3} ms (target <= 0.3 ms: {}); kubectl proxy p50 {:.3} ms p99 {:.3} ms, added \
         p50 {:.3} ms",
        o.gets,
        ms(&d, 0.5),
        ms(&d, 0.99),
        ms(&p, 0.5),
        ms(&p, 0.99),
        verdict(added <= 0.3),
        ms(&k, 0.5),
        ms(&k, 0.99),
        ms(&k, 0.5) - ms(&d, 0.5),
    );

    // 2. Writes per second: creates with 16 in flight, direct, through the leader's proxy and
    //    through the anchor, in nine rounds of the three: one round of a second or so is moved
    //    by a scheduling hiccup on two cores, the median of nine is not. The proxies' CPU per
    //    write shows what each takes from the cores the apiserver and etcd share with it.
    // In a namespace of their own: the list and watch below see `objects` objects.
    let writes = "bench-proxy-writes";
    server.create_namespace(writes).await.expect("namespace");
    let ways = [
        ("direct", Api::namespaced(direct.clone(), writes), None),
        ("proxy", Api::namespaced(through.clone(), writes), Some(pid)),
        (
            "kubectl proxy",
            Api::namespaced(anchor.client.clone(), writes),
            Some(anchor.pid),
        ),
    ];
    // took[way][round], and each proxy's CPU seconds over its rounds.
    let mut took = [const { Vec::<Duration>::new() }; 3];
    let mut cpu = [0.0; 3];
    for round in 0..WRITE_ROUNDS {
        // Each way goes first, second and third in turn: what a round leaves the apiserver to
        // do (its garbage, etcd's) falls on each way's rounds alike.
        for i in 0..ways.len() {
            let way = (round + i) % ways.len();
            let (name, api, pid): &(&str, Api<ConfigMap>, Option<u32>) = &ways[way];
            let cpu_now = || pid.map_or(0.0, |p| cpu_seconds(p).expect("a proxy's CPU time"));
            let before = cpu_now();
            took[way].push(create_many(api, &format!("{}{round}", &name[..1]), o.writes).await);
            cpu[way] += cpu_now() - before;
        }
    }
    let rate = |t: &Duration| o.writes as f64 / t.as_secs_f64();
    for ((name, ..), took) in ways.iter().zip(&took) {
        let rates: Vec<String> = took.iter().map(|t| format!("{:.0}", rate(t))).collect();
        println!("creates per round, per s, {name}: {}", rates.join(", "));
    }
    // A way's share in a round: its rate against direct's in the same round, so that the
    // apiserver slowing as the namespace fills moves both sides of each ratio alike.
    let shares = |way: usize| -> Vec<f64> {
        let mut v: Vec<f64> = took[0]
            .iter()
            .zip(&took[way])
            .map(|(d, w)| d.as_secs_f64() / w.as_secs_f64() * 100.0)
            .collect();
        v.sort_by(f64::total_cmp);
        v
    };
    let median_of = |v: &[f64]| v[v.len() / 2];
    let (proxy_shares, anchor_shares) = (shares(1), shares(2));
    let share = median_of(&proxy_shares);
    let per_write = |cpu: f64| cpu * 1e6 / (o.writes * WRITE_ROUNDS) as f64;
    let median_rate = |way: usize| {
        let mut v = took[way].clone();
        v.sort();
        rate(&v[v.len() / 2])
    };
    println!(
        "creates x{} (16 in flight), {WRITE_ROUNDS} rounds: direct {:.0}/s (median); proxy \
         {:.0}/s, {share:.1} % of direct in the median round ({:.1} to {:.1} %; target >= 95 %: \
         {}), its CPU {:.0} us per write; kubectl proxy {:.0}/s, {:.1} % ({:.1} to {:.1} %), its \
         CPU {:.0} us per write",
        o.writes,
        median_rate(0),
        median_rate(1),
        proxy_shares[0],
        proxy_shares[proxy_shares.len() - 1],
        verdict(share >= 95.0),
        per_write(cpu[1]),
        median_rate(2),
        median_of(&anchor_shares),
        anchor_shares[0],
        anchor_shares[anchor_shares.len() - 1],
        per_write(cpu[2]),
    );

    // 3. A list and a watch of `objects` objects.
    // The probe is one of them.
    let total = o.objects.max(1);
    if total > 1 {
        create_many(&d_api, "fill", total - 1).await;
    }
    let (mut dl, mut pl, mut dwt, mut pwt) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..3 {
        for (api, out) in [(&d_api, &mut dl), (&p_api, &mut pl)] {
            let t = Instant::now();
            let list = api.list(&ListParams::default()).await.expect("list");
            assert_eq!(list.items.len(), total);
            out.push(t.elapsed());
        }
        dwt.push(watch_initial(&d_api, total).await);
        pwt.push(watch_initial(&p_api, total).await);
    }
    let (dl, pl, dwt, pwt) = (median(dl), median(pl), median(dwt), median(pwt));
    let (list_x, watch_x) = (
        pl.as_secs_f64() / dl.as_secs_f64(),
        pwt.as_secs_f64() / dwt.as_secs_f64(),
    );
    println!(
        "list of {total}: direct {:.0} ms, proxy {:.0} ms ({list_x:.2}x; target <= 1.2x: {})",
        dl.as_secs_f64() * 1e3,
        pl.as_secs_f64() * 1e3,
        verdict(list_x <= 1.2)
    );
    println!(
        "watch of {total}: direct {:.0} ms, proxy {:.0} ms ({watch_x:.2}x; target <= 1.2x: {})",
        dwt.as_secs_f64() * 1e3,
        pwt.as_secs_f64() * 1e3,
        verdict(watch_x <= 1.2)
    );

    // 4. RSS with open watches (on a namespace with one object: the cost of the watches).
    let quiet = "bench-proxy-quiet";
    server.create_namespace(quiet).await.expect("namespace");
    let q_api: Api<ConfigMap> = Api::namespaced(through.clone(), quiet);
    q_api
        .create(&PostParams::default(), &config_map("one"))
        .await
        .expect("one");
    let before = rss_mib(pid).expect("the proxy's RSS");
    let mut open = Vec::new();
    for _ in 0..o.watches {
        let s = q_api
            .watch(&WatchParams::default().timeout(290), "0")
            .await
            .expect("a watch");
        open.push(Box::pin(s));
    }
    for s in &mut open {
        match s.next().await {
            Some(Ok(WatchEvent::Added(_))) => {}
            other => panic!("a watch: {other:?}"),
        }
    }
    let with = rss_mib(pid).expect("the proxy's RSS");
    let grown_mb = (with - before) * 1024.0 * 1024.0 / 1e6;
    println!(
        "proxy RSS: {before:.1} MiB, {with:.1} MiB with {} open watches (+{:.1} MiB = +{grown_mb:.1} \
         MB; target <= +20 MB: {})",
        o.watches,
        with - before,
        verdict(grown_mb <= 20.0)
    );
    let apiserver_port = server
        .url()
        .parse::<http::Uri>()
        .ok()
        .and_then(|u| u.port_u16())
        .expect("the apiserver's URL has a port");
    println!(
        "the proxy's connections to the apiserver with {} open watches: {}",
        o.watches,
        testkit::process::tcp_connections_to(pid, apiserver_port).expect("/proc")
    );
    drop(open);
    drop(anchor);
    proxy.terminate();
    tokio::task::block_in_place(|| proxy.wait_exit(PATIENCE));
}
