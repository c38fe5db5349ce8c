//! `gateway-leader-bench plot-scale`: the `scale` scenario's figures at several sizes as one SVG,
//! six panels over the route count (log scale): RSS per replica, the first write-out, requests
//! per takeover, the changed route's latency after a takeover, the takeover check and the burst's
//! share of the apiserver's write rate, each beside its target where it has one
//! (docs/benchmarks.md, "Scale: thousands of routes").
//!
//! It reads what `run --scenario scale` saved (`scale.json`, one per size), so each size is one
//! run and the plot adds no measurement of its own.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use plotters::prelude::*;
use serde::Deserialize;

use crate::EXIT_USAGE;

/// The most files one plot reads.
const MAX_INPUTS: usize = 64;
/// A `scale.json` is a few hundred bytes per backend; anything far larger is not one.
const MAX_INPUT_BYTES: u64 = 1 << 20;

/// Flags of `gateway-leader-bench plot-scale`.
#[derive(Debug, Args)]
pub struct PlotScaleArgs {
    /// The SVG to write.
    #[arg(long, default_value = "scale.svg", value_name = "FILE")]
    pub out: PathBuf,
    /// `scale.json` files, or the `--out` dirs of `run --scenario scale` that hold them.
    #[arg(required = true, value_name = "SCALE_JSON_OR_DIR")]
    pub inputs: Vec<PathBuf>,
}

/// What the plot reads of a `scale.json` row (`crate::scale::ScaleResult`); other fields are
/// ignored, so older and newer files both read.
#[derive(Debug, Clone, Deserialize)]
struct Point {
    backend: String,
    routes: usize,
    initial_ms: f64,
    rss_mib: Vec<f64>,
    /// Absent from files written before the bench read it.
    #[serde(default)]
    peak_rss_mib: Vec<f64>,
    new_leader_rss_mib: f64,
    check_ms: f64,
    change_write_ms: f64,
    takeover_requests: f64,
    apiserver_writes_per_s: f64,
    status_writes_per_s: f64,
}

impl Point {
    /// The largest replica's RSS, at its peak where the file has it: the leader, the follower
    /// or the new leader.
    fn rss(&self) -> f64 {
        self.rss_mib
            .iter()
            .chain(&self.peak_rss_mib)
            .copied()
            .chain([self.new_leader_rss_mib])
            .fold(0.0, f64::max)
    }

    fn burst_share(&self) -> f64 {
        if self.apiserver_writes_per_s > 0.0 {
            self.status_writes_per_s / self.apiserver_writes_per_s * 100.0
        } else {
            0.0
        }
    }
}

/// One panel: a title, how a point reads on it, and a target (an orange line) if it has one.
struct Panel {
    title: &'static str,
    value: fn(&Point) -> f64,
    target: Option<f64>,
    log: bool,
}

const PANELS: [Panel; 6] = [
    Panel {
        title: "RSS of the largest replica at its peak (MiB); target 150 at 50,000",
        value: Point::rss,
        target: Some(150.0),
        log: false,
    },
    Panel {
        title: "first write-out of every route (s)",
        value: |p| p.initial_ms / 1e3,
        target: None,
        log: true,
    },
    Panel {
        title: "requests per takeover (apiserver's count)",
        value: |p| p.takeover_requests,
        target: None,
        log: false,
    },
    Panel {
        title: "new leader leads → changed route written (ms); target 20",
        value: |p| p.change_write_ms,
        target: Some(20.0),
        log: false,
    },
    Panel {
        title: "new leader leads → every cached status checked (ms)",
        value: |p| p.check_ms,
        target: None,
        log: true,
    },
    Panel {
        title: "burst: status writes / apiserver writes (%); target 90",
        value: Point::burst_share,
        target: Some(90.0),
        log: false,
    },
];

/// Runs `plot-scale`; returns the exit code.
pub fn main(args: PlotScaleArgs) -> ExitCode {
    if !is_svg(&args.out) {
        eprintln!("gateway-leader-bench plot-scale: --out must name an .svg file");
        return ExitCode::from(EXIT_USAGE);
    }
    let points = match read_all(&args.inputs) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("gateway-leader-bench plot-scale: {e:#}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    match draw(&points, &args.out) {
        Ok(()) => {
            println!("plot: {}", args.out.display());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!(
                "gateway-leader-bench plot-scale: writing {}: {e:#}",
                args.out.display()
            );
            ExitCode::FAILURE
        }
    }
}

