//! How long the system is without a writing leader after a graceful stop, and how fast a new
//! leader converges many statuses: real `gateway-leader run` processes on a real kube-apiserver,
//! with each lock backend.
//!
//! ```text
//! cargo bench --bench status_failover  # every backend, 20 rounds, 1,000 routes
//! cargo bench --bench status_failover -- --rounds 50 --backend etcd --routes 2000
//! ```
//!
//! Each graceful round: the leader gets SIGTERM, a route is changed right after (so there is a
//! status to write), and the follower's first status write is timed from the signal. A round in
//! which the stopping leader still wrote the change is not counted (it is reported).
//! Convergence: a follower computes N routes while another controller holds the lock; that holder
//! is stopped, and the follower's sweep over every cached status is timed.

#[path = "../tests/common/mod.rs"]
mod common;

use gateway_leader_log::message;
use std::time::{Duration, Instant, SystemTime};

use common::gateway::*;
use common::Replica;
use gateway_api::gatewayclasses::GatewayClass;
use gateway_api::gateways::Gateway;
use gateway_api::httproutes::HttpRoute;
use k8s_openapi::api::core::v1::Service;
use kube::Api;
use testkit::kube::KubeApiServer;
use testkit::process::cpu_seconds;

struct Options {
    rounds: usize,
    routes: usize,
    backends: Vec<String>,
}

fn options() -> Options {
    let mut o = Options {
        rounds: 20,
        routes: 1000,
        backends: vec!["kubernetes".into(), "etcd".into(), "redis".into()],
    };
    let mut picked = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = |name: &str| {
            args.next()
                .unwrap_or_else(|| panic!("{name} needs a value"))
        };
        match a.as_str() {
            "--rounds" => o.rounds = value("--rounds").parse().expect("--rounds: a count"),
            "--routes" => o.routes = value("--routes").parse().expect("--routes: a count"),
            "--backend" => picked.push(value("--backend")),
            // `cargo bench` passes --bench; libtest filters are not used here.
            _ => {}
        }
    }
    if !picked.is_empty() {
        o.backends = picked;
    }
    o
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((p / 100.0) * (sorted.len() as f64 - 1.0)).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn summary(name: &str, samples: &mut [f64]) {
    samples.sort_by(f64::total_cmp);
    println!(
        "{name:<44} n={:<3} min={:>7.1} p50={:>7.1} p90={:>7.1} p99={:>7.1} max={:>7.1} ms",
        samples.len(),
        percentile(samples, 0.0),
        percentile(samples, 50.0),
        percentile(samples, 90.0),
        percentile(samples, 99.0),
        percentile(samples, 100.0),
    );
}

fn ms(from: SystemTime, to: SystemTime) -> f64 {
    to.duration_since(from)
        .map(|d| d.as_secs_f64() * 1e3)
        .unwrap_or(0.0)
}

struct Backend {
    args: Vec<String>,
    _etcd: Option<testkit::etcd::EtcdServer>,
    _redis: Option<testkit::redis::RedisServer>,
}

async fn backend(name: &str, ns: &str) -> Backend {
    match name {
        "kubernetes" => Backend {
            args: vec![
                "--lock-backend".into(),
                "kubernetes".into(),
                "--leader-election-namespace".into(),
                ns.into(),
            ],
            _etcd: None,
            _redis: None,
        },
        "etcd" => {
            let e = testkit::etcd::EtcdServer::start()
                .await
                .expect("etcd starts");
            Backend {
                args: vec![
                    "--lock-backend".into(),
                    "etcd".into(),
                    "--etcd-endpoints".into(),
                    e.endpoint(),
                ],
                _etcd: Some(e),
                _redis: None,
            }
        }
        "redis" => {
            let r = testkit::redis::RedisServer::start()
                .await
                .expect("redis-server starts");
            Backend {
                args: vec![
                    "--lock-backend".into(),
                    "redis".into(),
                    "--redis-url".into(),
                    r.url(),
                ],
                _etcd: None,
                _redis: Some(r),
            }
        }
        other => panic!("--backend {other}: accepted: kubernetes, etcd, redis"),
    }
}

fn replica(name: &str, args: &[String]) -> Replica {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    Replica::start(name, &args)
}

