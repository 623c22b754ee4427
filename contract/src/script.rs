//! How remote operations run: each node kind's operations on a target (`kinds/*/remote.rs`)
//! are fixed POSIX `sh` scripts.
//!
//! Each operation is one fixed POSIX `sh` script (the `*.sh` files beside its module, embedded
//! at build time) run through [`Transport::run`] as `sh -c SCRIPT envc ARG…`. Values — paths,
//! owners, package and unit names — reach the script only as arguments, which the transport
//! quotes, or on stdin (file contents, as a tar archive); no value is ever spliced into script
//! text. Operations are batched: one `run` per call, however many items it has.
//!
//! Scripts report one tab-separated record per item on stdout (`R<TAB>INDEX<TAB>…`), in a
//! format private to the script and its parser here. A failure of one item is an `Err(String)`
//! in the returned vector, naming the item and the cause; a failure to reach the target is the
//! outer [`TransportError`].

use crate::transport::{CommandOutput, Transport, TransportError};
pub use envc_lockfiles::fetch::sha256_hex;

/// `$0` of the scripts, as it appears in their own error messages.
const SCRIPT_NAME: &str = "envc";

/// Runs `script` with `args` as its positional parameters and `stdin` as its input.
pub async fn run_script(
    t: &Transport,
    script: &str,
    args: &[&str],
    stdin: &[u8],
) -> Result<CommandOutput, TransportError> {
    run_script_within(t, script, args, stdin, None).await
}

/// [`run_script`], waiting `timeout` for it instead of the transport's command timeout.
pub async fn run_script_within(
    t: &Transport,
    script: &str,
    args: &[&str],
    stdin: &[u8],
    timeout: Option<std::time::Duration>,
) -> Result<CommandOutput, TransportError> {
    t.run_within(&script_argv(script, args), stdin, timeout)
        .await
}

/// [`run_script`], its standard input made of `input` (files streamed from disk).
pub async fn run_script_streamed(
    t: &Transport,
    script: &str,
    args: &[&str],
    input: &[crate::transport::Input<'_>],
) -> Result<CommandOutput, TransportError> {
    t.run_streamed(&script_argv(script, args), input, None)
        .await
}

pub fn script_argv<'a>(script: &'a str, args: &[&'a str]) -> Vec<&'a str> {
    let mut argv = Vec::with_capacity(args.len() + 4);
    argv.extend_from_slice(&["sh", "-c", script, SCRIPT_NAME]);
    argv.extend_from_slice(args);
    argv
}

/// Values for a script's stdin, which it reads with the shell's own `read` (byte by byte:
/// what follows stays for the command) and decodes with `base64 -d`: one line each,
/// `[NAME ]BASE64`, then a line `.`. So no value is ever on a command line, where `ps` on
/// the target (or on this machine, for ssh's) would show it.
pub fn stdin_block<'a>(items: impl IntoIterator<Item = (Option<&'a str>, &'a str)>) -> Vec<u8> {
    use base64::Engine as _;
    let mut out = Vec::new();
    for (name, value) in items {
        if let Some(n) = name {
            out.extend_from_slice(n.as_bytes());
            out.push(b' ');
        }
        out.extend_from_slice(
            base64::engine::general_purpose::STANDARD
                .encode(value)
                .as_bytes(),
        );
        out.push(b'\n');
    }
    out.extend_from_slice(b".\n");
    out
}

/// The records a script printed: the lines of stdout starting with `tag` and a tab, split on
/// tabs (without the tag).
pub fn records<'a>(out: &'a CommandOutput, tag: &str) -> Vec<Vec<&'a str>> {
    let text = std::str::from_utf8(&out.stdout).unwrap_or("");
    text.lines()
        .filter_map(|line| {
            let mut fields = line.split('\t');
            (fields.next() == Some(tag)).then(|| fields.collect())
        })
        .collect()
}

/// Records indexed by their first field (an item index below `n`); later ones win.
pub fn indexed(recs: Vec<Vec<&str>>, n: usize) -> Vec<Option<Vec<&str>>> {
    let mut by_index = vec![None; n];
    for mut rec in recs {
        if rec.is_empty() {
            continue;
        }
        if let Ok(i) = rec.remove(0).parse::<usize>() {
            if i < n {
                by_index[i] = Some(rec);
            }
        }
    }
    by_index
}

/// The last lines of a command's stderr, for messages about a script that failed as a whole.
pub fn stderr_tail(out: &CommandOutput) -> String {
    tail(&String::from_utf8_lossy(&out.stderr), 10)
}

pub fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Why a script printed no record for an item.
pub fn no_record(out: &CommandOutput) -> String {
    let status = out
        .status
        .map_or("was killed by a signal".to_string(), |s| {
            format!("exited with status {s}")
        });
    let err = stderr_tail(out);
    if err.is_empty() {
        format!("the remote script {status} without reporting a result")
    } else {
        format!("the remote script {status} without reporting a result: {err}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_are_parsed_by_tag_and_index() {
        let out = CommandOutput {
            status: Some(0),
            stdout: b"noise\nR\t1\tok\tx\nR\t0\terr\tbad thing\nR\t7\tok\nR\tx\tok\nB\t0\n"
                .to_vec(),
            stderr: vec![],
        };
        let recs = indexed(records(&out, "R"), 2);
        assert_eq!(recs[0], Some(vec!["err", "bad thing"]));
        assert_eq!(recs[1], Some(vec!["ok", "x"]));
        assert_eq!(records(&out, "B"), vec![vec!["0"]]);
    }

    #[test]
    fn sha256_is_hex() {
        assert_eq!(
            sha256_hex(b""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }
}
