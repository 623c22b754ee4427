//! `envc check FILE`: parse, type-check and evaluate; every problem reported. Templates are
//! checked too (they parse, and read only what their `vars` give), as a build would find
//! them, but before anything runs and at both places: the call and the template. With
//! `--json`, each problem (and warning) is a JSON line on stdout, then a summary.

use std::path::Path;

use serde_json::json;

use super::{check_summary, compile_checked, prefix, Params, Ui};
use crate::exit::{Exit, Failure, Outcome};
use crate::output;

pub fn check(file: &Path, json_out: bool, params: &Params, ui: Ui) -> Outcome {
    let ui = Ui {
        json: json_out,
        ..ui
    };
    let mut env = compile_checked(file, params, true, Default::default(), ui)?;
    let Some(g) = env.compiled.graph.as_ref() else {
        return Err(Failure::Input("the environment has no graph".into()));
    };
    let problems = envc_executor::check_templates(g, &mut env.compiled.sources, &env.files);
    let warnings = env.compiled.warnings.len();
    if !problems.is_empty() {
        let sources = &env.compiled.sources;
        if json_out {
            for line in ui
                .renderer(sources, &prefix(file))
                .json_lines(&problems, false)
            {
                output::json_line(line);
            }
            output::json_line(check_summary(problems.len(), warnings));
            return Err(Failure::Reported(Exit::Input));
        }
        return Err(super::report_problems(
            &problems,
            sources,
            &prefix(file),
            file,
            ui,
        ));
    }
    if json_out {
        output::json_line(json!({
            "type": "summary",
            "ok": true,
            "errors": 0,
            "warnings": warnings,
            "nodes": g.order.len(),
            "outputs": g.outputs.len(),
            "policies": g.policies,
        }));
        return Ok(Exit::Ok);
    }
    let policies = match g.policies {
        0 => String::new(),
        1 => ", 1 policy kept".into(),
        n => format!(", {n} policies kept"),
    };
    crate::output::errln!(
        "{}: ok, {} nodes, {} outputs{policies}",
        file.display(),
        g.order.len(),
        g.outputs.len()
    );
    Ok(Exit::Ok)
}
