//! `stack` nodes: another environment's outputs, as its state published them. The CLI
//! reads each referenced state once ([`Published`], into `Spec::stacks`) before anything
//! is planned; a `stack` node's facts are the outputs it reads, checked against the types
//! the referenced source declares. Its resolved hash covers those values, so a moved output
//! re-runs exactly the nodes that read it, and an unchanged one nothing.

use std::collections::BTreeMap;

use envc_compiler::stack::OutputTy;
use serde_json::Value as Json;

use crate::record::Facts;
use crate::spec::{NodeSpec, Val};

pub use crate::spec::Published;

/// The fact holding the referenced run.
pub const RUN: &str = "run";

/// The fact holding output `name` (apart from [`RUN`], whatever the output is called).
pub fn fact(name: &str) -> String {
    format!("output:{name}")
}

/// The outputs node `node` reads, with the type its environment's source declares.
pub fn reads(node: &NodeSpec) -> Vec<(&str, OutputTy)> {
    match node.attr("outputs") {
        Some(Val::Record(r)) => r
            .iter()
            .filter_map(|(k, v)| match v {
                Val::Str(t) => Some((k.as_str(), OutputTy::from_name(t)?)),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    }
}

/// The values `node` reads until its environment publishes them (`defaults = { … }`), as
/// text.
fn defaults(node: &NodeSpec) -> BTreeMap<&str, String> {
    let Some(Val::Record(r)) = node.attr("defaults") else {
        return BTreeMap::new();
    };
    r.iter()
        .filter_map(|(k, v)| {
            let text = match v {
                Val::Str(s) => s.clone(),
                Val::Int(n) => n.to_string(),
                Val::Bool(b) => b.to_string(),
                _ => return None,
            };
            Some((k.as_str(), text))
        })
        .collect()
}

/// The [`RUN`] fact of a reference that read defaults only: its environment was never built.
pub const NEVER_BUILT: &str = "none";

/// Why a `stack` node's facts cannot be read; each says what to do. `env` is the
/// referenced environment as the user names it, `run` the run it last published.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StackError {
    /// It was never built, and what is read has no default.
    NeverBuilt { env: String },
    /// Its last build did not publish an output that is read.
    NotPublished {
        env: String,
        name: String,
        run: String,
    },
    /// Its last build published an output of another type than its source declares.
    WrongType {
        env: String,
        name: String,
        declared: &'static str,
        run: String,
        published: Json,
    },
}

impl std::fmt::Display for StackError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StackError::NeverBuilt { env } => write!(
                f,
                "`{env}` was never built, so there are no outputs of it to read: build it first (`envc build {env}`), or, when it reads this environment too, give what is read here a default until it is built (`stack(\"…\", defaults = {{ NAME = … }})`)"
            ),
            StackError::NotPublished { env, name, run } => write!(
                f,
                "`{env}` declares output `{name}`, but its last build (run {run}) did not publish it: build `{env}` again"
            ),
            StackError::WrongType {
                env,
                name,
                declared,
                run,
                published,
            } => write!(
                f,
                "`{env}`'s output `{name}` is {declared} in its source, but its last build (run {run}) published {published}: build `{env}` again"
            ),
        }
    }
}

impl std::error::Error for StackError {}

/// The facts of `stack` node `node`, from what its environment (`env`, as the user names
/// it) published (`None`: never built), its defaults where it published nothing, or why it
/// cannot be read, as a sentence that says what to do.
pub fn facts(
    node: &NodeSpec,
    env: &str,
    published: Option<&Published>,
) -> Result<Facts, StackError> {
    let defaults = defaults(node);
    let reads = reads(node);
    let run = match published {
        Some(p) => p.run.clone(),
        // With defaults, a reference reads those (and what reads an output without one
        // fails, naming it): how two environments that read each other start.
        None if !defaults.is_empty() => NEVER_BUILT.to_string(),
        None => {
            return Err(StackError::NeverBuilt {
                env: env.to_string(),
            });
        }
    };
    let mut facts = Facts::from([(RUN.to_string(), run.clone())]);
    for (name, ty) in reads {
        let Some(v) = published.and_then(|p| p.outputs.get(name)) else {
            match defaults.get(name) {
                Some(d) => {
                    facts.insert(fact(name), d.clone());
                }
                None if published.is_none() => {}
                None => {
                    return Err(StackError::NotPublished {
                        env: env.to_string(),
                        name: name.to_string(),
                        run,
                    })
                }
            }
            continue;
        };
        let text = match (ty, v) {
            (OutputTy::Str, Json::String(s)) => s.clone(),
            (OutputTy::Int, Json::Number(n)) if n.is_i64() => n.to_string(),
            (OutputTy::Bool, Json::Bool(b)) => b.to_string(),
            (_, other) => {
                return Err(StackError::WrongType {
                    env: env.to_string(),
                    name: name.to_string(),
                    declared: ty.name(),
                    run,
                    published: other.clone(),
                })
            }
        };
        facts.insert(fact(name), text);
    }
    Ok(facts)
}

/// An output's text as the value a dependent reads.
pub fn value(ty: OutputTy, text: &str) -> Option<Val> {
    match ty {
        OutputTy::Str => Some(Val::Str(text.to_string())),
        OutputTy::Int => text.parse().ok().map(Val::Int),
        OutputTy::Bool => text.parse().ok().map(Val::Bool),
    }
}
