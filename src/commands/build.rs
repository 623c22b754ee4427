//! `envc build FILE` and `envc destroy FILE`: realize the graph (or an empty one) on its
//! targets, with progress as it goes and a summary at the end.

use std::path::Path;

use envc_executor::{
    locked_problems, project_dir, BuildReport, BuildRequest, FsLoader, Interrupts, Spec, Targeted,
};
use serde_json::json;

use super::plan::plan_text;
use super::progress::Progress;
use super::{compile_env, session, Params, TargetArgs, Ui};
use crate::exit::{Exit, Failure, Outcome};
use crate::output;

pub struct BuildArgs {
    pub jobs: usize,
    pub keep_going: bool,
    pub no_rollback: bool,
    pub refresh: bool,
    pub wait: bool,
    pub json: bool,
    pub push: bool,
    /// `--locked`; `None` is locked when `CI` is set.
    pub locked: Option<bool>,
    /// `--only`, `--exclude`.
    pub targeted: super::targeted::TargetedArgs,
}

pub fn build(
    file: &Path,
    args: &BuildArgs,
    params: &Params,
    target: &TargetArgs,
    ui: Ui,
) -> Outcome {
    let env = compile_env(file, params, true, ui)?;
    super::refuse_moved_onto_records(&session(file, target)?, &env, file, ui)?;
    if args.locked.unwrap_or_else(in_ci) {
        let check = locked_problems(env.lock.as_ref().map(|l| &l.lock), &env.spec, file);
        for n in &check.notes {
            crate::output::errln!("note: {n}");
        }
        if !check.problems.is_empty() {
            for p in &check.problems {
                crate::output::errln!("error: {p}");
            }
            crate::output::errln!(
                "error: a locked build refuses to start (`--locked`{}); nothing was changed",
                if args.locked.is_none() {
                    ", the default when CI is set"
                } else {
                    ""
                }
            );
            return Ok(Exit::Input);
        }
    }
    let request = BuildRequest {
        jobs: args.jobs,
        keep_going: args.keep_going,
        refresh: args.refresh,
        wait: args.wait,
        command: "build".into(),
        lock_hash: env.lock.map(|l| l.hash),
        push: args.push,
        source: source_commit(file),
        remove_adopted: false,
        no_rollback: args.no_rollback,
    };
    let narrow = Some((&args.targeted, ui));
    realize(
        file, &env.spec, &env.files, &request, args.json, target, narrow,
    )
}

pub fn destroy(
    file: &Path,
    yes: bool,
    wait: bool,
    json_out: bool,
    adopted: bool,
    target: &TargetArgs,
) -> Outcome {
    let spec = Spec::default();
    let files = FsLoader::new(&project_dir(file));
    if !yes {
        let report = session(file, target)?.plan(&spec, &files, false)?;
        output::print(&plan_text(&spec, &report, json_out));
        crate::output::errln!("error: destroy changes nothing without --yes");
        return Ok(Exit::Input);
    }
    let request = BuildRequest {
        jobs: 32,
        keep_going: true,
        refresh: false,
        wait,
        command: "destroy".into(),
        lock_hash: None,
        push: false,
        source: source_commit(file),
        remove_adopted: adopted,
        no_rollback: true,
    };
    realize(file, &spec, &files, &request, json_out, target, None)
}

/// The commit the environment's source is at, `-dirty` when its work tree has changes
/// to tracked files; `None` outside a git work tree (or without git). Only named in the
/// commits that deliver objects to a GitOps repository, never hashed.
fn source_commit(file: &Path) -> Option<String> {
    let dir = project_dir(file);
    let git = |args: &[&str]| {
        let out = std::process::Command::new("git")
            .arg("-C")
            .arg(&dir)
            .args(args)
            .stdin(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .output()
            .ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
    };
    let head = git(&["rev-parse", "--verify", "-q", "HEAD"])?;
    let dirty =
        git(&["status", "--porcelain", "--untracked-files=no"]).is_some_and(|s| !s.is_empty());
    Some(if dirty { format!("{head}-dirty") } else { head })
}

/// Whether this runs in CI (`CI` set, and not to `false` or `0`): builds are locked then.
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false" && v != "0")
}

