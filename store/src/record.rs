//! What the store remembers: realization records (what was observed after a deploy step on
//! one target), run records (what one run did), and states (an environment's live records,
//! chained to the previous state: the audit trail).

use envc_ids::{ResolvedHash, TargetIdentity};
use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::object_id::ObjectId;

/// What was observed on a target: a file's sha256, owner, group and mode; a package's
/// installed version; a host's key. Sorted, so equal facts hash equally.
pub type Facts = BTreeMap<String, String>;

/// The result of realizing one derivation on one target.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RealizationRecord {
    /// The derivation's id after deferred values and inputs were substituted: with the
    /// target identity, the key under which this record answers "already done?".
    pub resolved_hash: ResolvedHash,
    /// The target's identity: its host key fingerprint (or a provider's machine id).
    pub target_identity: TargetIdentity,
    /// `target/kind:name`: what this record manages, from one run to the next.
    pub node: String,
    /// The compile-time derivation id.
    pub derivation: String,
    /// The resolved attributes as shown to people (short values inline, long ones as a
    /// hash), so that a plan can say which input changed.
    pub attrs: BTreeMap<String, String>,
    /// What was observed afterwards.
    pub facts: Facts,
    /// blake3 of the facts: what dependents were built from (early cutoff).
    pub output_hash: String,
    /// Whether envc created the thing (a file or package absent before): only then does
    /// removing the node from the source remove it from the target.
    pub created: bool,
    pub run: String,
    pub at_unix: u64,
    /// blake3 of the postconditions that held when this record was written
    /// (`checks::checks_hash`): different ones make the node `check` (they run again; the
    /// node is not redeployed). Records from before checks have none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checks_hash: Option<String>,
    /// An `exec` node's `undo`, as it was when the node last ran: what removing the node
    /// runs once the source no longer says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub undo: Option<CommandLine>,
    /// Taken over by an `adopt` line: found there, recorded as found (or updated in
    /// place). Never `created`: leaving the source, or `destroy`, leaves it as it is,
    /// unless `destroy --adopted`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub adopted: bool,
    /// What a rollback puts back on the target (`rollback.rs`), as an object in the store:
    /// a file's bytes; a locked package's pinned `.deb`s (`debs::KeptDebs` as JSON: name,
    /// version, sha256… of the package and its closure, each `.deb` kept in the store by
    /// its sha256). None for a file that holds a secret (its plain text is never stored), an
    /// unlocked package (the target's apt chose what it installed), other kinds, and records
    /// written before envc kept these: such a record cannot be rolled back to, and the
    /// rollback says so.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<ObjectId>,
}

/// Written (and committed) before a step that may create a node's thing on a target, once a
/// probe found it absent: if the run dies before the step's record is committed, the next
/// run still knows that envc made what it then finds there. A record of the node on the same
/// target replaces it; until then `destroy` removes the thing as envc's.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Intent {
    /// `target/kind:name`.
    pub node: String,
    /// The target's identity when the thing was found absent.
    pub target_identity: TargetIdentity,
    /// What envc was about to make it (a file's `sha256`), so that removing it leaves
    /// alone what someone else wrote there since.
    pub facts: Facts,
    pub run: String,
    pub at_unix: u64,
}

impl Intent {
    /// What deleting a node that has only an intent works from: envc created its thing.
    pub fn as_record(&self) -> RealizationRecord {
        RealizationRecord {
            resolved_hash: ResolvedHash::default(),
            target_identity: self.target_identity.clone(),
            node: self.node.clone(),
            derivation: String::new(),
            attrs: BTreeMap::new(),
            output_hash: String::new(),
            facts: self.facts.clone(),
            created: true,
            run: self.run.clone(),
            at_unix: self.at_unix,
            checks_hash: None,
            undo: None,
            adopted: false,
            content: None,
        }
    }
}

/// blake3 of a set of facts, as dependents see it.
pub fn output_hash(facts: &Facts) -> String {
    let bytes = serde_json::to_vec(facts).expect("facts serialise");
    let mut h = blake3::Hasher::new();
    h.update(b"envc-facts\0");
    h.update(&bytes);
    h.finalize().to_hex().to_string()
}

/// How one node's step ended. On disk it is the line people read (`ok`, `ok: deleted`,
/// `cached`, `failed: …`, `skipped: …`), so that a run record stays readable as it is and
/// records written before this type existed still load.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(into = "String", try_from = "String")]
pub enum Outcome {
    /// The step ran; the note says what it did where that is not obvious (`deleted`).
    Ok(Option<String>),
    /// A record of the same resolved hash on the same target: nothing ran.
    Cached,
    Failed(String),
    Skipped(String),
}

