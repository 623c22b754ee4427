//! `--only NODE` and `--exclude NODE` on `plan` and `build`: the graph narrowed to the
//! named nodes and what they need, or without the named nodes and what needs them
//! (`envc_executor::select_nodes`), and what was left out said wherever the plan or the
//! run is shown.

use std::collections::BTreeSet;

use envc_executor::{restrict, select_nodes, SelectError, Session, Spec, Targeted};
use envc_lang::Diagnostic;

use super::Ui;
use crate::exit::{Exit, Failure};

#[derive(clap::Args, Default, Clone)]
pub struct TargetedArgs {
    /// Take up only NODE and what it needs (its inputs and machine, transitively), nothing
    /// that merely depends on it. NODE is a state key as `plan` prints it
    /// (`web-0/file:/etc/nginx/nginx.conf`, `vm:web-0`); `*` stands for any characters,
    /// `?` for one (`'web-*/file:*'`). Repeatable. A record of a node no longer in the
    /// source is deleted only when an --only names it.
    #[arg(long, value_name = "NODE")]
    pub only: Vec<String>,
    /// Leave out NODE and everything that depends on it (what is on a machine, what reads
    /// a file), after --only. Repeatable. Records it matches are not deleted, nor what is
    /// recorded on a machine it leaves out.
    #[arg(long, value_name = "NODE")]
    pub exclude: Vec<String>,
}

impl TargetedArgs {
    /// Narrows `spec` to the selection (nothing to do without one). Patterns are matched
    /// against the graph's keys and the records' (a record whose node left the source).
    pub fn narrow(&self, session: &Session, spec: &mut Spec, ui: Ui) -> Result<(), Failure> {
        if self.only.is_empty() && self.exclude.is_empty() {
            return Ok(());
        }
        let (records, intents) = session.live()?;
        let recorded: BTreeSet<String> = records.into_keys().chain(intents.into_keys()).collect();
        match select_nodes(spec, &recorded, &self.only, &self.exclude) {
            Ok((keep, targeted)) => {
                *spec = restrict(spec, &keep, targeted);
                Ok(())
            }
            Err(e) => {
                let sources = envc_compiler::SourceMap::default();
                let rendered = ui.renderer(&sources, "").render(&diagnostic(&e));
                crate::output::eprint_rendered(&rendered);
                Err(Failure::Reported(Exit::Input))
            }
        }
    }
}

/// A selection that cannot be made, as a diagnostic: no source span (the patterns come
/// from the command line), the closest key as the hint.
pub fn diagnostic(e: &SelectError) -> Diagnostic {
    match e {
        SelectError::NoMatch(m) => {
            let d = Diagnostic::new(
                "select::no-match",
                format!("{} `{}` matches no node", m.flag, m.pattern),
            )
            .message(
                "a pattern names nodes by their state keys, as `envc plan` and `envc show` print them (`web-0/file:/etc/nginx/nginx.conf`, `vm:web-0`); `*` stands for any characters, `?` for one",
            );
            match &m.closest {
                Some(c) => d.help(format!("did you mean `{c}`?")),
                None => d.help(
                    "`envc graph FILE` lists the nodes; `envc plan FILE` the records that leave",
                ),
            }
        }
        e @ SelectError::SplitRepository { repository, .. } => {
            Diagnostic::new("select::split-repository", e.to_string()).help(format!(
                "add `--only '{repository}/*'`, or exclude them all"
            ))
        }
    }
}

/// "left out: 5 nodes (--only x): a, b, …", and the records kept, as lines of a plan or a
/// build's summary (`prefix`: `plan`, `build`); none for a full run.
pub fn left_out_lines(prefix: &str, targeted: Option<&Targeted>) -> Vec<String> {
    let Some(t) = targeted else {
        return Vec::new();
    };
    let mut out = vec![match t.left_out.is_empty() {
        true => format!("{prefix}: {}", t.summary()),
        false => format!("{prefix}: {}: {}", t.summary(), t.left_out.join(", ")),
    }];
    if !t.kept.is_empty() {
        out.push(format!(
            "{prefix}: not deleted (no longer in the source, not selected): {}",
            t.kept.join(", ")
        ));
    }
    out
}
