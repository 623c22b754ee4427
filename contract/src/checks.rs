//! Checks: a node's preconditions (`require`, run on its target before its step changes
//! anything) and postconditions (`expect`, run after its step, and again whenever they
//! change). Each is one probe (`checks.sh`), retried once a second until it holds or its
//! timeout passes; its output is kept (bounded), with its source location, in the run
//! record.
//!
//! Checks are not part of a node's id or resolved hash: a check does not change what is on
//! the target. Postconditions have a hash of their own (`checks_hash`), kept in the node's
//! record; when it differs, the node is planned `check`: its postconditions run again, and
//! nothing is redeployed.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use envc_compiler::builtins::{check_schema, Default};
use envc_compiler::types::CheckKind;

use serde_json::{json, Value as Json};

use crate::error::StepError;
use crate::spec::Val;
use crate::transport::Transport;

/// The probe script; values reach it only as arguments.
const SCRIPT: &str = include_str!("checks.sh");

/// How long one attempt may take (a probe of an address that drops packets would
/// otherwise wait for the kernel's connect timeout).
const ATTEMPT_LIMIT: Duration = Duration::from_secs(10);
/// Pause between attempts.
const RETRY_EVERY: Duration = Duration::from_secs(1);
/// Output kept from an attempt, in bytes (the tail).
const OUTPUT_LIMIT: usize = 4096;

pub use crate::record::{CheckResult, Phase};

/// A check with its deferred values substituted: what runs on the target.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckSpec {
    pub phase: Phase,
    pub kind: CheckKind,
    pub args: BTreeMap<String, Val>,
    /// `FILE:LINE:COL` where it was written.
    pub location: String,
}

impl CheckSpec {
    /// `http("http://10.89.0.2/")`, `command("etcdctl …", stdout_contains = "3")`: the
    /// first argument, then the others that differ from their defaults.
    pub fn describe(&self) -> String {
        describe(self.kind, &self.args, &|_| String::new())
    }

    pub fn timeout(&self) -> Duration {
        match self.args.get("timeout") {
            Some(Val::Int(n)) => Duration::from_secs(u64::try_from(*n).unwrap_or(0)),
            _ => Duration::ZERO,
        }
    }

    /// The probe's arguments, in the order `checks.sh` reads them.
    fn argv(&self) -> Vec<String> {
        let text = |k: &str| match self.args.get(k) {
            Some(Val::Str(s)) => s.clone(),
            Some(Val::Sealed(s)) => s.value.clone(),
            Some(Val::Int(n)) => n.to_string(),
            Some(Val::Size(n)) => n.to_string(),
            _ => String::new(),
        };
        let names: &[&str] = match self.kind {
            CheckKind::Tcp => &["port", "host"],
            CheckKind::Http => &["url", "status", "body_contains"],
            CheckKind::Command => &["cmd", "exit", "stdout_contains"],
            CheckKind::Installed => &["package", "at_least", "below"],
            CheckKind::OsRelease => &["id", "version_id"],
            CheckKind::FreeSpace => &["path", "at_least"],
            CheckKind::EmptyDir => &["path"],
        };
        let mut argv = vec![self.kind.name().to_string()];
        argv.extend(names.iter().map(|n| text(n)));
        argv
    }

    /// What the hash of a node's postconditions covers: kind and arguments, not where the
    /// check is written (moving it in the file does not run it again).
    fn canonical(&self) -> Json {
        json!([
            self.kind.name(),
            Json::Object(
                self.args
                    .iter()
                    .map(|(k, v)| (k.clone(), val_json(v)))
                    .collect()
            )
        ])
    }
}

