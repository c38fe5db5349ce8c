//! The `--config` file: bounded, UTF-8, TOML or YAML without anchors, only known keys.

use std::collections::BTreeSet;
use std::path::Path;

use leader_lock::input::read_bounded;

use super::error::ConfigError;
use super::settings::{CONFIG_KEY, SETTINGS};

/// Reads the `--config` file: a regular file of at most 1 MiB, UTF-8, in a format known by its
/// extension, YAML without anchors or aliases, and only known keys. The bytes are read once, with
/// the bound, and handed to `config` as a string, so that `config` never opens the file itself.
pub(super) fn read_file(
    path: &Path,
) -> Result<config::File<config::FileSourceString, config::FileFormat>, ConfigError> {
    let key = CONFIG_KEY;
    let shown = path.display();
    let format = match path.extension().and_then(|e| e.to_str()) {
        Some("toml") => config::FileFormat::Toml,
        Some("yaml" | "yml") => config::FileFormat::Yaml,
        _ => {
            return Err(ConfigError::invalid(
                key,
                format!("{shown}: unknown format; accepted: a .toml, .yaml or .yml file"),
            ))
        }
    };
    let bytes = read_bounded(path).map_err(|e| ConfigError::invalid(key, e))?;
    let text = String::from_utf8(bytes)
        .map_err(|_| ConfigError::invalid(key, format!("{shown} is not UTF-8 text")))?;
    if format == config::FileFormat::Yaml {
        check_yaml(&text).map_err(|e| ConfigError::invalid(key, format!("{shown}: {e}")))?;
    }
    // Unknown keys in a file are typos: refuse them rather than silently ignore them.
    let parsed = config::Config::builder()
        .add_source(config::File::from_str(&text, format))
        .build()
        .map_err(|e| {
            ConfigError::invalid(key, format!("{shown}: {}", without_excerpt(&e.to_string())))
        })?;
    let table = parsed
        .cache
        .into_table()
        .map_err(|e| ConfigError::invalid(key, format!("{shown}: {e}")))?;
    let known: BTreeSet<&str> = SETTINGS.iter().map(|s| s.key).collect();
    let unknown: Vec<String> = table
        .keys()
        .filter(|k| !known.contains(k.as_str()))
        .cloned()
        .collect();
    if !unknown.is_empty() {
        return Err(ConfigError::invalid(
            key,
            format!(
                "{shown}: unknown setting(s) {}; \
                 see `gateway-leader run --help` for the accepted keys",
                unknown.join(", ")
            ),
        ));
    }
    Ok(config::File::from_str(&text, format))
}

/// How deep a settings file may nest: settings are flat (a list of endpoints is the deepest), so
/// this is generous, and it keeps the recursive conversion inside `config` far from the stack's
/// end.
const MAX_YAML_DEPTH: usize = 16;

/// Checks a YAML settings file with the YAML event parser that `config` itself uses, before
/// `config` loads it: no anchors or aliases, because `config` expands every alias into a copy (a
/// "billion laughs" file of a few hundred bytes grows without bound) and flat settings have no use
/// for them; and no nesting beyond [`MAX_YAML_DEPTH`].
fn check_yaml(text: &str) -> Result<(), String> {
    use yaml_rust2::parser::{Event, Parser};
    let mut parser = Parser::new_from_str(text);
    let mut depth = 0usize;
    loop {
        let (event, mark) = parser.next_token().map_err(|e| e.to_string())?;
        let refused = match event {
            Event::StreamEnd => return Ok(()),
            Event::Alias(_) => true,
            Event::SequenceStart(anchor, _) | Event::MappingStart(anchor, _) => {
                depth += 1;
                if depth > MAX_YAML_DEPTH {
                    return Err(format!(
                        "nested deeper than {MAX_YAML_DEPTH} levels (at line {} column {})",
                        mark.line(),
                        mark.col() + 1
                    ));
                }
                anchor != 0
            }
            Event::SequenceEnd | Event::MappingEnd => {
                depth = depth.saturating_sub(1);
                false
            }
            Event::Scalar(_, _, anchor, _) => anchor != 0,
            _ => false,
        };
        if refused {
            return Err(format!(
                "YAML anchors and aliases are not accepted (at line {} column {}); \
                 write the value out",
                mark.line(),
                mark.col() + 1
            ));
        }
    }
}

/// A parser's message on one line, without the excerpt of the offending line that TOML and
/// kubeconfig errors carry: that line may hold a password or a token.
pub(crate) fn without_excerpt(message: &str) -> String {
    message
        .lines()
        .map(str::trim)
        .filter(|l| {
            let excerpt = l
                .trim_start_matches(|c: char| c.is_ascii_digit())
                .trim_start()
                .starts_with('|')
                || l.starts_with("-->");
            !l.is_empty() && !excerpt
        })
        .collect::<Vec<_>>()
        .join(": ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn yaml_without_anchors_and_shallow() {
        assert_eq!(check_yaml("a: 1\nb: [x, y]\n"), Ok(()));
        let e = check_yaml("a: &x 1\nb: *x\n").unwrap_err();
        assert!(
            e.contains("anchors and aliases") && e.contains("line 1"),
            "{e}"
        );
        let deep = format!("a: {}{}", "[".repeat(20), "]".repeat(20));
        assert!(check_yaml(&deep).unwrap_err().contains("deeper than 16"));
        assert!(check_yaml("a: [").is_err());
    }

    #[test]
    fn parser_excerpts_are_dropped() {
        let toml = "TOML parse error at line 1, column 17\n  |\n\
                    1 | redis_password = \"secret\n  |                 ^\n\
                    invalid basic string\n";
        assert_eq!(
            without_excerpt(toml),
            "TOML parse error at line 1, column 17: invalid basic string"
        );
    }
}