impl Outcome {
    pub fn ran(&self) -> bool {
        matches!(self, Outcome::Ok(_))
    }

    pub fn failure(&self) -> Option<&str> {
        match self {
            Outcome::Failed(why) => Some(why),
            _ => None,
        }
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Outcome::Ok(None) => f.write_str("ok"),
            Outcome::Ok(Some(note)) => write!(f, "ok: {note}"),
            Outcome::Cached => f.write_str("cached"),
            Outcome::Failed(why) => write!(f, "failed: {why}"),
            Outcome::Skipped(why) => write!(f, "skipped: {why}"),
        }
    }
}

impl From<Outcome> for String {
    fn from(o: Outcome) -> String {
        o.to_string()
    }
}

/// A record's outcome that is none of `Outcome`'s spellings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NotAnOutcome(pub String);

impl fmt::Display for NotAnOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "`{}` is not a step outcome", self.0)
    }
}

impl TryFrom<String> for Outcome {
    type Error = NotAnOutcome;

    fn try_from(s: String) -> Result<Outcome, NotAnOutcome> {
        let with_note = |prefix: &str| s.strip_prefix(prefix).map(str::to_string);
        match s.as_str() {
            "ok" => Ok(Outcome::Ok(None)),
            "cached" => Ok(Outcome::Cached),
            _ => with_note("ok: ")
                .map(|n| Outcome::Ok(Some(n)))
                .or_else(|| with_note("failed: ").map(Outcome::Failed))
                .or_else(|| with_note("skipped: ").map(Outcome::Skipped))
                .ok_or_else(|| NotAnOutcome(s.clone())),
        }
    }
}

/// How a whole run ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RunResult {
    Ok,
    Failed,
    Interrupted,
    /// Written when the run starts and replaced when it ends: a run whose newest record
    /// still says this never ended (it was killed, or it is still running).
    Unfinished,
}

impl RunResult {
    pub fn name(self) -> &'static str {
        match self {
            RunResult::Ok => "ok",
            RunResult::Failed => "failed",
            RunResult::Interrupted => "interrupted",
            RunResult::Unfinished => "unfinished",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeOutcome {
    pub node: String,
    pub id: String,
    pub action: Action,
    pub outcome: Outcome,
    pub duration_ms: u64,
    pub output_hash: Option<String>,
    /// What each of its checks found, in the order they ran (runs from before checks, and
    /// nodes without any, have none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub checks: Vec<CheckResult>,
    /// What its command printed (`exec` nodes that ran).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log: Option<CommandLog>,
    /// Its tags when it ran (a removed node has none): what a run's cost or change is
    /// attributed to.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: BTreeMap<String, String>,
    /// The key its record was carried from (a `moved` declaration), in the run that did it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub moved_from: Option<String>,
    /// What a rollback did about it: on a node whose update failed, how what the update
    /// changed on its target was put back (`rolled back: …`, or why it could not be); on a
    /// node that ran and was undone with it, `rolled back`. Runs before rollback have none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollback: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunRecord {
    pub run: String,
    pub env: String,
    pub command: String,
    pub graph_hash: String,
    pub lock_hash: Option<String>,
    pub started_unix: u64,
    pub finished_unix: u64,
    pub result: RunResult,
    /// The outcomes: all of them in a finished run's record; in a checkpoint of a run still
    /// going (`unfinished`), only those since the checkpoint before it, `earlier`, so a long
    /// run writes each outcome once per checkpoint chain, not once per checkpoint.
    pub nodes: Vec<NodeOutcome>,
    /// The checkpoint before this one, whose outcomes come first (see `nodes`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub earlier: Option<ObjectId>,
    /// What ended the run early (a store write that failed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The environments it read outputs from (`stack`), and the run of each it read.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub stacks: BTreeMap<String, String>,
    /// A targeted run (`--only`, `--exclude`): its patterns and what it left out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub targeted: Option<Targeted>,
    /// Its rollouts: which batches ran, which machines failed, what was left untouched.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rollouts: Vec<RolloutOutcome>,
    /// The tools the environment uses, at their exact versions on the machine that ran it
    /// (`ssh` → `9.2p1 Debian-2+deb12u6`): a lock holds ssh and QEMU only to their upstream
    /// version, so this is where a reviewer sees which build of them ran.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tools: BTreeMap<String, String>,
}

/// What a run did of one `rollout`: its batches (machine names, in the order they go),
/// how many of them it started, the machines that failed (a node on them failed), and
/// those it left untouched once too many had failed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RolloutOutcome {
    pub name: String,
    /// `batch` and `max_failures` as declared (`2`, `25%`).
    pub batch: String,
    pub max_failures: String,
    pub batches: Vec<Vec<String>>,
    /// How many batches were started (all of them unless it stopped).
    pub started: usize,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failed: Vec<String>,
    /// Why it stopped starting batches, if it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub untouched: Vec<String>,
}

/// An environment's state after a run: its live records by node, and the state before.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct State {
    pub previous: Option<ObjectId>,
    pub run: Option<ObjectId>,
    /// Node key (`target/kind:name`) → its live realization record. A record is current
    /// for a node only while its resolved hash and target identity both match.
    pub records: BTreeMap<String, ObjectId>,
    /// Node key → the [`Intent`] of a step that may have created its thing and has no
    /// record yet.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub intents: BTreeMap<String, ObjectId>,
    /// The environment's outputs as of the last build, deferred values resolved.
    #[serde(default)]
    pub outputs: BTreeMap<String, serde_json::Value>,
}