/// `KIND(ARG, NAME = VALUE, …)`: the first argument, then those that differ from their
/// defaults. `output` names a deferred value (`${web-0.address}`) in a plan.
pub fn describe(
    kind: CheckKind,
    args: &BTreeMap<String, Val>,
    output: &dyn Fn(&Val) -> String,
) -> String {
    let schema = check_schema(kind);
    let shown = |v: &Val| match v {
        Val::Str(s) => format!("{s:?}"),
        Val::Int(n) => n.to_string(),
        Val::Size(n) => envc_compiler::value::format_size(*n),
        Val::Output { .. } | Val::Concat(_) | Val::Json(_) => format!("{:?}", output(v)),
        Val::Secret(name) => format!("secret({name:?})"),
        Val::Sealed(_) => "<secret>".into(),
        other => format!("{other:?}"),
    };
    let mut parts = Vec::new();
    for (i, p) in schema.params.iter().enumerate() {
        let Some(v) = args.get(p.name) else { continue };
        let default = match (p.default, v) {
            (Some(Default::Int(d)), Val::Int(n)) => d == *n,
            (Some(Default::Str(d)), Val::Str(s)) => d == s,
            _ => false,
        };
        if i == 0 {
            parts.push(shown(v));
        } else if !default {
            parts.push(format!("{} = {}", p.name, shown(v)));
        }
    }
    format!("{}({})", kind.name(), parts.join(", "))
}

fn val_json(v: &Val) -> Json {
    match v {
        Val::Int(n) => json!(n),
        Val::Str(s) => json!(s),
        Val::Bool(b) => json!(b),
        Val::Size(n) => json!({ "size": n }),
        Val::Mode(m) => json!({ "mode": m }),
        Val::Sealed(s) => json!({ "secret": s.keyed }),
        other => json!(format!("{other:?}")),
    }
}

/// blake3 of a node's postconditions (`None` when it has none): kept in its record, so a
/// changed postcondition is run again without redeploying the node.
pub fn checks_hash(checks: &[CheckSpec]) -> Option<String> {
    let expect: Vec<Json> = checks
        .iter()
        .filter(|c| c.phase == Phase::Expect)
        .map(CheckSpec::canonical)
        .collect();
    if expect.is_empty() {
        return None;
    }
    let mut h = blake3::Hasher::new();
    h.update(b"envc-checks\0");
    h.update(Json::Array(expect).to_string().as_bytes());
    Some(h.finalize().to_hex().to_string())
}

/// The failure of its node's step a check that did not hold stands for.
pub fn check_failure(result: &CheckResult) -> StepError {
    let waited = if result.attempts > 1 {
        format!(
            " after {} attempts in {:.0}s",
            result.attempts,
            Duration::from_millis(result.duration_ms).as_secs_f64()
        )
    } else {
        String::new()
    };
    let output: String = result
        .output
        .lines()
        .filter(|l| !l.trim().is_empty())
        .rev()
        .take(20)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .map(|l| format!("\n    | {l}"))
        .collect();
    let cause = format!(
        "{} {} at {} does not hold{waited}:{output}",
        result.phase.noun(),
        result.check,
        result.location
    );
    let hint = match result.phase {
        Phase::Require => "nothing was changed for this node; make the precondition true on the target, or change the check, and build again",
        Phase::Expect => "the node is not recorded as done, so the next build tries it again; if it needs longer, give the check `timeout = SECONDS`",
    };
    StepError::with_hint(cause, hint)
}

/// Runs one check on `t`: attempts until it holds or its timeout has passed.
pub async fn run_check(t: &Transport, c: &CheckSpec) -> CheckResult {
    let started = Instant::now();
    let deadline = started + c.timeout();
    let argv = c.argv();
    let mut attempts = 0u32;
    loop {
        attempts += 1;
        let limit = c.timeout().clamp(Duration::from_secs(1), ATTEMPT_LIMIT);
        let (ok, output, final_) = attempt(t, &argv, limit).await;
        if ok || final_ || Instant::now() >= deadline {
            return CheckResult {
                check: c.describe(),
                phase: c.phase,
                location: c.location.clone(),
                ok,
                output,
                attempts,
                duration_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
            };
        }
        let left = deadline.saturating_duration_since(Instant::now());
        tokio::time::sleep(RETRY_EVERY.min(left)).await;
    }
}

