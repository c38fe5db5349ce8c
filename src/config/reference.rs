//! The settings reference in docs/configuration.md, generated from the flags clap accepts and
//! [`SETTINGS`], both expanded from each setting's one definition (`settings.rs`), so the
//! document cannot drift from what the binary accepts.
//! `tests/docs.rs` fails when the document is stale and rewrites it with `GATEWAY_LEADER_BLESS=1`.

use clap::Args;

use super::names::{env_var, flag};
use super::settings::{RunArgs, SETTINGS};

/// The Markdown table of every setting of `gateway-leader run`: flag, environment variable,
/// file key, default and meaning, in the order `gateway-leader run --help` lists them, then the
/// secrets that have no flag.
///
/// # Panics
/// When a flag has no entry in [`SETTINGS`] or a non-secret setting has no flag: the expansion
/// of the settings' definition is broken, which this reference must not paper over.
pub fn settings_table() -> String {
    let run = RunArgs::augment_args(clap::Command::new("run"));
    let mut out = String::from(
        "| flag | environment | file key | default | meaning |\n|---|---|---|---|---|\n",
    );
    // One table row; a `|` inside a cell would end it early.
    let mut row = |cells: [&str; 5]| {
        let cells: Vec<String> = cells.iter().map(|c| c.replace('|', "\\|")).collect();
        out.push_str(&format!("| {} |\n", cells.join(" | ")));
    };
    let mut flagged = Vec::new();
    for arg in run.get_arguments() {
        let Some(long) = arg.get_long() else { continue };
        if matches!(long, "help" | "version") {
            continue;
        }
        let key = long.replace('-', "_");
        let value = arg
            .get_value_names()
            .and_then(|v| v.first())
            .filter(|_| arg.get_action().takes_values())
            .map(|v| format!(" {v}"))
            .unwrap_or_default();
        let flag_cell = format!("`--{long}{value}`");
        match SETTINGS.iter().find(|s| s.key == key) {
            Some(spec) => {
                let default = spec.default.map(|d| format!("`{d}`")).unwrap_or_default();
                row([
                    &flag_cell,
                    &format!("`{}`", env_var(&key)),
                    &format!("`{key}`"),
                    &default,
                    spec.help,
                ]);
                flagged.push(key);
            }
            None => {
                // `--config` and `--print-config` choose where settings come from and what to do
                // with them; they are not settings themselves.
                let env = arg
                    .get_env()
                    .map(|e| format!("`{}`", e.to_string_lossy()))
                    .unwrap_or_default();
                let help = arg.get_help().map(|h| h.to_string()).unwrap_or_default();
                assert!(
                    matches!(key.as_str(), "config" | "print_config"),
                    "--{long} has no entry in SETTINGS"
                );
                row([&flag_cell, &env, "", "", &help]);
            }
        }
    }
    for spec in SETTINGS {
        if flagged.iter().any(|k| k == spec.key) {
            continue;
        }
        assert!(
            spec.secret,
            "setting {} has no flag ({})",
            spec.key,
            flag(spec.key)
        );
        row([
            "(none: a secret never goes on the command line)",
            &format!("`{}`", env_var(spec.key)),
            &format!("`{}`", spec.key),
            "",
            spec.help,
        ]);
    }
    out
}
