//! Reading a server's plain-HTTP endpoints (`/metrics`, `/health`) as Prometheus and probes do:
//! one blocking GET, and the sum of one metric's samples in Prometheus text.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use anyhow::{Context, Result};

/// One blocking plain-HTTP `GET path` on `addr`; the body of the answer, whatever its status.
///
/// # Errors
///
/// When nothing listens on `addr`, or it does not answer within a few seconds.
pub fn get(addr: SocketAddr, path: &str) -> Result<String> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(1))
        .with_context(|| format!("connecting to {addr}"))?;
    // A frozen server answers nothing: give up rather than hang the caller.
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    // HTTP/1.0: the server closes when done, so the body ends where the stream does.
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n")
        .with_context(|| format!("sending GET {path} to {addr}"))?;
    let mut text = String::new();
    s.read_to_string(&mut text)
        .with_context(|| format!("reading the answer to GET {path} from {addr}"))?;
    Ok(text
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_string())
        .unwrap_or_default())
}

/// Sums the samples of `metric` (optionally only those whose labels contain `label`, such as
/// `outcome="refused"`) in Prometheus text; 0 when there is none.
pub fn sum(text: &str, metric: &str, label: Option<&str>) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| {
            l.strip_prefix(metric)
                .is_some_and(|r| r.starts_with('{') || r.starts_with(' '))
        })
        .filter(|l| label.is_none_or(|x| l.contains(x)))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        // An empty sum of floats is -0, which prints as such.
        .fold(0.0, |total, v| total + v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_only_the_named_metric_and_its_matching_labels() {
        let t = "# HELP x_total x\nx_total{a=\"1\"} 3\nx_total{a=\"2\"} 3.5\nx_total_more 9\ny 1\n";
        assert_eq!(sum(t, "x_total", None), 6.5);
        assert_eq!(sum(t, "x_total", Some("a=\"2\"")), 3.5);
        assert_eq!(sum(t, "absent", None), 0.0);
    }
}