/// One attempt: (holds, output, whether trying again is pointless).
async fn attempt(t: &Transport, args: &[String], limit: Duration) -> (bool, String, bool) {
    let secs = limit.as_secs().max(1).to_string();
    let argv: Vec<&str> = vec!["timeout", "-k", "2", &secs, "sh", "-c", SCRIPT, "envc"];
    // The arguments go on stdin: a `command` check's script may hold a secret.
    let input = crate::script::stdin_block(args.iter().map(|a| (None, a.as_str())));
    match t.run(&argv, &input).await {
        Err(e) => (false, e.to_string(), true),
        Ok(out) => {
            let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
            let err = String::from_utf8_lossy(&out.stderr);
            if !err.trim().is_empty() {
                text.push_str(&err);
            }
            match out.status {
                Some(0) => (true, bounded(&text), false),
                Some(2) => (false, bounded(&text), true),
                Some(124 | 137) => {
                    text.push_str(&format!("(no answer within {secs}s)\n"));
                    (false, bounded(&text), false)
                }
                _ => (false, bounded(&text), false),
            }
        }
    }
}

/// The tail of `text`, at most `OUTPUT_LIMIT` bytes, cut at a character boundary.
fn bounded(text: &str) -> String {
    let text = text.trim_end();
    if text.len() <= OUTPUT_LIMIT {
        return text.to_string();
    }
    let mut start = text.len() - OUTPUT_LIMIT;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    format!("…{}", &text[start..])
}

/// Runs `checks` of one phase in order, stopping at the first that fails: its error is
/// the node's. Every result, passed or failed, comes back for the run record.
pub async fn run_phase(
    t: &Transport,
    checks: &[CheckSpec],
    phase: Phase,
) -> (Vec<CheckResult>, Result<(), StepError>) {
    let mut results = Vec::new();
    for c in checks.iter().filter(|c| c.phase == phase) {
        let r = run_check(t, c).await;
        let failed = (!r.ok).then(|| check_failure(&r));
        results.push(r);
        if let Some(e) = failed {
            return (results, Err(e));
        }
    }
    (results, Ok(()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(kind: CheckKind, args: &[(&str, Val)]) -> CheckSpec {
        CheckSpec {
            phase: Phase::Expect,
            kind,
            args: args
                .iter()
                .map(|(k, v)| (k.to_string(), v.clone()))
                .collect(),
            location: "main.env:3:5".into(),
        }
    }

    #[test]
    fn checks_are_described_by_their_first_argument_and_what_is_not_default() {
        let check = |c: CheckSpec, expected: &str| assert_eq!(c.describe(), expected);
        check(
            spec(
                CheckKind::Http,
                &[
                    ("url", Val::Str("http://10.0.0.2/".into())),
                    ("status", Val::Int(200)),
                    ("body_contains", Val::Str(String::new())),
                    ("timeout", Val::Int(30)),
                ],
            ),
            "http(\"http://10.0.0.2/\")",
        );
        check(
            spec(
                CheckKind::FreeSpace,
                &[
                    ("path", Val::Str("/".into())),
                    ("at_least", Val::Size(1 << 30)),
                    ("timeout", Val::Int(0)),
                ],
            ),
            "free_space(\"/\", at_least = 1GiB)",
        );
        check(
            spec(
                CheckKind::Command,
                &[
                    ("cmd", Val::Str("true".into())),
                    ("exit", Val::Int(3)),
                    ("timeout", Val::Int(5)),
                ],
            ),
            "command(\"true\", exit = 3, timeout = 5)",
        );
    }

    #[test]
    fn the_postconditions_hash_ignores_location_and_preconditions() {
        let a = spec(CheckKind::Tcp, &[("port", Val::Int(80))]);
        let mut moved = a.clone();
        moved.location = "main.env:9:1".into();
        let mut pre = spec(CheckKind::EmptyDir, &[("path", Val::Str("/x".into()))]);
        pre.phase = Phase::Require;
        let other = spec(CheckKind::Tcp, &[("port", Val::Int(81))]);
        assert_eq!(
            checks_hash(std::slice::from_ref(&a)),
            checks_hash(&[moved, pre.clone()])
        );
        assert_ne!(checks_hash(std::slice::from_ref(&a)), checks_hash(&[other]));
        assert_eq!(checks_hash(&[pre]), None);
    }

    #[test]
    fn output_is_bounded_to_its_tail() {
        let long = "é".repeat(5000);
        let b = bounded(&long);
        assert!(b.len() <= OUTPUT_LIMIT + "…".len());
        assert!(b.starts_with('…') && b.ends_with('é'));
        assert_eq!(bounded("short\n"), "short");
    }
}
