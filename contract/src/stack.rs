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

/// The outputs node `node` reads, with the type its environment's source declares: a
/// record output field by field (`db.host`), as the compiler defers them.
pub fn reads(node: &NodeSpec) -> Vec<(String, OutputTy)> {
    fn flatten(prefix: String, v: &Val, out: &mut Vec<(String, OutputTy)>) {
        match v {
            Val::Record(r) => {
                for (k, t) in r {
                    flatten(format!("{prefix}.{k}"), t, out);
                }
            }
            v => {
                if let Some(t) = output_ty(v) {
                    out.push((prefix, t));
                }
            }
        }
    }
    let mut out = Vec::new();
    if let Some(Val::Record(r)) = node.attr("outputs") {
        for (k, t) in r {
            flatten(k.clone(), t, &mut out);
        }
    }
    out
}

/// An output type as the `outputs` attribute holds it: a scalar by name, a list as the
/// list of its element's type, a record as the record of its fields'.
fn output_ty(v: &Val) -> Option<OutputTy> {
    match v {
        Val::Str(t) => OutputTy::from_name(t),
        Val::List(el) => match el.as_slice() {
            [el] => Some(OutputTy::List(Box::new(output_ty(el)?))),
            _ => None,
        },
        Val::Record(r) => r
            .iter()
            .map(|(k, t)| Some((k.clone(), output_ty(t)?)))
            .collect::<Option<_>>()
            .map(OutputTy::Record),
        _ => None,
    }
}

/// Output `path` (`db.host`: field `host` of output `db`) of the published outputs.
fn at<'j>(outputs: &'j BTreeMap<String, Json>, path: &str) -> Option<&'j Json> {
    let mut parts = path.split('.');
    let first = outputs.get(parts.next()?)?;
    parts.try_fold(first, |v, k| v.get(k))
}

/// A value of type `ty` as its fact holds it: a scalar as text (as it always was), a list
/// as its JSON; `None` when it is not of that type.
fn text(ty: &OutputTy, v: &Json) -> Option<String> {
    match (ty, v) {
        (OutputTy::Str, Json::String(s)) => Some(s.clone()),
        (OutputTy::Int, Json::Number(n)) if n.is_i64() => Some(n.to_string()),
        (OutputTy::Bool, Json::Bool(b)) => Some(b.to_string()),
        (t @ (OutputTy::List(_) | OutputTy::Record(_)), v) if is(t, v) => Some(v.to_string()),
        _ => None,
    }
}

/// Whether JSON `v` is a value of type `ty`.
fn is(ty: &OutputTy, v: &Json) -> bool {
    match (ty, v) {
        (OutputTy::Str, Json::String(_)) | (OutputTy::Bool, Json::Bool(_)) => true,
        (OutputTy::Int, Json::Number(n)) => n.is_i64(),
        (OutputTy::List(el), Json::Array(xs)) => xs.iter().all(|x| is(el, x)),
        (OutputTy::Record(fields), Json::Object(o)) => fields
            .iter()
            .all(|(k, t)| o.get(k).is_some_and(|x| is(t, x))),
        _ => false,
    }
}

/// A default as JSON (it is data: the checker typed it against the output).
fn plain_json(v: &Val) -> Json {
    match v {
        Val::Str(s) => Json::String(s.clone()),
        Val::Int(n) => Json::from(*n),
        Val::Bool(b) => Json::Bool(*b),
        Val::List(xs) => Json::Array(xs.iter().map(plain_json).collect()),
        Val::Record(r) => Json::Object(r.iter().map(|(k, v)| (k.clone(), plain_json(v))).collect()),
        _ => Json::Null,
    }
}

