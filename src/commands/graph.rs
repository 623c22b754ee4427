//! `envc graph FILE` and `envc show FILE NODE`: the derivation graph, and one derivation's
//! canonical content.

use std::path::Path;

use clap::ValueEnum;

use super::{
    compile_checked, compile_env, graph, prefix, prepare, session, Params, TargetArgs, Ui,
};
use crate::exit::{Exit, Failure, Outcome};
use crate::output;

#[derive(Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum GraphFormat {
    Text,
    Json,
    Dot,
    /// One self-contained page (no network): machines as boxes holding their nodes,
    /// coloured by what the plan and the last run say, details on click, a search box.
    Html,
    /// The same boxes as a static picture, for documents.
    Svg,
}

pub fn graph_command(file: &Path, format: GraphFormat, params: &Params, ui: Ui) -> Outcome {
    // The graph as the compiler made it: the executor's view of it is for the pictures.
    let compiled = || compile_checked(file, params, true, Default::default(), ui);
    output::print(&match format {
        GraphFormat::Json => graph(&compiled()?.compiled)?.to_json() + "\n",
        GraphFormat::Dot => graph(&compiled()?.compiled)?.to_dot(),
        GraphFormat::Text => text_graph(graph(&compiled()?.compiled)?),
        GraphFormat::Html | GraphFormat::Svg => {
            let mut env = compile_env(file, params, true, ui)?;
            // Coloured by the plan against the last records, as `envc plan` would say
            // offline: no target is contacted.
            let target = TargetArgs::default();
            let session = session(file, &target)?;
            prepare(&session, &mut env.spec, file, &target.shared, false)?;
            let report = session.plan(&env.spec, &env.files, false)?;
            let picture = super::picture::of(&session, &env, &report, "graph")?;
            if format == GraphFormat::Svg {
                picture.to_svg()
            } else {
                picture.to_html()
            }
        }
    });
    Ok(Exit::Ok)
}

pub fn show(file: &Path, node: &str, params: &Params, ui: Ui) -> Outcome {
    let env = compile_env(file, params, true, ui)?;
    match graph(&env.compiled)?.select(node) {
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
        s.push_str(&format!("output {k} = {}\n", super::shown::human(v)));
    }
    s
}
