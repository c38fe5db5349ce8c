//! Output: colours on a terminal, and durations and lists as people read them.

use std::fmt::Display;
use std::io::IsTerminal;
use std::time::Duration;

/// How a piece of output is coloured (only on a terminal).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tone {
    Plain,
    Bold,
    Dim,
    Good,
    Bad,
    Unsure,
}

impl Tone {
    pub fn code(self) -> &'static str {
        match self {
            Tone::Plain => "",
            Tone::Bold => "1",
            Tone::Dim => "2",
            Tone::Good => "32",
            Tone::Bad => "31",
            Tone::Unsure => "33",
        }
    }
}

pub struct Out {
    pub color: bool,
}

impl Out {
    pub fn new() -> Out {
        Out {
            color: std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none(),
        }
    }

    pub fn paint(&self, tone: Tone, text: &str) -> String {
        if self.color && tone != Tone::Plain {
            format!("\x1b[{}m{text}\x1b[0m", tone.code())
        } else {
            text.to_string()
        }
    }

    pub fn step(&self, msg: impl Display) {
        println!("{} {msg}", self.paint(Tone::Bold, "[demo]"));
    }

    pub fn note(&self, msg: impl Display) {
        let msg = format!("note: {msg}");
        println!(
            "{} {}",
            self.paint(Tone::Bold, "[demo]"),
            self.paint(Tone::Unsure, &msg)
        );
    }

    pub fn heading(&self, msg: impl Display) {
        println!("\n{}", self.paint(Tone::Bold, &msg.to_string()));
    }
}

/// `31 ms`, `4.2 ms`, `5.31 s`.
pub fn human(d: Duration) -> String {
    let ms = d.as_secs_f64() * 1e3;
    if ms < 10.0 {
        format!("{ms:.1} ms")
    } else if ms < 1000.0 {
        format!("{ms:.0} ms")
    } else {
        format!("{:.2} s", d.as_secs_f64())
    }
}

/// "a", "a and b", "a, b and c".
pub fn list(items: &[String]) -> String {
    match items {
        [] => String::new(),
        [one] => one.clone(),
        [init @ .., last] => format!("{} and {last}", init.join(", ")),
    }
}
