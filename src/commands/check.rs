//! `envc check FILE`: parse, type-check and evaluate; every problem reported.

use std::path::Path;

use super::{compile_env, graph, Params, Ui};
use crate::exit::Exit;
use crate::exit::Outcome;

pub fn check(file: &Path, params: &Params, ui: Ui) -> Outcome {
    let env = compile_env(file, params, true, ui)?;
    let g = graph(&env)?;
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
