//! Remote operations, one module per node kind. Each is a fixed POSIX `sh` script run
//! through `Transport::run`: values reach it only as quoted arguments or on stdin, never
//! spliced into script text, so no file name, package name or template value can inject a
//! command. Each call handles a batch in one round trip; per-item failures come back as
//! `Err(message)` beside the others' results, and only transport failures fail the call.
//!
//! Scripts answer on stdout with one tab-separated line per item, `OK\t<n>\t…` or
//! `ERR\t<n>\t<message>`, where `<n>` is the item's position: item values are never
//! echoed back, so nothing in them can confuse the parsing.

use std::collections::BTreeMap;

pub use crate::record::Facts;
use crate::transport::{CommandOutput, Transport, TransportError};

pub mod file;
pub mod package;
pub mod service;

/// A step's result on one item.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Applied {
    pub facts: Facts,
    /// The thing did not exist before this step made it.
    pub created: bool,
}

/// Runs `script` with `args` (`sh -c script envc args…`) and feeds `stdin`.
async fn run_script(
    t: &Transport,
    script: &str,
    args: &[String],
    stdin: &[u8],
) -> Result<CommandOutput, TransportError> {
    let mut argv: Vec<&str> = vec!["sh", "-c", script, "envc"];
    argv.extend(args.iter().map(String::as_str));
    t.run(&argv, stdin).await
}

/// Item lines by position: `OK`/`ERR`/`NO` and the remaining fields.
fn item_lines(out: &CommandOutput) -> BTreeMap<usize, (String, Vec<String>)> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let mut fields = l.split('\t');
            let tag = fields.next()?.to_string();
            let n: usize = fields.next()?.parse().ok()?;
            Some((n, (tag, fields.map(str::to_string).collect())))
        })
        .collect()
}

/// The message for an item the script gave no line for (it died half way).
fn missing(out: &CommandOutput) -> String {
    let err = String::from_utf8_lossy(&out.stderr);
    let tail: Vec<&str> = err.lines().rev().take(5).collect();
    format!(
        "the remote script stopped (exit {}) before this item{}",
        out.status.map_or("by signal".into(), |s| s.to_string()),
        if tail.is_empty() {
            String::new()
        } else {
            format!(
                ": {}",
                tail.into_iter().rev().collect::<Vec<_>>().join(" / ")
            )
        }
    )
}
