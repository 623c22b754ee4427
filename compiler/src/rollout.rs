//! `rollout "web": webs, batch = 2, max_failures = 0`: a group of machines a build updates
//! batch by batch (Ansible's `serial` and `max_fail_percentage`). Evaluated once the graph
//! is lowered, like a policy; nothing of it enters any node's id: a rollout changes the
//! order things are done in, never what is done.

use std::collections::BTreeMap;
use std::rc::Rc;

use envc_lang::ast::{Expr, ExprKind, ItemKind};
use envc_lang::{Diagnostic, FileId, Span};

use crate::eval::Evaluator;
use crate::value::{Node, Value};

/// A number of machines, or a share of the group's (`"25%"`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Amount {
    Count(u64),
    Percent(u32),
}

impl Amount {
    /// How many machines a batch takes out of `total`: a share rounded up, at least one.
    pub fn batch_of(self, total: usize) -> usize {
        let n = match self {
            Amount::Count(n) => usize::try_from(n).unwrap_or(usize::MAX),
            Amount::Percent(p) => (total * p as usize).div_ceil(100),
        };
        n.max(1)
    }

    /// How many failed machines a rollout tolerates out of `total`: a share rounded down
    /// (`"10%"` of 6 is none), as Ansible's `max_fail_percentage` counts.
    pub fn limit_of(self, total: usize) -> usize {
        match self {
            Amount::Count(n) => usize::try_from(n).unwrap_or(usize::MAX),
            Amount::Percent(p) => total * p as usize / 100,
        }
    }
}

impl std::fmt::Display for Amount {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Amount::Count(n) => write!(f, "{n}"),
            Amount::Percent(p) => write!(f, "{p}%"),
        }
    }
}

/// A rollout as the graph carries it.
#[derive(Clone, Debug)]
pub struct Rollout {
    pub name: Rc<str>,
    /// Its machines (hosts and VMs), in the order written, each once.
    pub targets: Vec<Rc<Node>>,
    pub batch: Amount,
    pub max_failures: Amount,
}

/// A rollout's defaults: one machine at a time, and the first failure stops it.
const DEFAULT_BATCH: Amount = Amount::Count(1);
const DEFAULT_MAX_FAILURES: Amount = Amount::Count(0);

/// Every `rollout` of the program, evaluated: problems go to `ev.errors`.
pub fn evaluate(ev: &mut Evaluator) -> Vec<Rollout> {
    let program = ev.program();
    let mut out = Vec::new();
    // Where each rollout and each machine was first declared: (file, name span).
    let mut names: BTreeMap<Rc<str>, (FileId, Span)> = BTreeMap::new();
    let mut machines: BTreeMap<String, (Rc<str>, FileId, Span)> = BTreeMap::new();
    for (m, module) in program.modules.iter().enumerate() {
        let file = module.file;
        for item in &module.ast.items {
            let ItemKind::Rollout(r) = &item.kind else {
                continue;
            };
            if let Some((first_file, first)) = names.get(&r.name) {
                ev.errors.push(
                    Diagnostic::new(
                        "rollout::duplicate",
                        format!("rollout \"{}\" is declared twice", r.name),
                    )
                    .label(file, r.name_span, "declared again here")
                    .label(*first_file, *first, "first declared here")
                    .message("A rollout's name is how `plan` and the run record name its batches, so each is declared once.")
                    .help("give one of them another name, or merge their machines into one list"),
                );
                continue;
            }
            names.insert(r.name.clone(), (file, r.name_span));
            let amount = |ev: &mut Evaluator, name: &str, default: Amount| match r.option(name) {
                None => Some(default),
                Some(o) => {
                    let v = ev.top_level(m, &o.value, &format!("a rollout's `{name}`"))?;
                    match amount(name, &v, file, o.value.span) {
                        Ok(a) => Some(a),
                        Err(d) => {
                            ev.errors.push(*d);
                            None
                        }
                    }
                }
            };
            let batch = amount(ev, "batch", DEFAULT_BATCH);
            let max_failures = amount(ev, "max_failures", DEFAULT_MAX_FAILURES);
            let Some(list) = ev.top_level(m, &r.targets, "a rollout's machines") else {
                continue;
            };
            let Some(targets) = machines_of(ev, &list, &r.targets, file) else {
                continue;
            };
            let mut kept: Vec<Rc<Node>> = Vec::new();
            for t in targets {
                if kept.iter().any(|k| k.id == t.id) {
                    continue;
                }
                let key = format!("{}:{}", t.kind.name(), t.name);
                if let Some((other, ofile, ospan)) = machines.get(&key) {
                    ev.errors.push(
                        Diagnostic::new(
                            "rollout::machine-twice",
                            format!("`{key}` is in two rollouts"),
                        )
                        .label(file, r.targets.span, format!("`{key}` is in rollout \"{}\"", r.name))
                        .label(*ofile, *ospan, format!("and in rollout \"{other}\""))
                        .message("A machine is updated in one batch of one rollout: two rollouts would each decide when it is its turn.")
                        .help(format!("leave `{key}` in one of the two lists")),
                    );
                    continue;
                }
                machines.insert(key, (r.name.clone(), file, r.targets.span));
                kept.push(t);
            }
            if let (Some(batch), Some(max_failures)) = (batch, max_failures) {
                out.push(Rollout {
                    name: r.name.clone(),
                    targets: kept,
                    batch,
                    max_failures,
                });
            }
        }
    }
    out
}

