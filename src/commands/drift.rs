//! `envc drift FILE`: probe every live record on its target.

use std::path::Path;

use serde_json::json;

use super::plan::warn_unreachable;
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
    Ok(if report.drift.is_empty() {
        if !json_out {
            output::line("drift: none; every target matches its records");
        }
        Exit::Ok
    } else {
        if !json_out {
            output::line(format!(
                "drift: {} nodes differ from their records; `envc build --refresh` repairs them",
                report.drift.len()
            ));
        }
        Exit::Drift
    })
}
