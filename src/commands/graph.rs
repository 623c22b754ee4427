//! `envc graph FILE` and `envc show FILE NODE`: the derivation graph, and one derivation's
//! canonical content.

use std::path::Path;

use clap::ValueEnum;

use super::{compile_env, graph, prefix, Params, Ui};
use crate::exit::{Exit, Failure, Outcome};
use crate::output;

#[derive(Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum GraphFormat {
    Text,
    Json,
    Dot,
}

pub fn graph_command(file: &Path, format: GraphFormat, params: &Params, ui: Ui) -> Outcome {
    let env = compile_env(file, params, true, ui)?;
    let g = graph(&env)?;
    output::print(&match format {
        GraphFormat::Json => g.to_json() + "\n",
        GraphFormat::Dot => g.to_dot(),
        GraphFormat::Text => text_graph(g),
    });
    Ok(Exit::Ok)
}

pub fn show(file: &Path, node: &str, params: &Params, ui: Ui) -> Outcome {
    let env = compile_env(file, params, true, ui)?;
    match graph(&env)?.select(node) {
        Ok(n) => {
            let json = envc_compiler::derivation::node_json(n);
            let text = serde_json::to_string_pretty(&json)
                .map_err(|e| Failure::Input(format!("cannot print the derivation: {e}")))?;
            output::line(text);
            Ok(Exit::Ok)
        }
        Err(d) => {
            crate::output::eprint_rendered(
                &ui.renderer(&env.compiled.sources, &prefix(file)).render(&d),
            );
            Err(Failure::Reported(Exit::Input))
        }
    }
}

fn text_graph(graph: &envc_compiler::Graph) -> String {
    let mut s = String::new();
    for n in graph.nodes() {
        let on = n
            .target
            .as_ref()
            .map_or(String::new(), |t| format!(" on {}", t.name));
        s.push_str(&format!(
            "{}  {} {}{on}\n",
            n.id.short(),
            n.kind.name(),
            n.name
        ));
        let inputs: Vec<String> = n.inputs.iter().map(|i| i.id.short()).collect();
        if !inputs.is_empty() {
            s.push_str(&format!("              <- {}\n", inputs.join(" ")));
        }
    }
    for (k, v) in &graph.outputs {
        s.push_str(&format!("output {k} = {}\n", human(v)));
    }
    s
}

/// A part of a deferred string as it reads inside the string.
fn part(p: &envc_compiler::value::Value) -> String {
    use envc_compiler::value::{Deferred, Value};
    match p {
        Value::Str(s) => s.to_string(),
        Value::Deferred(d) => match &**d {
            Deferred::Output { node, output } => format!("${{{}.{output}}}", node.name),
            Deferred::Concat(parts) => parts.iter().map(part).collect(),
            // `to_json`'s deferred leaf: the value it writes (as JSON, once known).
            Deferred::Json(inner) => part(inner),
            Deferred::Secret(name) => format!("${{secret({name:?})}}"),
        },
        other => human(other),
    }
}

/// A value as a person reads it; deferred parts show where they will come from.
fn human(v: &envc_compiler::value::Value) -> String {
    use envc_compiler::value::{Deferred, Value};
    match v {
        Value::Deferred(d) => match &**d {
            Deferred::Output { node, output } => {
                format!("({}.{output}, known after deploy)", node.name)
            }
            Deferred::Secret(name) => format!("(secret {name:?})"),
            Deferred::Json(inner) => human(inner),
            Deferred::Concat(parts) => {
                let text: String = parts.iter().map(part).collect();
                format!("{text:?} (known after deploy)")
            }
        },
        Value::List(xs) => format!("[{}]", xs.iter().map(human).collect::<Vec<_>>().join(", ")),
        other => envc_compiler::derivation::value_json(other).to_string(),
    }
}
