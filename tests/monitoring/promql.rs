//! The metric names a PromQL expression reads, for checking them against what the binary
//! serves. Enough of PromQL for the rules and the dashboard: strings, label matchers, ranges and
//! grouping lists are dropped, and what is left that is neither a function, an aggregation, a
//! keyword nor a number is a metric name.

use std::collections::BTreeSet;

/// Words that are never metric names here: aggregations, operators and modifiers.
const KEYWORDS: &[&str] = &[
    "sum",
    "min",
    "max",
    "avg",
    "group",
    "stddev",
    "stdvar",
    "count",
    "count_values",
    "bottomk",
    "topk",
    "quantile",
    "limitk",
    "limit_ratio",
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "and",
    "or",
    "unless",
    "bool",
    "offset",
    "atan2",
    "inf",
    "nan",
];
/// Modifiers followed by a parenthesized list of label names.
const LISTS: &[&str] = &[
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
];

/// The metric names `expr` reads.
pub fn metric_names(expr: &str) -> BTreeSet<String> {
    let bare = drop_lists(&drop_enclosed(&drop_strings(expr)));
    let chars: Vec<char> = bare.chars().collect();
    let mut names = BTreeSet::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_ascii_digit() || (c == '.' && chars.get(i + 1).is_some_and(char::is_ascii_digit)) {
            // A number or a duration (1h, 0.99, 1e3): its letters are not a name.
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '.') {
                i += 1;
            }
            continue;
        }
        if is_start(c) {
            let start = i;
            while i < chars.len() && is_part(chars[i]) {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            let next = chars[i..].iter().find(|c| !c.is_whitespace());
            if next != Some(&'(') && !KEYWORDS.contains(&word.to_ascii_lowercase().as_str()) {
                names.insert(word);
            }
            continue;
        }
        i += 1;
    }
    names
}

fn is_start(c: char) -> bool {
    c.is_ascii_alphabetic() || c == '_' || c == ':'
}

fn is_part(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == ':'
}

/// `expr` without its string literals (label values, `label_replace` arguments).
fn drop_strings(expr: &str) -> String {
    let mut out = String::new();
    let mut quote: Option<char> = None;
    let mut escaped = false;
    for c in expr.chars() {
        match quote {
            Some(q) => {
                if escaped {
                    escaped = false;
                } else if c == '\\' && q != '`' {
                    escaped = true;
                } else if c == q {
                    quote = None;
                }
            }
            None if matches!(c, '"' | '\'' | '`') => quote = Some(c),
            None => out.push(c),
        }
    }
    out
}

/// `expr` without what is in braces (label matchers) and brackets (ranges, subqueries).
fn drop_enclosed(expr: &str) -> String {
    let mut out = String::new();
    let mut depth = 0usize;
    for c in expr.chars() {
        match c {
            '{' | '[' => depth += 1,
            '}' | ']' => depth = depth.saturating_sub(1),
            _ if depth == 0 => out.push(c),
            _ => {}
        }
    }
    out
}

/// `expr` without the label lists of `by (...)`, `on (...)` and the like.
fn drop_lists(expr: &str) -> String {
    let chars: Vec<char> = expr.chars().collect();
    let mut out = String::new();
    let mut i = 0;
    while i < chars.len() {
        if is_start(chars[i]) && (i == 0 || !is_part(chars[i - 1])) {
            let start = i;
            while i < chars.len() && is_part(chars[i]) {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            out.push_str(&word);
            if LISTS.contains(&word.to_ascii_lowercase().as_str()) {
                let mut j = i;
                while j < chars.len() && chars[j].is_whitespace() {
                    j += 1;
                }
                if chars.get(j) == Some(&'(') {
                    match chars[j..].iter().position(|c| *c == ')') {
                        Some(end) => i = j + end + 1,
                        None => i = chars.len(),
                    }
                    out.push(' ');
                }
            }
            continue;
        }
        out.push(chars[i]);
        i += 1;
    }
    out
}

#[test]
fn names_are_found_past_functions_aggregations_matchers_and_lists() {
    let names = |e: &str| metric_names(e).into_iter().collect::<Vec<_>>();
    assert_eq!(
        names(
            r#"histogram_quantile(0.99, sum by (le, op) (rate(a_bucket{job=~"$job", x="sum(y)"}[$__rate_interval])))"#
        ),
        ["a_bucket"]
    );
    assert_eq!(
        names("max by (namespace, job) (m == 1 and on (job, instance) t > 0) < max_over_time(t[1h] offset 5m)"),
        ["m", "t"]
    );
    assert_eq!(
        names("count(x > 0) or vector(0) + sum without (a) (y) * on (i) group_left (z) w"),
        ["w", "x", "y"]
    );
    assert_eq!(names("1e3 * 0.5 + 2"), Vec::<String>::new());
}