/// Every point of every input, checked.
fn read_all(inputs: &[PathBuf]) -> Result<Vec<Point>> {
    if inputs.len() > MAX_INPUTS {
        bail!("{} inputs: at most {MAX_INPUTS}", inputs.len());
    }
    let mut points = Vec::new();
    for input in inputs {
        let file = if input.is_dir() {
            input.join("scale.json")
        } else {
            input.clone()
        };
        points.extend(read(&file)?);
    }
    if points.is_empty() {
        bail!("the inputs hold no figures");
    }
    Ok(points)
}

fn read(file: &Path) -> Result<Vec<Point>> {
    let size = std::fs::metadata(file)
        .with_context(|| format!("{}: not a scale.json or a dir holding one", file.display()))?
        .len();
    if size > MAX_INPUT_BYTES {
        bail!(
            "{}: {size} bytes, more than a scale.json holds ({MAX_INPUT_BYTES} at most)",
            file.display()
        );
    }
    let text = std::fs::read_to_string(file).with_context(|| format!("{}", file.display()))?;
    let points: Vec<Point> = serde_json::from_str(&text)
        .with_context(|| format!("{}: not what `run --scenario scale` saves", file.display()))?;
    for p in &points {
        let finite = [
            p.initial_ms,
            p.rss(),
            p.check_ms,
            p.change_write_ms,
            p.takeover_requests,
            p.burst_share(),
        ]
        .iter()
        .all(|v| v.is_finite() && *v >= 0.0);
        if p.routes == 0 || !finite {
            bail!(
                "{}: a row with no routes or a figure that is not a number",
                file.display()
            );
        }
    }
    Ok(points)
}

/// The backends in the order they first appear, each with its colour.
fn backends(points: &[Point]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for p in points {
        if !out.contains(&p.backend) {
            out.push(p.backend.clone());
        }
    }
    out
}

fn colour(i: usize) -> RGBColor {
    [BLUE, RED, GREEN, MAGENTA, CYAN, BLACK][i % 6]
}

/// Whole decades around `lo..hi`, for a log axis that reads 1, 10, 100…
fn decades(lo: f64, hi: f64) -> (f64, f64) {
    let lo = 10f64.powf(lo.max(1e-3).log10().floor());
    let hi = 10f64.powf(hi.max(lo * 10.0).log10().ceil());
    (lo, hi)
}

fn is_svg(out: &Path) -> bool {
    out.extension().and_then(|e| e.to_str()) == Some("svg")
}

