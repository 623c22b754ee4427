//! Loading what `stack("core.env")` references: the referenced file is loaded and checked
//! here, once, for the types of its `output`s; their values are deferred, read from that
//! environment's state when this one is planned or built (the executor's `stack` node).
//! This environment owns none of its nodes. Apart from `stack.rs`, which the loader and the
//! checker read, because this loads and checks whole programs: it stands above both.

use std::collections::BTreeMap;
use std::rc::Rc;

use envc_lang::ast::{ExprKind, ItemKind, StrPart};
use envc_lang::{Diagnostic, FileId, Span};

use crate::program::{self, Program};
use crate::source::{join_relative, SourceLoader};
use crate::stack::{NotCrossing, OutputTy, StackRef};

/// How deep references of references are followed (for their output types).
const MAX_DEPTH: usize = 16;

/// Finds the program's stack references (each a top-level `let NAME = stack("FILE")` of a
/// project module), loads and checks each referenced file, and reports what fails there.
pub fn resolve(program: &mut Program, loader: &dyn SourceLoader) {
    // A root that did not load has no references (its error is reported).
    let Some(root) = program.modules.get(program.root) else {
        return;
    };
    let mut visiting = vec![root.path.clone()];
    resolve_in(program, loader, &mut visiting);
}

fn resolve_in(program: &mut Program, loader: &dyn SourceLoader, visiting: &mut Vec<String>) {
    let mut found: Vec<(FileId, Span, String, String, Span)> = Vec::new();
    for m in program.modules.iter().filter(|m| !m.is_std) {
        for item in &m.ast.items {
            let ItemKind::Let(b) = &item.kind else {
                continue;
            };
            let ExprKind::Call { callee, args } = &b.value.kind else {
                continue;
            };
            if !matches!(&callee.kind, ExprKind::Name(n) if &**n == "stack") {
                continue;
            }
            // The file first, by position; `defaults` may follow.
            let Some(arg) = args.first().filter(|a| a.name.is_none()) else {
                continue;
            };
            let ExprKind::Str(parts) = &arg.value.kind else {
                continue;
            };
            let [StrPart::Lit(lit)] = parts.as_slice() else {
                continue;
            };
            found.push((
                m.file,
                b.value.span,
                m.path.clone(),
                lit.to_string(),
                arg.value.span,
            ));
        }
    }
    let this = visiting.last().cloned().unwrap_or_default();
    let root = loader.project_root();
    for (file, span, from, written, arg_span) in found {
        let joined = join_relative(&root, &from, &written);
        let path = joined
            .clone()
            .filter(|p| p.ends_with(".env") && !p.contains(':'));
        // (code, title, label, message, help)
        let problem = match &path {
            None if joined.is_none() => Some((
                "load::bad-stack-path",
                format!("`{written}` is outside the project"),
                "leaves the project root",
                Some(root.describe()),
                root.hint().to_string(),
            )),
            None => Some((
                "load::bad-stack-path",
                format!("`{written}` is not an environment of this project"),
                "not a `.env` file under the project",
                None,
                "name the other environment's `.env` file relative to this one: `stack(\"core.env\")`, `stack(\"../network/core.env\")`".to_string(),
            )),
            Some(p) if *p == this => Some((
                "load::stack",
                format!("`{p}` references itself"),
                "this environment",
                None,
                "use its own bindings: a stack reference reads another environment".to_string(),
            )),
            Some(_) => None,
        };
        let mut refused = BTreeMap::new();
        let outputs = match (problem, &path) {
            (Some((code, title, label, message, help)), _) => {
                let mut d = Diagnostic::new(code, title).label(file, arg_span, label);
                if let Some(m) = message {
                    d = d.message(m);
                }
                program.errors.push(d.help(help));
                None
            }
            // A cycle back to an environment being checked: its outputs are not typed here
            // (the values are read from its state all the same).
            (None, Some(p)) if visiting.contains(p) => None,
            (None, Some(p)) => match outputs_of(p, loader, visiting) {
                Ok((o, r)) => {
                    refused = r;
                    Some(o)
                }
                Err((title, help)) => {
                    program.errors.push(
                        Diagnostic::new("load::stack", title)
                            .label(file, arg_span, "referenced here")
                            .help(help),
                    );
                    None
                }
            },
            (None, None) => None,
        };
        program.stacks.insert(
            (file, span),
            StackRef {
                path: path.unwrap_or(written).into(),
                outputs,
                refused,
            },
        );
    }
}

/// The outputs of environment `path` that can cross, and why the others cannot; or why
/// there are none: (title, help).
type Outputs = (BTreeMap<Rc<str>, OutputTy>, BTreeMap<Rc<str>, NotCrossing>);

fn outputs_of(
    path: &str,
    loader: &dyn SourceLoader,
    visiting: &mut Vec<String>,
) -> Result<Outputs, (String, String)> {
    if visiting.len() > MAX_DEPTH {
        return Err((
            "stack references nested too deeply".into(),
            format!("more than {MAX_DEPTH} environments reference one another in a chain"),
        ));
    }
    let mut referenced = program::load(path, loader);
    if let Some(e) = referenced
        .errors
        .iter()
        .find(|e| e.code == "load::unreadable")
    {
        return Err((
            e.title.clone(),
            "name it relative to this file; build it first if it is new".into(),
        ));
    }
    visiting.push(path.to_string());
    resolve_in(&mut referenced, loader, visiting);
    visiting.pop();
    let (checked, type_errors) = crate::check::check(&referenced);
    if let Some(first) = referenced.errors.iter().chain(&type_errors).next() {
        return Err((
            format!("`{path}` has errors"),
            format!(
                "its first: {}; run `envc check {path}` for all of them",
                first.title
            ),
        ));
    }
    let (mut crossing, mut refused) = (BTreeMap::new(), BTreeMap::new());
    for (name, ty) in &checked.outputs {
        match OutputTy::of(ty) {
            Ok(t) => {
                crossing.insert(name.clone(), t);
            }
            Err(why) => {
                refused.insert(name.clone(), why);
            }
        }
    }
    Ok((crossing, refused))
}