/// The machines a rollout's list holds; a diagnostic (in `ev.errors`) for anything else.
fn machines_of(ev: &mut Evaluator, v: &Value, e: &Expr, file: FileId) -> Option<Vec<Rc<Node>>> {
    let Value::List(items) = v else {
        ev.errors.push(
            Diagnostic::new(
                "rollout::not-a-machine",
                format!(
                    "a rollout takes a list of machines, not `{}`",
                    v.type_name()
                ),
            )
            .label(file, e.span, format!("a value of type `{}`", v.type_name()))
            .help("write the machines as a list: `rollout \"web\": [web0, web1], batch = 1`"),
        );
        return None;
    };
    // The element written at position i, when the list is a literal: where to point.
    let written: Option<&Vec<Expr>> = match &e.kind {
        ExprKind::List(xs) if xs.len() == items.len() => Some(xs),
        _ => None,
    };
    let mut out = Vec::new();
    let mut ok = true;
    for (i, item) in items.iter().enumerate() {
        match item {
            Value::Node(n) if n.kind.is_target() => out.push(n.clone()),
            other => {
                ok = false;
                let span = written.map_or(e.span, |xs| xs[i].span);
                let what = match other {
                    Value::Node(n) => format!("{} `{}`", n.kind.name(), n.given_name()),
                    _ => format!("a value of type `{}`", other.type_name()),
                };
                let mut d = Diagnostic::new(
                    "rollout::not-a-machine",
                    format!("a rollout takes machines, and {what} is not one"),
                )
                .label(file, span, format!("{what}, not a host or a VM"))
                .message("A rollout updates machines batch by batch; what is on a machine goes with its batch.");
                d = match other {
                    Value::Node(n) => match &n.target {
                        Some(t) => d.help(format!(
                            "list the machine it is on, {} `{}`",
                            t.kind.name(),
                            t.given_name()
                        )),
                        None => d.help("list only hosts and VMs"),
                    },
                    _ => d.help("list only hosts and VMs"),
                };
                ev.errors.push(d);
            }
        }
    }
    ok.then_some(out)
}

/// A `batch` or `max_failures` value: an int, or a string `"N%"`.
fn amount(name: &str, v: &Value, file: FileId, span: Span) -> Result<Amount, Box<Diagnostic>> {
    let batch = name == "batch";
    let code = if batch {
        "rollout::batch"
    } else {
        "rollout::max-failures"
    };
    let what = if batch {
        "a number of machines (at least 1) or a percentage of the group (\"25%\")"
    } else {
        "a number of failed machines (0 or more) or a percentage of the group (\"10%\")"
    };
    let bad = |title: String, label: &str| {
        let d = Diagnostic::new(code, title)
            .label(file, span, label.to_string())
            .message(format!("`{name}` is {what}."));
        Box::new(if batch {
            d.help("write e.g. `batch = 2` or `batch = \"25%\"`")
        } else {
            d.help("write e.g. `max_failures = 0` (stop at the first failure) or `max_failures = \"10%\"`")
        })
    };
    match v {
        Value::Int(n) if batch && *n < 1 => Err(bad(
            format!("a batch of {n} machines updates nothing"),
            "at least 1",
        )),
        Value::Int(n) if *n < 0 => Err(bad(
            format!("`max_failures` cannot be negative ({n})"),
            "0 or more",
        )),
        Value::Int(n) => Ok(Amount::Count(u64::try_from(*n).unwrap_or(0))),
        Value::Str(s) => {
            let Some(p) = s
                .strip_suffix('%')
                .and_then(|p| p.trim().parse::<u32>().ok())
            else {
                let mut d = bad(
                    format!("`{name} = \"{s}\"` is neither a number nor a percentage"),
                    "a percentage is written \"N%\"",
                );
                if let Ok(n) = s.trim().parse::<i64>() {
                    *d = (*d)
                        .clone()
                        .help(format!("drop the quotes: `{name} = {n}`"));
                }
                return Err(d);
            };
            if batch && p == 0 {
                Err(bad(
                    "a batch of 0% updates nothing".into(),
                    "at least 1% (a share rounds up to one machine)",
                ))
            } else if p > 100 {
                Err(bad(
                    format!("{p}% is more than the whole group"),
                    "at most 100%",
                ))
            } else {
                Ok(Amount::Percent(p))
            }
        }
        other => Err(bad(
            format!(
                "`{name}` is of type `{}`, not a number or a percentage",
                other.type_name()
            ),
            "an int or a string \"N%\"",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::Amount;

    #[test]
    fn batches_round_up_and_limits_round_down() {
        let cases = [
            (Amount::Count(2), 6, 2, 2),
            (Amount::Percent(25), 6, 2, 1),
            (Amount::Percent(1), 6, 1, 0),
            (Amount::Percent(100), 6, 6, 6),
            (Amount::Percent(50), 0, 1, 0),
        ];
        for (a, total, batch, limit) in cases {
            assert_eq!(
                (a.batch_of(total), a.limit_of(total)),
                (batch, limit),
                "{a} of {total}"
            );
        }
    }
}