fn realize(
    file: &Path,
    spec: &Spec,
    files: &FsLoader,
    request: &BuildRequest,
    json_out: bool,
    target: &TargetArgs,
    narrow: Option<(&super::targeted::TargetedArgs, Ui)>,
) -> Outcome {
    let session = session(file, target)?;
    let mut spec = spec.clone();
    // Narrowed first: a targeted build needs only the secrets and stacks of what it takes up.
    if let Some((targeted, ui)) = narrow {
        targeted.narrow(&session, &mut spec, ui)?;
    }
    super::prepare(&session, &mut spec, file, &target.shared, true)?;
    let progress = Progress::new(json_out, &spec);
    let result = session.build(&spec, files, request, &progress, &SigInt);
    progress.finish();
    let report = result.map_err(Failure::Session)?;
    summary(
        &report,
        &request.command,
        json_out,
        spec.targeted.as_deref(),
    );
    if let Some(e) = &report.error {
        crate::output::errln!("error: {e}");
    }
    Ok(if report.interrupted {
        Exit::Interrupted
    } else if report.lock_lost {
        // Another runner holds the environment now: the loser of a race exits 5.
        Exit::Locked
    } else if report.error.is_some() {
        Exit::Failed
    } else if report.failed > 0 {
        if !json_out {
            for o in &report.outcomes {
                if let Some(why) = o.outcome.failure() {
                    crate::output::errln!("error: {}: {why}", o.node);
                    if let Some(note) = &o.rollback {
                        crate::output::errln!("  {note}");
                    }
                }
            }
        }
        Exit::Failed
    } else {
        Exit::Ok
    })
}

pub fn summary(r: &BuildReport, command: &str, json_out: bool, targeted: Option<&Targeted>) {
    for ro in &r.rollouts {
        if json_out {
            output::json_line(json!({ "rollout": ro }));
        } else {
            output::line(rollout_line(ro));
        }
    }
    if json_out {
        output::json_line(
            json!({"summary": {"ran": r.ran, "cached": r.cached, "moved": r.moved, "deleted": r.deleted, "failed": r.failed, "skipped": r.skipped, "interrupted": r.interrupted, "rolled_back": r.rolled_back, "run": r.run.map(|r| r.hex()), "warnings": r.notes, "targeted": targeted}}),
        );
    } else {
        let moved = match r.moved {
            0 => String::new(),
            n => format!(", {n} moved"),
        };
        let rolled_back = match r.rolled_back {
            0 => String::new(),
            n => format!(", {n} rolled back"),
        };
        output::line(format!(
            "{command}: {} ran, {} cached{moved}, {} deleted, {} failed, {} skipped{rolled_back}",
            r.ran, r.cached, r.deleted, r.failed, r.skipped
        ));
        for line in super::targeted::left_out_lines(command, targeted) {
            output::line(line);
        }
    }
    if !json_out {
        for note in &r.notes {
            crate::output::errln!("warning: {note}");
        }
    }
}

/// `rollout web: batch 1 of 3 ran (web-0 web-1); …`: what a build did of a rollout.
pub(crate) fn rollout_line(ro: &envc_executor::RolloutOutcome) -> String {
    let total = ro.batches.len();
    let ran: Vec<String> = (ro.batches.iter().take(ro.started))
        .map(|ms| ms.join(" "))
        .collect();
    let mut s = match (ro.started, total) {
        (_, 0) => format!("rollout {}: nothing to do", ro.name),
        (k, n) => format!(
            "rollout {}: {} of {n} batch{} ran ({})",
            ro.name,
            k,
            if n == 1 { "" } else { "es" },
            ran.join(" | ")
        ),
    };
    if !ro.failed.is_empty() {
        s.push_str(&format!("; failed: {}", ro.failed.join(" ")));
    }
    if let Some(why) = &ro.stopped {
        s.push_str(&format!("\n  {why}"));
    }
    if !ro.untouched.is_empty() {
        s.push_str(&format!("\n  untouched: {}", ro.untouched.join(" ")));
    }
    s
}

/// SIGINT during a build: the first lets running steps finish, the second stops at once.
pub struct SigInt;

impl Interrupts for SigInt {
    fn interrupted(&self, again: bool) {
        if again {
            std::process::exit(i32::from(Exit::Interrupted.code()));
        }
        crate::output::errln!("envc: interrupted; letting running steps finish and recording them (interrupt again to stop at once)");
    }
}
