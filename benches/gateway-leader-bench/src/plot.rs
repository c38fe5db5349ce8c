//! The SVG plot: every sample of every backend × scenario × wake-up, on a log time axis, with
//! each row's p50 and p99 marked, so the distributions (not only their summaries) can be read.

use std::path::{Path, PathBuf};

use anyhow::{anyhow, Result};
use plotters::prelude::*;

use crate::report::{Report, ScenarioResult};
use crate::stats::Summary;

/// One row of the plot: a label and its samples (ms).
struct Row {
    label: String,
    samples: Vec<f64>,
    watch: bool,
}

fn rows(report: &Report) -> Vec<Row> {
    let mut out = Vec::new();
    for r in &report.results {
        for (what, get) in [
            (
                "new leader",
                (|s| s.to_leader_ms) as fn(&crate::round::Sample) -> Option<f64>,
            ),
            ("first write", |s| s.to_write_ms),
        ] {
            let samples: Vec<f64> = r.samples.iter().filter_map(get).collect();
            if samples.is_empty() {
                continue;
            }
            out.push(Row {
                label: label(r, what),
                samples,
                watch: r.wakeup == "watch",
            });
        }
    }
    out
}

fn label(r: &ScenarioResult, what: &str) -> String {
    format!("{} {} {} → {what}", r.backend, r.scenario, r.wakeup)
}

/// Draws `failover.svg` into `dir`; returns its path.
pub fn draw(report: &Report, dir: &Path) -> Result<PathBuf> {
    let rows = rows(report);
    let path = dir.join("failover.svg");
    if rows.is_empty() {
        return Err(anyhow!("no samples to plot"));
    }
    let (lo, hi) = rows
        .iter()
        .flat_map(|r| r.samples.iter().copied())
        .fold((f64::INFINITY, 0f64), |(lo, hi), x| (lo.min(x), hi.max(x)));
    // Whole decades around the data, so the log axis reads in 1, 10, 100 ms…
    let lo = 10f64.powf(lo.max(0.1).log10().floor());
    let hi = 10f64.powf(hi.max(1.0).log10().ceil());
    let height = 120 + 22 * rows.len() as u32;
    let root = SVGBackend::new(&path, (1100, height)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| anyhow!("{e}"))?;
    let n = rows.len();
    let labels: Vec<String> = rows.iter().map(|r| r.label.clone()).collect();
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!(
                "gateway-leader failover: every sample from the signal ({} replicas; {})",
                report.replicas,
                report.timing.join(" ")
            ),
            ("sans-serif", 16),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(330)
        .build_cartesian_2d((lo..hi).log_scale(), -0.5f64..(n as f64 - 0.5))
        .map_err(|e| anyhow!("{e}"))?;
    chart
        .configure_mesh()
        .x_desc("milliseconds (log scale)")
        .y_labels(n)
        .y_label_formatter(&|y| {
            let i = y.round();
            if (y - i).abs() < 1e-6 && i >= 0.0 {
                labels.get(i as usize).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        })
        .draw()
        .map_err(|e| anyhow!("{e}"))?;
    for (i, row) in rows.iter().enumerate() {
        // Rows run top to bottom in report order.
        let y = (n - 1 - i) as f64;
        let color = if row.watch { BLUE } else { RED };
        let k = row.samples.len().max(1) as f64;
        chart
            .draw_series(row.samples.iter().enumerate().map(|(j, x)| {
                // A small vertical spread keeps equal samples apart.
                let dy = ((j as f64 / k) - 0.5) * 0.5;
                Circle::new((*x, y + dy), 2, color.mix(0.6).filled())
            }))
            .map_err(|e| anyhow!("{e}"))?;
        if let Some(s) = Summary::of(&row.samples) {
            for (x, w) in [(s.p50, 2), (s.p99, 1)] {
                chart
                    .draw_series(LineSeries::new(
                        [(x, y - 0.4), (x, y + 0.4)],
                        BLACK.stroke_width(w),
                    ))
                    .map_err(|e| anyhow!("{e}"))?;
            }
        }
    }
    root.present().map_err(|e| anyhow!("{e}"))?;
    drop(chart);
    drop(root);
    Ok(path)
}
