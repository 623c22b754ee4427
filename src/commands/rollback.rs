//! `envc rollback FILE --to RUN`: the plan (what goes back, what is removed, what is left
//! and why), then the rollback itself, reported as a build is.

use std::path::Path;

use envc_executor::{Action, RollbackPlan, Spec};
use serde_json::json;

use super::build::summary;
use super::progress::Progress;
use super::{session, TargetArgs};
use crate::exit::{Exit, Failure, Outcome};
use crate::output;

pub fn rollback(
    file: &Path,
    to: &str,
    dry_run: bool,
    wait: bool,
    json_out: bool,
    target: &TargetArgs,
) -> Outcome {
    let session = session(file, target)?;
    if dry_run {
        let plan = session.rollback_plan(to)?;
        show(&plan, json_out);
        return Ok(Exit::Ok);
    }
    let progress = Progress::new(json_out, &Spec::default());
    let result = session.rollback(to, wait, &progress);
    progress.finish();
    let (plan, report) = result.map_err(Failure::Session)?;
    show(&plan, json_out);
    summary(&report, "rollback", json_out, None);
    if report.failed > 0 {
        if !json_out {
            for o in &report.outcomes {
                if let Some(why) = o.outcome.failure() {
                    output::errln!("error: {}: {why}", o.node);
                }
            }
        }
        return Ok(Exit::Failed);
    }
    Ok(Exit::Ok)
}

/// The plan: one line per node that changes or is left with a reason.
fn show(plan: &RollbackPlan, json_out: bool) {
    if json_out {
        for i in &plan.items {
            output::json_line(json!({"node": i.node, "action": i.action.name(), "note": i.note}));
        }
        return;
    }
    output::line(format!(
        "rollback to run {} ({}, finished {}): {} to put back, {} to remove, {} unchanged",
        plan.run,
        plan.command,
        crate::utc::rfc3339(plan.finished_unix),
        plan.items
            .iter()
            .filter(|i| i.action == Action::Update)
            .count(),
        plan.items
            .iter()
            .filter(|i| i.action == Action::Delete)
            .count(),
        plan.unchanged,
    ));
    for i in &plan.items {
        let what = match i.action {
            Action::Update => "restore",
            Action::Delete => "remove",
            _ => "leave",
        };
        match &i.note {
            Some(n) => output::line(format!("  {what:<9} {}: {n}", i.node)),
            None => output::line(format!("  {what:<9} {}", i.node)),
        }
    }
}