/// The values `node` reads until its environment publishes them (`defaults = { … }`),
/// as JSON.
fn defaults(node: &NodeSpec) -> BTreeMap<String, Json> {
    match node.attr("defaults") {
        Some(Val::Record(r)) => r.iter().map(|(k, v)| (k.clone(), plain_json(v))).collect(),
        _ => BTreeMap::new(),
    }
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
        declared: String,
        run: String,
        published: Box<Json>,
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
        let Some(v) = published.and_then(|p| at(&p.outputs, &name)) else {
            match at(&defaults, &name).and_then(|d| text(&ty, d)) {
                Some(d) => {
                    facts.insert(fact(&name), d);
                }
                None if published.is_none() => {}
                None => {
                    return Err(StackError::NotPublished {
                        env: env.to_string(),
                        name,
                        run,
                    })
                }
            }
            continue;
        };
        let Some(text) = text(&ty, v) else {
            return Err(StackError::WrongType {
                env: env.to_string(),
                name,
                declared: ty.name(),
                run,
                published: Box::new(v.clone()),
            });
        };
        facts.insert(fact(&name), text);
    }
    Ok(facts)
}

/// An output's text as the value a dependent reads.
pub fn value(ty: &OutputTy, text: &str) -> Option<Val> {
    match ty {
        OutputTy::Str => Some(Val::Str(text.to_string())),
        OutputTy::Int => text.parse().ok().map(Val::Int),
        OutputTy::Bool => text.parse().ok().map(Val::Bool),
        OutputTy::List(_) | OutputTy::Record(_) => {
            let v: Json = serde_json::from_str(text).ok()?;
            is(ty, &v).then(|| val(ty, &v))?
        }
    }
}

/// JSON `v`, of type `ty` (checked), as a value.
fn val(ty: &OutputTy, v: &Json) -> Option<Val> {
    Some(match (ty, v) {
        (OutputTy::Str, Json::String(s)) => Val::Str(s.clone()),
        (OutputTy::Int, Json::Number(n)) => Val::Int(n.as_i64()?),
        (OutputTy::Bool, Json::Bool(b)) => Val::Bool(*b),
        (OutputTy::List(el), Json::Array(xs)) => {
            Val::List(xs.iter().map(|x| val(el, x)).collect::<Option<_>>()?)
        }
        (OutputTy::Record(fields), Json::Object(o)) => Val::Record(
            fields
                .iter()
                .map(|(k, t)| Some((k.clone(), val(t, o.get(k)?)?)))
                .collect::<Option<_>>()?,
        ),
        _ => return None,
    })
}

/// An output's text as a plan shows it: in its type (`5514`, not `"5514"`).
pub fn shown(ty: &OutputTy, text: &str) -> Json {
    match ty {
        OutputTy::Str => Json::String(text.to_string()),
        _ => serde_json::from_str(text).unwrap_or_else(|_| Json::String(text.to_string())),
    }
}

