//! `envc drift FILE [--checks]`: probe every live record on its target (and, with
//! `--checks`, run every built node's postconditions again). A node whose target could
//! not be reached was not checked: that is no pass (exit 6), and the summary says so even
//! when drift elsewhere decides the exit code (3).

use std::path::Path;

use serde_json::json;

use super::plan::{unchecked_note, warn_unreachable};
use super::{compile_env, session, Params, TargetArgs, Ui};
use crate::exit::{Exit, Outcome};
use crate::output;

pub fn drift(
    file: &Path,
    json_out: bool,
    checks: bool,
    params: &Params,
    target: &TargetArgs,
    ui: Ui,
) -> Outcome {
    let mut env = compile_env(file, params, true, ui)?;
    let session = session(file, target)?;
    super::refuse_moved_onto_records(&session, &env, file, ui)?;
    super::prepare(&session, &mut env.spec, file, &target.shared, false)?;
    let mut report = session.plan(&env.spec, &env.files, true)?;
    let mut failed_checks = 0;
    if checks {
        let found = session.run_checks(&env.spec, &env.files)?;
        for (key, results) in &found.results {
            for r in results {
                if json_out {
                    output::json_line(
                        json!({"node": key, "check": r.check, "phase": r.phase, "location": r.location, "ok": r.ok, "output": r.output, "attempts": r.attempts, "duration_ms": r.duration_ms}),
                    );
                } else if !r.ok {
                    output::line(format!(
                        "check     {key}: {}",
                        envc_executor::check_failure(r).cause
                    ));
                }
            }
        }
        failed_checks = found.failures().count();
        for (key, why) in found.unchecked {
            report.unreachable.entry(key).or_insert(why);
        }
    }
    warn_unreachable(&report);
    for (key, d) in &report.drift {
        for (fact, was, now) in d {
            if json_out {
                output::json_line(
                    json!({"node": key, "fact": fact, "recorded": was, "found": now}),
                );
            } else {
                output::line(format!("drift     {key}: {fact} was {was}, found {now}"));
            }
        }
    }
    let drifted = report.drift.len();
    let unchecked = report.unreachable.len();
    if json_out {
        for (key, why) in &report.unreachable {
            output::json_line(json!({"node": key, "unchecked": why}));
        }
        let mut summary = json!({"drifted": drifted, "unchecked": unchecked});
        if checks {
            summary["checks_failed"] = json!(failed_checks);
        }
        output::json_line(json!({ "summary": summary }));
    } else {
        let not_checked = unchecked_note(&report);
        output::line(match (drifted, unchecked) {
            (0, 0) => "drift: none; every target matches its records".to_string(),
            (0, _) => format!("drift: none found, but {not_checked}"),
            (_, 0) => format!(
                "drift: {drifted} nodes differ from their records; `envc build --refresh` repairs them"
            ),
            _ => format!(
                "drift: {drifted} nodes differ from their records (`envc build --refresh` repairs them), and {not_checked}"
            ),
        });
        if checks {
            output::line(match failed_checks {
                0 => "checks: every postcondition that ran holds".to_string(),
                1 => "checks: 1 postcondition does not hold".to_string(),
                n => format!("checks: {n} postconditions do not hold"),
            });
        }
    }
    Ok(match (drifted + failed_checks, unchecked) {
        (0, 0) => Exit::Ok,
        (0, _) => Exit::Unchecked,
        _ => Exit::Drift,
    })
}