/// What leaves a graph whose node keys are `in_graph`, as `build` deletes it: the live
/// records of nodes that are gone (created where an intent on the same target shows envc
/// made the thing), and what only an intent knows of (a step killed before its record).
/// Plans show the same list, so `destroy` without `--yes` says what `--yes` removes.
pub fn leaving(
    in_graph: &dyn Fn(&str) -> bool,
    records: &BTreeMap<String, RealizationRecord>,
    intents: &BTreeMap<String, Intent>,
) -> Vec<RealizationRecord> {
    // By the keys they are live under: a record a `moved` declaration carried to its new
    // key still names its old one (`moved.rs`), and has not left. One that leaves is
    // deleted under the key it is live under (what was on a renamed machine and left the
    // source is removed from the machine by its new name), so it names that key.
    let intended = |key: &str, r: &RealizationRecord| {
        intents
            .get(key)
            .is_some_and(|i| i.target_identity == r.target_identity)
    };
    let mut gone: Vec<RealizationRecord> = records
        .iter()
        .filter(|(k, _)| !in_graph(k))
        .map(|(k, r)| RealizationRecord {
            created: r.created || intended(k, r),
            node: k.clone(),
            ..r.clone()
        })
        .collect();
    gone.extend(
        intents
            .iter()
            .filter(|(k, _)| !in_graph(k) && !records.contains_key(*k))
            .map(|(k, i)| RealizationRecord {
                node: k.clone(),
                ..i.as_record()
            }),
    );
    gone
}

/// The facts a probe found that differ from a record: (fact, recorded, observed).
pub type DriftFacts = Vec<(String, String, String)>;

/// Compares recorded facts with probed ones (`None`: the thing is gone).
pub fn drift_between(recorded: &Facts, observed: Option<&Facts>) -> DriftFacts {
    let Some(observed) = observed else {
        return vec![("exists".into(), "yes".into(), "no".into())];
    };
    recorded
        .iter()
        .filter_map(|(k, v)| {
            let o = observed.get(k).map_or("(none)", String::as_str);
            (o != v).then(|| (k.clone(), v.clone(), o.to_string()))
        })
        .collect()
}

/// The result of applying one item.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Applied {
    /// What was observed afterwards.
    pub facts: Facts,
    /// The item did not exist before (the file was absent, the package not installed).
    pub created: bool,
    /// Something worth telling about an apply that succeeded (shown as `ok: NOTE`).
    pub note: Option<String>,
    /// What a command printed, for the run record (`exec` nodes).
    pub log: Option<CommandLog>,
}

/// What a targeted run left out, as its run record keeps it and plans show it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Targeted {
    /// The `--only` patterns, as given.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub only: Vec<String>,
    /// The `--exclude` patterns, as given.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exclude: Vec<String>,
    /// Keys of the graph's nodes left out (not planned, not run).
    #[serde(default)]
    pub left_out: Vec<String>,
    /// Keys of records whose node left the graph and which this run does not delete.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kept: Vec<String>,
    /// The outputs that read a node left out: their last values stand.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub outputs_left_out: Vec<String>,
}