/// The outputs of the `stack` node at `node` that the environment reads: its nodes'
/// attributes and checks, and its own outputs. What no one reads is not shown in a plan.
pub fn read_here(spec: &crate::spec::Spec, node: usize) -> std::collections::BTreeSet<String> {
    fn walk(v: &Val, node: usize, out: &mut std::collections::BTreeSet<String>) {
        match v {
            Val::Output { node: n, output } if *n == node => {
                out.insert(output.clone());
            }
            Val::List(xs) | Val::Concat(xs) => xs.iter().for_each(|x| walk(x, node, out)),
            Val::Record(r) => r.values().for_each(|x| walk(x, node, out)),
            _ => {}
        }
    }
    let mut out = std::collections::BTreeSet::new();
    for n in &spec.nodes {
        n.attrs.values().for_each(|v| walk(v, node, &mut out));
        for c in &n.checks {
            c.args.values().for_each(|v| walk(v, node, &mut out));
        }
    }
    spec.outputs
        .iter()
        .for_each(|(_, v)| walk(v, node, &mut out));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use envc_compiler::{compile, CompileOptions, MemoryLoader};
    use serde_json::json;

    /// The `stack` node of an environment reading core, whose outputs are data of each
    /// shape.
    fn node() -> NodeSpec {
        let core = "output port = 1\noutput subnets = [\"a\"]\noutput db = { host = \"h\", users = [{ name = \"u\", admin = false }] }\n";
        let app = "let core = stack(\"core.env\")\noutput a = core.port\n";
        let loader = MemoryLoader::new([("app.env", app), ("core.env", core)]);
        let c = compile("app.env", &loader, &CompileOptions::default());
        let spec = crate::spec::Spec::from_graph(c.graph.as_ref().unwrap(), &c.sources);
        spec.nodes
            .into_iter()
            .find(|n| n.name == "core.env")
            .unwrap()
    }

    /// What core published is read in the type its source declares: scalars as text, a
    /// list as its JSON, a record field by field; anything else is refused, naming the
    /// output.
    #[test]
    fn published_outputs_are_read_in_their_type() {
        let node = node();
        let read = |outputs: Json| {
            let published = Published {
                run: "r1".into(),
                outputs: serde_json::from_value(outputs).unwrap(),
            };
            facts(&node, "core.env", Some(&published))
        };
        let good = json!({"port": 1, "subnets": ["a", "b"], "db": {"host": "h", "users": [{"name": "u", "admin": false}]}});
        let expected: Facts = [
            ("run", "r1"),
            ("output:port", "1"),
            ("output:subnets", r#"["a","b"]"#),
            ("output:db.host", "h"),
            ("output:db.users", r#"[{"admin":false,"name":"u"}]"#),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        assert_eq!(read(good.clone()), Ok(expected));
        let wrong = |path: &str, v: Json| {
            let mut o = good.clone();
            let mut at = &mut o;
            let parts: Vec<&str> = path.split('.').collect();
            for p in &parts[..parts.len() - 1] {
                at = &mut at[*p];
            }
            at[parts[parts.len() - 1]] = v;
            match read(o) {
                Err(StackError::WrongType { name, .. }) => name,
                other => panic!("{path}: {other:?}"),
            }
        };
        assert_eq!(wrong("subnets", json!([1])), "subnets");
        assert_eq!(wrong("subnets", json!("a")), "subnets");
        assert_eq!(wrong("db.users", json!([{"name": "u"}])), "db.users");
        assert_eq!(wrong("db.host", json!(7)), "db.host");
        assert_eq!(wrong("port", json!("1")), "port");
        let mut no_db = good.clone();
        no_db.as_object_mut().unwrap().remove("db");
        assert!(matches!(
            read(no_db),
            Err(StackError::NotPublished { name, .. }) if name == "db.host"
        ));
    }

    #[test]
    fn facts_are_read_back_as_values() {
        let list = OutputTy::List(Box::new(OutputTy::Str));
        let users = OutputTy::List(Box::new(OutputTy::Record(
            [("admin".to_string(), OutputTy::Bool)].into(),
        )));
        let cases: &[(&OutputTy, &str, Option<Val>)] = &[
            (&OutputTy::Int, "5514", Some(Val::Int(5514))),
            (&OutputTy::Int, "x", None),
            (
                &list,
                r#"["a"]"#,
                Some(Val::List(vec![Val::Str("a".into())])),
            ),
            (&list, r#"[1]"#, None),
            (
                &users,
                r#"[{"admin":true}]"#,
                Some(Val::List(vec![Val::Record(
                    [("admin".to_string(), Val::Bool(true))].into(),
                )])),
            ),
        ];
        for (ty, text, expected) in cases {
            assert_eq!(&value(ty, text), expected, "{ty:?} {text}");
        }
        // A plan shows each in its type.
        assert_eq!(shown(&OutputTy::Int, "5514"), json!(5514));
        assert_eq!(shown(&OutputTy::Str, "5514"), json!("5514"));
        assert_eq!(shown(&list, r#"["a"]"#), json!(["a"]));
    }
}