fn draw(points: &[Point], out: &Path) -> Result<()> {
    if !is_svg(out) {
        bail!("--out must name an .svg file");
    }
    let root = SVGBackend::new(out, (1200, 1140)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| anyhow!("{e}"))?;
    let root = root
        .titled(
            "gateway-leader at scale: two replicas over N HTTPRoutes of one Gateway \
             (one run per size)",
            ("sans-serif", 18),
        )
        .map_err(|e| anyhow!("{e}"))?;
    let names = backends(points);
    let (xlo, xhi) = decades(
        points
            .iter()
            .map(|p| p.routes as f64)
            .fold(f64::INFINITY, f64::min),
        points.iter().map(|p| p.routes as f64).fold(0.0, f64::max),
    );
    for (area, panel) in root.split_evenly((3, 2)).iter().zip(PANELS.iter()) {
        let values: Vec<f64> = points.iter().map(panel.value).collect();
        let top = values
            .iter()
            .copied()
            .chain(panel.target)
            .fold(0.0, f64::max);
        let mut chart = ChartBuilder::on(area);
        chart
            .caption(panel.title, ("sans-serif", 14))
            .margin(10)
            .margin_right(30)
            .x_label_area_size(30)
            .y_label_area_size(50);
        // Two axis types (the chart's type differs), one drawing: the series code once.
        macro_rules! plot {
            ($chart:expr) => {{
                let mut c = $chart.map_err(|e| anyhow!("{e}"))?;
                c.configure_mesh()
                    .x_desc("routes (log scale)")
                    .x_label_formatter(&|x| format!("{}", *x as u64))
                    .draw()
                    .map_err(|e| anyhow!("{e}"))?;
                if let Some(t) = panel.target {
                    c.draw_series(LineSeries::new(
                        [(xlo, t), (xhi, t)],
                        RGBColor(230, 130, 0).stroke_width(2),
                    ))
                    .map_err(|e| anyhow!("{e}"))?;
                }
                for (i, name) in names.iter().enumerate() {
                    let mut line: Vec<(f64, f64)> = points
                        .iter()
                        .filter(|p| &p.backend == name)
                        .map(|p| (p.routes as f64, (panel.value)(p)))
                        .collect();
                    line.sort_by(|a, b| a.0.total_cmp(&b.0));
                    let col = colour(i);
                    c.draw_series(LineSeries::new(line.clone(), col.stroke_width(2)))
                        .map_err(|e| anyhow!("{e}"))?
                        .label(name.as_str())
                        .legend(move |(x, y)| {
                            PathElement::new([(x, y), (x + 16, y)], col.stroke_width(2))
                        });
                    c.draw_series(line.iter().map(|pt| Circle::new(*pt, 3, col.filled())))
                        .map_err(|e| anyhow!("{e}"))?;
                }
                c.configure_series_labels()
                    .position(SeriesLabelPosition::UpperLeft)
                    .background_style(WHITE.mix(0.8))
                    .border_style(BLACK)
                    .draw()
                    .map_err(|e| anyhow!("{e}"))?;
            }};
        }
        if panel.log {
            let lo = values.iter().copied().fold(f64::INFINITY, f64::min);
            let (ylo, yhi) = decades(lo, top);
            plot!(chart.build_cartesian_2d((xlo..xhi).log_scale(), (ylo..yhi).log_scale()));
        } else {
            plot!(chart.build_cartesian_2d((xlo..xhi).log_scale(), 0.0..top * 1.15 + 1.0));
        }
    }
    root.present().map_err(|e| anyhow!("{e}"))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(backend: &str, routes: usize, rss: f64) -> serde_json::Value {
        serde_json::json!({
            "backend": backend, "routes": routes, "initial_ms": routes as f64 * 3.0,
            "rss_mib": [rss, rss - 1.0], "takeover_ms": 9.0, "check_ms": 5.0,
            "change_write_ms": 6.0, "takeover_requests": 4.0, "new_leader_rss_mib": rss,
            "burst": 1000, "apiserver_writes_per_s": 250.0, "status_writes_per_s": 240.0,
            "a_field_a_newer_bench_adds": true
        })
    }

    #[test]
    fn sizes_from_several_runs_make_one_plot_with_every_panel() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut inputs = Vec::new();
        for (i, routes) in [1_000, 10_000, 50_000].into_iter().enumerate() {
            let d = dir.path().join(format!("run-{i}"));
            std::fs::create_dir(&d).expect("dir");
            let rows = serde_json::json!([
                row("kubernetes", routes, 20.0 + i as f64 * 40.0),
                row("etcd", routes, 21.0 + i as f64 * 40.0)
            ]);
            std::fs::write(d.join("scale.json"), rows.to_string()).expect("write");
            inputs.push(d);
        }
        let points = read_all(&inputs).expect("the figures read");
        assert_eq!(points.len(), 6);
        let out = dir.path().join("scale.svg");
        draw(&points, &out).expect("the plot is drawn");
        let svg = std::fs::read_to_string(&out).expect("the SVG");
        for p in &PANELS {
            let head = p.title.split(" (").next().expect("a title");
            assert!(svg.contains(head), "{head:?} is not in the plot");
        }
        assert!(svg.contains("kubernetes") && svg.contains("etcd"));
    }

    #[test]
    fn what_is_not_a_scale_json_is_refused_naming_the_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let junk = dir.path().join("junk.json");
        std::fs::write(&junk, "{\"not\": \"rows\"}").expect("write");
        let e = read_all(std::slice::from_ref(&junk)).expect_err("refused");
        assert!(format!("{e:#}").contains("junk.json"), "{e:#}");
        let nan = dir.path().join("nan.json");
        let mut r = row("redis", 0, 1.0);
        r["routes"] = 0.into();
        std::fs::write(&nan, serde_json::json!([r]).to_string()).expect("write");
        let e = read_all(std::slice::from_ref(&nan)).expect_err("refused");
        assert!(format!("{e:#}").contains("no routes"), "{e:#}");
        let missing = dir.path().join("nowhere");
        assert!(read_all(&[missing]).is_err());
        let e = draw(&[], &dir.path().join("plot.png")).expect_err("not an SVG");
        assert!(format!("{e:#}").contains(".svg"), "{e:#}");
    }
}