impl Targeted {
    /// Whether the record under `key`, whose node is not in the restricted graph, stays:
    /// its node was left out, or it left the graph and the selection spares it.
    pub fn spares(&self, key: &str) -> bool {
        self.left_out.iter().any(|k| k == key) || self.kept.iter().any(|k| k == key)
    }

    /// "--only a --exclude b": the flags that made it, as a reader would type them.
    pub fn flags(&self) -> String {
        let only = self.only.iter().map(|p| format!("--only {p}"));
        let exclude = self.exclude.iter().map(|p| format!("--exclude {p}"));
        only.chain(exclude).collect::<Vec<_>>().join(" ")
    }

    /// "left out: 5 nodes (--only web-0/file:/etc/x)".
    pub fn summary(&self) -> String {
        let n = self.left_out.len();
        format!(
            "left out: {n} node{} ({})",
            if n == 1 { "" } else { "s" },
            self.flags()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The typed outcome and the line on disk are one codec: each line reads back as the
    /// same outcome, so run records written before the type existed keep loading.
    #[test]
    fn outcomes_round_trip_through_their_line() {
        let check = |line: &str, expected: Outcome| {
            let json = serde_json::to_string(line).unwrap();
            let read: Outcome = serde_json::from_str(&json).unwrap();
            assert_eq!(read, expected, "{line}");
            assert_eq!(serde_json::to_string(&read).unwrap(), json);
        };
        check("ok", Outcome::Ok(None));
        check("ok: deleted", Outcome::Ok(Some("deleted".into())));
        check("cached", Outcome::Cached);
        check(
            "failed: no route: to host",
            Outcome::Failed("no route: to host".into()),
        );
        check(
            "skipped: interrupted",
            Outcome::Skipped("interrupted".into()),
        );
        assert!(serde_json::from_str::<Outcome>("\"done\"").is_err());
        assert!(serde_json::from_str::<Action>("\"create\"").is_ok_and(|a| a == Action::Create));
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    Create,
    Update,
    /// A VM whose image or size changed: destroyed and created anew (a new target).
    Replace,
    Delete,
    /// Nothing to redeploy, but its postconditions changed (or read a node that changes):
    /// they run again, and the record is renewed when they hold.
    Check,
    Unchanged,
    /// Renamed by a `moved` declaration and otherwise unchanged: its record is carried to
    /// its new key, and nothing runs on its target.
    Moved,
    /// No record yet, and an `adopt` line: recorded as found on its target (updated in
    /// place where it differs from the source), never created.
    Adopt,
}

impl Action {
    pub fn name(self) -> &'static str {
        match self {
            Action::Create => "create",
            Action::Update => "update",
            Action::Replace => "replace",
            Action::Delete => "delete",
            Action::Check => "check",
            Action::Unchanged => "unchanged",
            Action::Moved => "moved",
            Action::Adopt => "adopt",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    /// A precondition: must hold before the node changes anything.
    Require,
    /// A postcondition: must hold after the node ran.
    Expect,
}

impl Phase {
    pub fn name(self) -> &'static str {
        match self {
            Phase::Require => "require",
            Phase::Expect => "expect",
        }
    }

    pub fn noun(self) -> &'static str {
        match self {
            Phase::Require => "precondition",
            Phase::Expect => "postcondition",
        }
    }
}

/// What one check found: kept in the run record, so that a record is evidence of what
/// held, not only a list of actions.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckResult {
    /// `http("http://10.89.0.2/")`.
    pub check: String,
    pub phase: Phase,
    /// `FILE:LINE:COL`.
    pub location: String,
    pub ok: bool,
    /// What the last attempt printed (its tail, at most 4 KiB).
    pub output: String,
    pub attempts: u32,
    pub duration_ms: u64,
}

/// One command line as it runs on the target.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommandLine {
    pub argv: Vec<String>,
    pub env: BTreeMap<String, String>,
    /// Whom it runs as (`runuser`); the connection's user when absent.
    pub user: Option<String>,
    pub cwd: String,
    pub timeout_secs: u64,
}

// Environment values and input may be secrets: Debug shows names and sizes only.
impl std::fmt::Debug for CommandLine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CommandLine")
            .field("argv", &self.argv)
            .field("env", &self.env.keys().collect::<Vec<_>>())
            .field("user", &self.user)
            .field("cwd", &self.cwd)
            .field("timeout_secs", &self.timeout_secs)
            .finish()
    }
}

/// What a command's run leaves in the run record: its exit status and the end of its
/// output.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommandLog {
    pub exit: i32,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub stdout: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub stderr: String,
}
