//! `envc drift FILE`: probe every live record on its target. A node whose target could
//! not be reached was not checked: that is no pass (exit 6), and the summary says so even
//! when drift elsewhere decides the exit code (3).

use std::path::Path;

use serde_json::json;

use super::plan::{unchecked_note, warn_unreachable};
use super::{compile_env, session, Params, TargetArgs, Ui};
use crate::exit::{Exit, Outcome};
use crate::output;

pub fn drift(file: &Path, json_out: bool, params: &Params, target: &TargetArgs, ui: Ui) -> Outcome {
    let env = compile_env(file, params, true, ui)?;
    let report = session(file, target)?.plan(&env.spec, &env.files, true)?;
    warn_unreachable(&report);
    for (key, d) in &report.drift {
        for (fact, was, now) in d {
            if json_out {
                output::line(json!({"node": key, "fact": fact, "recorded": was, "found": now}));
            } else {
                output::line(format!("drift     {key}: {fact} was {was}, found {now}"));
            }
        }
    }
    let drifted = report.drift.len();
    let unchecked = report.unreachable.len();
    if json_out {
        for (key, why) in &report.unreachable {
            output::line(json!({"node": key, "unchecked": why}));
        }
        output::line(json!({"summary": {"drifted": drifted, "unchecked": unchecked}}));
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
    }
    Ok(match (drifted, unchecked) {
        (0, 0) => Exit::Ok,
        (0, _) => Exit::Unchecked,
        _ => Exit::Drift,
    })
}
