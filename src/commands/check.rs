//! `envc check FILE`: parse, type-check and evaluate; every problem reported. Templates are
//! checked too (they parse, and read only what their `vars` give), as a build would find
//! them, but before anything runs and at both places: the call and the template.

use std::path::Path;

use super::{compile_checked, prefix, Params, Ui};
use crate::exit::{Exit, Failure, Outcome};

pub fn check(file: &Path, params: &Params, ui: Ui) -> Outcome {
    let mut env = compile_checked(file, params, true, Default::default(), ui)?;
    let Some(g) = env.compiled.graph.as_ref() else {
        return Err(Failure::Input("the environment has no graph".into()));
    };
    let problems = envc_executor::check_templates(g, &mut env.compiled.sources, &env.files);
    if !problems.is_empty() {
        let sources = &env.compiled.sources;
        return Err(super::report_problems(
            &problems,
            sources,
            &prefix(file),
            file,
            ui,
        ));
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