/// One backend's graceful rounds: signal → new leader, signal → its first status write.
async fn graceful(server: &'static KubeApiServer, name: &str, rounds: usize) {
    let ns = format!("bench-{name}");
    server.create_namespace(&ns).await.expect("namespace");
    let client = server.admin_client();
    let controller = format!("gateway-leader.dev/bench-{name}");
    let routes: Api<HttpRoute> = Api::namespaced(client.clone(), &ns);
    put(
        &Api::<GatewayClass>::all(client.clone()),
        &gateway_class(&ns, &controller),
    )
    .await;
    put(
        &Api::<Gateway>::namespaced(client.clone(), &ns),
        &gateway(&ns, "gw", &ns),
    )
    .await;
    put(
        &Api::<Service>::namespaced(client.clone(), &ns),
        &service(&ns, "web", 80),
    )
    .await;
    put(&routes, &route(&ns, "route", "gw", &[(&ns, "web", 80)])).await;
    let lock = backend(name, &ns).await;
    let mut args = lock.args.clone();
    args.extend([
        "--kubeconfig".into(),
        server.kubeconfig_path().display().to_string(),
        "--leader-election-lock-name".into(),
        format!("{ns}-lock"),
        "--controller-name".into(),
        controller.clone(),
    ]);
    let handle = tokio::runtime::Handle::current();
    let who = name.to_string();
    let (mut to_leader, mut to_write, skipped) = tokio::task::spawn_blocking(move || {
        let patience = Duration::from_secs(120);
        let name = who;
        let mut leader = replica(&format!("{name}-0"), &args);
        leader.wait_for(message::LEADING, patience);
        let mut follower = replica(&format!("{name}-1"), &args);
        follower.wait_for(message::FOLLOWING, patience);
        let (mut to_leader, mut to_write, mut skipped) = (Vec::new(), Vec::new(), 0);
        for round in 0..rounds {
            // Let the follower's watch settle after its start.
            std::thread::sleep(Duration::from_millis(300));
            let backend_name = if round % 2 == 0 { "missing" } else { "web" };
            let signal = SystemTime::now();
            leader.terminate();
            handle.block_on(put(
                &routes,
                &route(&ns, "route", "gw", &[(&ns, backend_name, 80)]),
            ));
            let led = follower.wait_for_since(message::LEADING, signal, patience);
            let first = follower.wait_for_since(message::FIRST_WRITE, signal, patience);
            leader.wait_exit(patience);
            let stale_write = leader
                .lines()
                .iter()
                .any(|l| l.message() == message::WRITTEN && l.at >= signal);
            if stale_write {
                skipped += 1;
            } else {
                to_leader.push(ms(signal, led.at));
                to_write.push(ms(signal, first.at));
            }
            let next = replica(&format!("{name}-{}", round + 2), &args);
            leader = std::mem::replace(&mut follower, next);
            follower.wait_for(message::FOLLOWING, patience);
        }
        (to_leader, to_write, skipped)
    })
    .await
    .expect("rounds");
    summary(
        &format!("{name}: graceful, signal -> new leader"),
        &mut to_leader,
    );
    summary(
        &format!("{name}: graceful, signal -> first status write"),
        &mut to_write,
    );
    if skipped > 0 {
        println!(
            "{name}: {skipped} rounds not counted: the stopping leader wrote the change itself"
        );
    }
}

/// N routes computed by a follower; the lock holder (another controller) stops; the follower's
/// sweep writes every status.
async fn convergence(server: &'static KubeApiServer, n: usize) {
    let ns = "bench-scale".to_string();
    server.create_namespace(&ns).await.expect("namespace");
    let client = server.admin_client();
    let controller = "gateway-leader.dev/bench-scale".to_string();
    put(
        &Api::<GatewayClass>::all(client.clone()),
        &gateway_class(&ns, &controller),
    )
    .await;
    put(
        &Api::<Gateway>::namespaced(client.clone(), &ns),
        &gateway(&ns, "gw", &ns),
    )
    .await;
    put(
        &Api::<Service>::namespaced(client.clone(), &ns),
        &service(&ns, "web", 80),
    )
    .await;
    let routes: Api<HttpRoute> = Api::namespaced(client.clone(), &ns);
    let made = Instant::now();
    futures::future::join_all((0..n).map(|i| {
        let routes = routes.clone();
        let ns = ns.clone();
        async move {
            put(
                &routes,
                &route(&ns, &format!("r{i:05}"), "gw", &[(&ns, "web", 80)]),
            )
            .await
        }
    }))
    .await;
    println!(
        "scale: created {n} HTTPRoutes in {:.1} s",
        made.elapsed().as_secs_f64()
    );
    let base = vec![
        "--lock-backend".to_string(),
        "kubernetes".into(),
        "--leader-election-namespace".into(),
        ns.clone(),
        "--leader-election-lock-name".into(),
        "bench-scale-lock".into(),
        "--kubeconfig".into(),
        server.kubeconfig_path().display().to_string(),
    ];
    let apiserver_pid = server.pid();
    tokio::task::spawn_blocking(move || {
        let patience = Duration::from_secs(300);
        let mut holder_args = base.clone();
        holder_args.extend([
            "--controller-name".into(),
            "gateway-leader.dev/bench-none".into(),
        ]);
        let mut holder = replica("scale-holder", &holder_args);
        holder.wait_for(message::LEADING, patience);
        let mut args = base;
        args.extend(["--controller-name".into(), controller]);
        let mut writer = replica("scale-writer", &args);
        let computed = writer.wait_for("first statuses computed", patience);
        let objects = computed.json["objects"].as_u64().unwrap_or(0);
        let cpu_w = cpu_seconds(writer.pid()).unwrap_or(f64::NAN);
        let cpu_a = apiserver_pid.and_then(cpu_seconds).unwrap_or(f64::NAN);
        let signal = SystemTime::now();
        holder.terminate();
        let led = writer.wait_for_since(message::LEADING, signal, patience);
        let done = writer.wait_for_since(message::SWEEP_DONE, signal, patience);
        let written = done.json["written"].as_u64().unwrap_or(0);
        let took = ms(led.at, done.at) / 1e3;
        println!(
            "scale: {objects} statuses cached; after leading, {written} written in {took:.2} s \
             = {:.0} statuses/s (16 in flight)",
            written as f64 / took
        );
        println!(
            "scale: CPU during the sweep: gateway-leader {:.2} s, kube-apiserver {:.2} s \
             (of {took:.2} s wall on 2 cores)",
            cpu_seconds(writer.pid()).unwrap_or(f64::NAN) - cpu_w,
            apiserver_pid.and_then(cpu_seconds).unwrap_or(f64::NAN) - cpu_a,
        );
    })
    .await
    .expect("convergence");
}

fn main() {
    let o = options();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let server = apiserver().await;
        for b in &o.backends {
            graceful(server, b, o.rounds).await;
        }
        if o.routes > 0 {
            convergence(server, o.routes).await;
        }
    });
}
