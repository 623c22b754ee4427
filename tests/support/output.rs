//! Reading what the envc binary printed, for the end-to-end tests.

// Each test binary that includes this uses only part of it.
#![allow(dead_code)]

use std::process::Output;

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Everything a command printed, for assertion messages.
pub fn text(o: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// The `N ran, M cached, …` summary as (ran, cached, failed).
pub fn summary(o: &Output) -> (usize, usize, usize) {
    let out = String::from_utf8_lossy(&o.stdout);
    let line = out
        .lines()
        .find(|l| l.contains(" ran, "))
        .unwrap_or_else(|| panic!("no summary in {}", text(o)));
    let num = |what: &str| -> usize {
        line.split(", ")
            .chain(line.split(": "))
            .find_map(|p| {
                p.trim()
                    .strip_suffix(what)
                    .and_then(|n| n.rsplit(' ').next()?.trim().parse().ok())
            })
            .unwrap_or_else(|| panic!("no `{what}` in {line:?}"))
    };
    (num(" ran"), num(" cached"), num(" failed"))
}

/// What each node's step ended as in a `build --json`, by node key (`cached`, `ok: …`).
pub fn node_outcomes(o: &Output) -> std::collections::BTreeMap<String, String> {
    stdout(o)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|e| e["event"] == "node")
        .map(|e| {
            (
                e["node"].as_str().unwrap().to_string(),
                e["outcome"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}
