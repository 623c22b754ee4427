//! `envc log FILE` and `envc output FILE`: what the store remembers of an environment.

use std::path::Path;

use envc_executor::StepOutcome;
use serde_json::json;

use super::{store_session, SharedArgs};
use crate::exit::{Exit, Outcome};
use crate::output;

pub fn log(file: &Path, json_out: bool, shared: &SharedArgs) -> Outcome {
    let history = store_session(file, shared)?.history()?;
    let hint = format!("`envc store verify --repair {}`", file.display());
    for run in history.runs {
        let run = match run {
            Ok(run) => run,
            Err((id, damage)) => {
                crate::output::errln!("run {id}: damaged: {damage}; {hint}");
                continue;
            }
        };
        let count =
            |f: &dyn Fn(&StepOutcome) -> bool| run.nodes.iter().filter(|n| f(&n.outcome)).count();
        let ran = count(&StepOutcome::ran);
        let cached = count(&|o| *o == StepOutcome::Cached);
        let failed = count(&|o| o.failure().is_some());
        // The steps that did something.
        let done = || {
            run.nodes
                .iter()
                .filter(|n| n.outcome != StepOutcome::Cached || n.moved_from.is_some())
        };
        if json_out {
            // Each with the tags it ran with.
            let steps: Vec<serde_json::Value> = done()
                .map(|n| json!({"node": n.node, "action": n.action.name(), "outcome": n.outcome.to_string(), "tags": n.tags, "moved_from": n.moved_from, "rollback": n.rollback}))
                .collect();
            output::json_line(
                json!({"run": run.run, "command": run.command, "result": run.result, "started_unix": run.started_unix, "finished_unix": run.finished_unix, "graph": run.graph_hash, "ran": ran, "cached": cached, "failed": failed, "stacks": run.stacks, "targeted": run.targeted, "rollouts": run.rollouts, "tools": run.tools, "nodes": steps}),
            );
            continue;
        }
        output::line(format!(
            "run {}  {:<7} {:<11} started {} took {} s: {ran} ran, {cached} cached, {failed} failed",
            run.run,
            run.command,
            run.result.name(),
            // UTC, as a person reads it; `--json` keeps the number.
            crate::utc::rfc3339(run.started_unix),
            run.finished_unix.saturating_sub(run.started_unix)
        ));
        if let Some(t) = &run.targeted {
            for line in super::targeted::left_out_lines("   ", Some(t)) {
                output::line(line);
            }
        }
        if !run.tools.is_empty() {
            let tools: Vec<String> = (run.tools.iter())
                .map(|(t, v)| format!("{t} {v}"))
                .collect();
            output::line(format!("    with {}", tools.join(", ")));
        }
        for (env, read) in &run.stacks {
            output::line(format!(
                "    read the outputs of `{env}` from its run {read}"
            ));
        }
        for ro in &run.rollouts {
            let line = super::build::rollout_line(ro).replace('\n', "\n    ");
            output::line(format!("    {line}"));
        }
        for n in done() {
            match &n.moved_from {
                Some(from) => output::line(format!(
                    "    {:<9} {}: from {from}, nothing ran",
                    n.action.name(),
                    n.node,
                )),
                None => output::line(format!(
                    "    {:<9} {}: {}",
                    n.action.name(),
                    n.node,
                    n.outcome
                )),
            }
            if let Some(note) = &n.rollback {
                output::line(format!("              {note}"));
            }
            if let Some(log) = &n.log {
                for (name, text) in [("stdout", &log.stdout), ("stderr", &log.stderr)] {
                    let lines: Vec<&str> = text.lines().collect();
                    let shown = &lines[lines.len().saturating_sub(20)..];
                    if !shown.is_empty() {
                        output::line(format!("              {name}:"));
                    }
                    for l in shown {
                        output::line(format!("                {l}"));
                    }
                }
            }
        }
    }
    if let Some((state, damage)) = history.end {
        let at = state.map_or("the ref".to_string(), |s| format!("state {s}"));
        crate::output::errln!(
            "{at}: damaged: {damage}; the history before it cannot be read; {hint}"
        );
    }
    Ok(Exit::Ok)
}

pub fn output(file: &Path, json_out: bool, shared: &SharedArgs) -> Outcome {
    let outputs = store_session(file, shared)?.outputs()?;
    if json_out {
        // The outputs themselves, `jq .NAME` away: no format_version, since an output may
        // have that name (docs/cli.md).
        output::line(serde_json::Value::Object(outputs.into_iter().collect()));
    } else {
        for (k, v) in outputs {
            output::line(format!("{k} = {v}"));
        }
    }
    Ok(Exit::Ok)
}
