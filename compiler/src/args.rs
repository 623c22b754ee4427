//! Matching call arguments to parameters, shared by the checker and the evaluator so that
//! both accept exactly the same calls.

use std::rc::Rc;

use envc_lang::ast::Arg;
use envc_lang::{did_you_mean, Diagnostic, FileId, Span};

/// For each parameter, the index of the argument that fills it (if any).
pub fn bind_args(
    callee: &str,
    params: &[(Rc<str>, bool)],
    args: &[Arg],
    file: FileId,
    call: Span,
) -> (Vec<Option<usize>>, Vec<Diagnostic>) {
    let mut slots: Vec<Option<usize>> = vec![None; params.len()];
    let mut errors = Vec::new();
    let mut next_positional = 0;
    for (i, arg) in args.iter().enumerate() {
        match &arg.name {
            None => {
                if next_positional < params.len() {
                    slots[next_positional] = Some(i);
                    next_positional += 1;
                } else {
                    errors.push(
                        Diagnostic::new(
                            "type::too-many-arguments",
                            format!("too many arguments to `{callee}`"),
                        )
                        .label(file, arg.value.span, "no parameter left for this argument")
                        .help(format!(
                            "`{callee}` takes {} argument{}: {}",
                            params.len(),
                            if params.len() == 1 { "" } else { "s" },
                            params
                                .iter()
                                .map(|(n, _)| &**n)
                                .collect::<Vec<_>>()
                                .join(", ")
                        )),
                    );
                }
            }
            Some(name) => match params.iter().position(|(n, _)| *n == name.name) {
                Some(p) if slots[p].is_some() => errors.push(
                    Diagnostic::new(
                        "type::argument-twice",
                        format!("`{}` is given twice", name.name),
                    )
                    .label(file, name.span, "already given by position")
                    .help("give each parameter once"),
                ),
                Some(p) => slots[p] = Some(i),
                None => {
                    let mut d = Diagnostic::new(
                        "type::unknown-argument",
                        format!("`{callee}` has no parameter `{}`", name.name),
                    )
                    .label(file, name.span, "unknown parameter");
                    d = d.help(
                        did_you_mean(&name.name, params.iter().map(|(n, _)| &**n)).unwrap_or_else(
                            || {
                                format!(
                                    "its parameters are: {}",
                                    params
                                        .iter()
                                        .map(|(n, _)| &**n)
                                        .collect::<Vec<_>>()
                                        .join(", ")
                                )
                            },
                        ),
                    );
                    errors.push(d);
                }
            },
        }
    }
    let missing: Vec<&str> = params
        .iter()
        .zip(&slots)
        .filter(|((_, req), s)| *req && s.is_none())
        .map(|((n, _), _)| &**n)
        .collect();
    if !missing.is_empty() {
        let list = missing
            .iter()
            .map(|m| format!("`{m}`"))
            .collect::<Vec<_>>()
            .join(", ");
        errors.push(
            Diagnostic::new("type::missing-argument", format!("`{callee}` needs {list}"))
                .label(file, call, format!("missing {list}"))
                .help(format!(
                    "add {}",
                    missing
                        .iter()
                        .map(|m| format!("`{m} = …`"))
                        .collect::<Vec<_>>()
                        .join(", ")
                )),
        );
    }
    (slots, errors)
}
