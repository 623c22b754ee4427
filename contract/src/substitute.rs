//! Substitution: put what inputs produced in place of deferred values and node references,
//! the first part of a node's resolution (`resolve.rs`); and the forms a substituted value
//! takes: hashed, shown, given to a template or to Kubernetes. ("Resolve" elsewhere means package resolution against an archive, in
//! `envc_lockfiles::resolve`.) The result is the *resolved hash*: with the
//! target's identity it decides whether a node has to run. Inputs enter by their output
//! hash, not their derivation id, so an input that re-ran and produced the same output does
//! not make its dependents run (early cutoff).

use std::collections::BTreeMap;

use envc_compiler::types::NodeKind;
use envc_compiler::SourceLoader;
use serde_json::{json, Value as Json};

use crate::checks::CheckSpec;
use crate::record::Facts;
use crate::spec::{CheckDecl, NodeSpec, Sealed, Spec, Val};

/// What dependents know of a node that was realized (or, in a plan, is predicted to be).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Known {
    pub facts: Facts,
    pub output_hash: String,
}

impl Known {
    pub fn new(facts: Facts) -> Known {
        Known {
            output_hash: crate::record::output_hash(&facts),
            facts,
        }
    }

    /// What a record says its node produced.
    pub fn of_record(r: &crate::record::RealizationRecord) -> Known {
        Known {
            facts: r.facts.clone(),
            output_hash: r.output_hash.clone(),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Resolution {
    /// Waiting for this input's output.
    Pending(usize),
    /// The node cannot be resolved: the message says why and what to do.
    Failed(String),
    /// It uses this secret, whose value is not at hand (a plan made without it).
    Unread(String),
}

/// How a deferred output's value is read from the facts its producer reported: by the
/// producer's kind (`NodeType::read_output`). The registry's answer, handed in by whoever
/// makes the resolver: this layer is below the kinds, which resolve through it.
pub type ReadOutput = fn(&NodeSpec, &str, &Facts) -> Result<Val, Resolution>;

/// Output `output` of `producer` read from its fact `fact`: text, or a number where the
/// output is declared `deferred int` (a port).
pub fn read_fact(
    producer: &NodeSpec,
    output: &str,
    fact: &str,
    facts: &Facts,
) -> Result<Val, Resolution> {
    match facts.get(fact) {
        // Facts are text; an output declared `deferred int` (a port) is a number.
        Some(s) if output_is_int(producer.kind, output) => match s.parse() {
            Ok(n) => Ok(Val::Int(n)),
            Err(_) => Err(Resolution::Failed(format!(
                "`{}` reported `{output}` = {s:?}, which is not a number",
                producer.key
            ))),
        },
        Some(s) => Ok(Val::Str(s.clone())),
        None => Err(Resolution::Failed(format!(
            "`{}` reported no `{output}`",
            producer.key
        ))),
    }
}

/// How a preview (`envc render --preview`) writes a deferred value not known yet:
/// `<known after build: vm:web.address>`. A delivery refuses any object that holds it.
pub const PLACEHOLDER: &str = "<known after build: ";

/// The placeholder of output `output` of the node keyed `producer`.
pub fn placeholder(producer: &str, output: &str) -> String {
    format!("{PLACEHOLDER}{producer}.{output}>")
}

/// The values a text holds placeholders for (`vm:web.address`), in order, each once.
pub fn placeholders_in(text: &str) -> Vec<String> {
    let mut found: Vec<String> = Vec::new();
    for (at, _) in text.match_indices(PLACEHOLDER) {
        let rest = &text[at + PLACEHOLDER.len()..];
        if let Some(end) = rest.find('>') {
            let name = rest[..end].to_string();
            if !found.contains(&name) {
                found.push(name);
            }
        }
    }
    found
}

fn output_is_int(kind: NodeKind, output: &str) -> bool {
    envc_compiler::builtins::schema(kind)
        .outputs
        .iter()
        .any(|(n, ty)| *n == output && matches!(ty().base(), envc_compiler::types::Ty::Int))
}

pub struct Resolver<'a> {
    spec: &'a Spec,
    known: &'a dyn Fn(usize) -> Option<&'a Known>,
    read_output: ReadOutput,
    /// A deferred value not known yet becomes its [`placeholder`] rather than `Pending`.
    preview: bool,
    /// Moved nodes are hashed under their old keys (`Spec::moved`): what the record of a
    /// renamed node was hashed with.
    pub as_before: bool,
}

impl<'a> Resolver<'a> {
    pub fn new(
        spec: &'a Spec,
        known: &'a dyn Fn(usize) -> Option<&'a Known>,
        read_output: ReadOutput,
    ) -> Resolver<'a> {
        Resolver {
            spec,
            known,
            read_output,
            preview: false,
            as_before: false,
        }
    }

    /// A resolver for a preview: what is not known yet is written as a placeholder.
    pub fn previewing(
        spec: &'a Spec,
        known: &'a dyn Fn(usize) -> Option<&'a Known>,
        read_output: ReadOutput,
    ) -> Resolver<'a> {
        Resolver {
            preview: true,
            ..Resolver::new(spec, known, read_output)
        }
    }

    pub fn spec(&self) -> &'a Spec {
        self.spec
    }

    /// The key node `j` is hashed with: its old one when resolving as before the moves.
    pub fn key_of(&self, j: usize) -> &'a str {
        match self.spec.moved.get(&j) {
            Some(m) if self.as_before => &m.key,
            _ => &self.spec.nodes[j].key,
        }
    }

    fn known(&self, i: usize) -> Result<&'a Known, Resolution> {
        (self.known)(i).ok_or(Resolution::Pending(i))
    }

    /// A secret-bearing string, with its hash under the store's key.
    fn seal(&self, value: String) -> Result<Val, Resolution> {
        let secrets = self.spec.secrets.as_ref().ok_or_else(|| {
            Resolution::Failed(
                "a secret was used before the secrets were read (this is a bug in envc)".into(),
            )
        })?;
        Ok(Val::Sealed(Sealed {
            keyed: secrets.keyed(value.as_bytes()),
            value,
        }))
    }

    /// The value with deferred parts replaced by what their producers reported.
    pub fn substitute(&self, v: &Val) -> Result<Val, Resolution> {
        Ok(match v {
            Val::Output { node, output } => {
                let producer = &self.spec.nodes[*node];
                let facts = match self.known(*node) {
                    Ok(k) => &k.facts,
                    // A string even where the field is a number (a port): the preview is
                    // for people to read, and a cluster must refuse it if it gets there.
                    Err(Resolution::Pending(_)) if self.preview => {
                        return Ok(Val::Str(placeholder(&producer.key, output)))
                    }
                    Err(e) => return Err(e),
                };
                (self.read_output)(producer, output, facts)?
            }
            Val::Concat(parts) => {
                let mut s = String::new();
                let mut sealed = false;
                for p in parts {
                    match self.substitute(p)? {
                        Val::Str(x) => s.push_str(&x),
                        Val::Int(n) => s.push_str(&n.to_string()),
                        // Interpolating a secret makes the whole string secret.
                        Val::Sealed(x) => {
                            sealed = true;
                            s.push_str(&x.value);
                        }
                        other => s.push_str(&to_json(&other, self).to_string()),
                    }
                }
                if sealed {
                    self.seal(s)?
                } else {
                    Val::Str(s)
                }
            }
            Val::Json(inner) => {
                let (text, sealed) = match self.substitute(inner)? {
                    Val::Sealed(x) => (Json::from(x.value).to_string(), true),
                    Val::Str(x) => (Json::from(x).to_string(), false),
                    Val::Int(n) => (n.to_string(), false),
                    other => (to_json(&other, self).to_string(), false),
                };
                if sealed {
                    self.seal(text)?
                } else {
                    Val::Str(text)
                }
            }
            Val::Secret(name) => {
                let secrets = self.spec.secrets.as_ref();
                let value = secrets.and_then(|s| s.value(name)).ok_or_else(|| {
                    match secrets.is_some_and(|s| s.unread().contains_key(name)) {
                        true => Resolution::Unread(name.clone()),
                        false => Resolution::Failed(format!(
                            "secret `{name}` was not read before the run (this is a bug in envc)"
                        )),
                    }
                })?;
                self.seal(value.to_string())?
            }
            Val::List(xs) => Val::List(
                xs.iter()
                    .map(|x| self.substitute(x))
                    .collect::<Result<_, _>>()?,
            ),
            Val::Record(r) => Val::Record(
                r.iter()
                    .map(|(k, x)| Ok((k.clone(), self.substitute(x)?)))
                    .collect::<Result<_, _>>()?,
            ),
            Val::Node(j) => {
                self.known(*j)?;
                Val::Node(*j)
            }
            other => other.clone(),
        })
    }
}

/// One node being resolved: its substituted attributes, and what of them is hashed (and
/// shown in plans). A node kind's `resolve` reads the attributes and puts what determines
/// its payload; `resolve::resolve` adds pins and checks and hashes the lot.
pub struct Resolving<'a> {
    pub spec: &'a Spec,
    pub node: &'a NodeSpec,
    pub attrs: BTreeMap<String, Val>,
    pub files: &'a dyn SourceLoader,
    resolver: Resolver<'a>,
    pub hashed: BTreeMap<String, Json>,
    pub shown: BTreeMap<String, String>,
}

impl<'a> Resolving<'a> {
    pub fn new(
        resolver: Resolver<'a>,
        node: &'a NodeSpec,
        attrs: BTreeMap<String, Val>,
        files: &'a dyn SourceLoader,
    ) -> Resolving<'a> {
        Resolving {
            spec: resolver.spec,
            node,
            attrs,
            files,
            resolver,
            hashed: BTreeMap::new(),
            shown: BTreeMap::new(),
        }
    }

    pub fn resolver(&self) -> &Resolver<'a> {
        &self.resolver
    }

    /// Hashes `value` as attribute `name`, and shows it so.
    pub fn put(&mut self, name: &str, value: Json) {
        self.shown.insert(name.to_string(), display(&value));
        self.hashed.insert(name.to_string(), value);
    }

    /// [`Resolving::put`] of attribute `name` as it was given, when it was.
    pub fn put_given(&mut self, name: &str) {
        if let Some(v) = self.attrs.get(name) {
            let j = self.json(v);
            self.put(name, j);
        }
    }

    /// Hashes `value` as attribute `name` without showing it.
    pub fn hash_only(&mut self, name: &str, value: Json) {
        self.hashed.insert(name.to_string(), value);
    }

    /// Shows `text` as attribute `name` without hashing it.
    pub fn show(&mut self, name: &str, text: String) {
        self.shown.insert(name.to_string(), text);
    }

    /// The hashed form of a substituted value.
    pub fn json(&self, v: &Val) -> Json {
        to_json(v, &self.resolver)
    }

    /// A string attribute (empty when absent).
    pub fn text(&self, name: &str) -> String {
        match self.attrs.get(name) {
            Some(Val::Str(s)) => s.clone(),
            _ => String::new(),
        }
    }

    /// A boolean attribute (false when absent).
    pub fn flag(&self, name: &str) -> bool {
        matches!(self.attrs.get(name), Some(Val::Bool(true)))
    }

    /// The nodes a list attribute refers to.
    pub fn nodes_of(&self, name: &str) -> Vec<usize> {
        match self.attrs.get(name) {
            Some(Val::List(xs)) => xs
                .iter()
                .filter_map(|x| match x {
                    Val::Node(j) => Some(*j),
                    _ => None,
                })
                .collect(),
            _ => Vec::new(),
        }
    }

    /// What node `i` produced, or `Pending` while it is not known.
    pub fn known(&self, i: usize) -> Result<&'a Known, Resolution> {
        self.resolver.known(i)
    }

    /// The node cannot be resolved: `message`, naming the node.
    pub fn fail(&self, message: &str) -> Resolution {
        Resolution::Failed(format!("`{}`: {message}", self.node.key))
    }
}

/// The hashed form of a substituted value: typed where JSON has no type, node references
/// as (node, output hash).
pub fn to_json(v: &Val, r: &Resolver) -> Json {
    match v {
        Val::Int(n) => json!(n),
        Val::Str(s) => json!(s),
        Val::Bool(b) => json!(b),
        Val::Size(n) => json!({ "size": n }),
        Val::Mode(m) => json!({ "mode": format!("0o{m:o}") }),
        Val::Path { path, blake3 } => json!({ "path": path, "blake3": blake3 }),
        Val::List(xs) => Json::Array(xs.iter().map(|x| to_json(x, r)).collect()),
        Val::Record(m) => Json::Object(m.iter().map(|(k, x)| (k.clone(), to_json(x, r))).collect()),
        Val::Node(j) => json!({
            "node": r.key_of(*j),
            "output": (r.known)(*j).map(|k| k.output_hash.as_str()),
        }),
        Val::Sealed(s) => json!({ "secret": s.keyed }),
        Val::Output { .. } | Val::Concat(_) | Val::Secret(_) | Val::Json(_) => json!(null),
    }
}

/// A substituted value as Kubernetes reads it (as `envc_compiler::manifest::to_json` does
/// before substitution): a size is a quantity, a mode its decimal value.
pub fn k8s_json(v: &Val) -> Json {
    match v {
        Val::Int(n) => json!(n),
        Val::Str(s) => json!(s),
        Val::Bool(b) => json!(b),
        Val::Size(n) => envc_k8s::quantity(*n),
        Val::Mode(m) => json!(m),
        Val::List(xs) => Json::Array(xs.iter().map(k8s_json).collect()),
        Val::Record(m) => Json::Object(m.iter().map(|(k, x)| (k.clone(), k8s_json(x))).collect()),
        // The compiler refuses these in a manifest (`eval::manifest-schema`,
        // `eval::exposed-secret`), and substitution leaves no deferred value.
        Val::Path { .. }
        | Val::Node(_)
        | Val::Output { .. }
        | Val::Concat(_)
        | Val::Json(_)
        | Val::Secret(_)
        | Val::Sealed(_) => Json::Null,
    }
}

/// Template variables: plain JSON, as a template author expects.
pub fn template_json(v: &Val, spec: &Spec) -> Json {
    match v {
        Val::Int(n) => json!(n),
        Val::Str(s) => json!(s),
        Val::Bool(b) => json!(b),
        Val::Size(n) => json!(n),
        Val::Mode(m) => json!(format!("{m:04o}")),
        Val::Path { path, .. } => json!(path),
        Val::List(xs) => Json::Array(xs.iter().map(|x| template_json(x, spec)).collect()),
        Val::Record(r) => Json::Object(
            r.iter()
                .map(|(k, x)| (k.clone(), template_json(x, spec)))
                .collect(),
        ),
        Val::Node(j) => {
            let n = &spec.nodes[*j];
            json!({ "kind": n.kind.name(), "name": n.name })
        }
        // What the template renders is the secret; the file holding it is sealed.
        Val::Sealed(s) => json!(s.value),
        Val::Output { .. } | Val::Concat(_) | Val::Secret(_) | Val::Json(_) => json!(null),
    }
}

/// Whether a substituted value holds a secret.
pub fn holds_sealed(v: &Val) -> bool {
    match v {
        Val::Sealed(_) => true,
        Val::List(xs) => xs.iter().any(holds_sealed),
        Val::Record(r) => r.values().any(holds_sealed),
        _ => false,
    }
}

/// Short values inline, long ones as a hash: what a plan shows.
pub fn display(v: &Json) -> String {
    let s = v.to_string();
    if s.len() <= 100 {
        s
    } else {
        format!(
            "blake3:{} ({} bytes)",
            &blake3::hash(s.as_bytes()).to_hex()[..16],
            s.len()
        )
    }
}

pub fn content_display(bytes: &[u8]) -> String {
    format!(
        "blake3:{} ({} bytes)",
        &blake3::hash(bytes).to_hex()[..16],
        bytes.len()
    )
}

/// A node's checks with what their deferred values read substituted.
pub fn resolve_checks(node: &NodeSpec, r: &Resolver) -> Result<Vec<CheckSpec>, Resolution> {
    node.checks
        .iter()
        .map(|c| {
            Ok(CheckSpec {
                phase: c.phase,
                kind: c.kind,
                args: c
                    .args
                    .iter()
                    .map(|(k, v)| Ok((k.clone(), r.substitute(v)?)))
                    .collect::<Result<_, Resolution>>()?,
                location: c.location.clone(),
            })
        })
        .collect()
}

/// A check as written, its deferred values named (`${web-0.address}`): what a plan shows
/// before they are known.
pub fn describe_decl(spec: &Spec, c: &CheckDecl) -> String {
    fn name(spec: &Spec, v: &Val) -> String {
        match v {
            Val::Output { node, output } => format!("${{{}.{output}}}", spec.nodes[*node].name),
            Val::Json(inner) => name(spec, inner),
            Val::Concat(parts) => parts
                .iter()
                .map(|p| match p {
                    Val::Str(s) => s.clone(),
                    Val::Int(n) => n.to_string(),
                    other => name(spec, other),
                })
                .collect(),
            other => format!("{other:?}"),
        }
    }
    crate::checks::describe(c.kind, &c.args, &|v| name(spec, v))
}

/// Why a template did not render: minijinja's detail (an undefined variable named, a syntax
/// error), with the template and line it was found at.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TemplateError {
    pub path: String,
    pub line: Option<usize>,
    pub detail: String,
}

impl std::fmt::Display for TemplateError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let line = self.line.map_or(String::new(), |l| format!(":{l}"));
        write!(f, "template `{}{line}`: {}", self.path, self.detail)
    }
}

impl std::error::Error for TemplateError {}

/// The minijinja environment templates are rendered in (and checked against, by
/// `templates::check_templates`).
pub fn template_environment<'s>() -> minijinja::Environment<'s> {
    let mut env = minijinja::Environment::new();
    env.set_undefined_behavior(minijinja::UndefinedBehavior::Strict);
    // An undefined value's error names it only in debug mode, which minijinja turns on
    // only in debug builds: the binary that ships must say `missing`, not just "undefined".
    env.set_debug(true);
    // Fuel bounds loops, so a template cannot hang a build.
    env.set_fuel(Some(50_000_000));
    if let Ok(syntax) = minijinja::syntax::SyntaxConfig::builder()
        .keep_trailing_newline(true)
        .build()
    {
        env.set_syntax(syntax);
    }
    env
}

/// Renders a minijinja template strictly: an undefined variable is an error, not an empty
/// string.
pub fn render_template(path: &str, text: &str, vars: &Json) -> Result<Vec<u8>, TemplateError> {
    let mut env = template_environment();
    let describe = |e: minijinja::Error| TemplateError {
        path: path.to_string(),
        line: e.line(),
        detail: e
            .detail()
            .map_or_else(|| e.kind().to_string(), str::to_string),
    };
    env.add_template(path, text).map_err(describe)?;
    let t = env.get_template(path).map_err(describe)?;
    t.render(jinja_value(vars))
        .map(String::into_bytes)
        .map_err(describe)
}

fn jinja_value(j: &Json) -> minijinja::Value {
    use minijinja::Value as V;
    match j {
        Json::Null => V::from(()),
        Json::Bool(b) => V::from(*b),
        Json::Number(n) => n.as_i64().map_or_else(|| V::from(n.to_string()), V::from),
        Json::String(s) => V::from(s.as_str()),
        Json::Array(xs) => V::from(xs.iter().map(jinja_value).collect::<Vec<_>>()),
        Json::Object(m) => V::from(
            m.iter()
                .map(|(k, v)| (k.clone(), jinja_value(v)))
                .collect::<BTreeMap<String, V>>(),
        ),
    }
}

/// An output of the environment as JSON, deferred values substituted where their producer
/// is known (`null` where it is not).
pub fn output_json<'a>(
    spec: &'a Spec,
    v: &Val,
    known: &'a dyn Fn(usize) -> Option<&'a Known>,
    read_output: ReadOutput,
) -> Json {
    let r = Resolver::new(spec, known, read_output);
    match r.substitute(v) {
        Ok(v) => shown_json(&v, spec),
        Err(_) => Json::Null,
    }
}

/// [`template_json`], for people: a secret shows as `<secret>`.
fn shown_json(v: &Val, spec: &Spec) -> Json {
    match v {
        Val::Sealed(_) => json!("<secret>"),
        Val::List(xs) => Json::Array(xs.iter().map(|x| shown_json(x, spec)).collect()),
        Val::Record(r) => Json::Object(
            r.iter()
                .map(|(k, x)| (k.clone(), shown_json(x, spec)))
                .collect(),
        ),
        other => template_json(other, spec),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // a test that cannot go on fails by panicking

    use super::*;
    use envc_compiler::{compile, CompileOptions, MemoryLoader};

    /// `to_json` of a value holding deferred values, once the VMs report `facts`: the text
    /// the output becomes must parse as JSON and read back as `expected`.
    fn check(facts: &[(&str, &[(&str, &str)])], expected: Json) {
        let src = "let img = image(name = \"i\")\n\
                   let a = vm(name = \"db-0\", image = img)\n\
                   let b = vm(name = \"db-1\", image = img)\n\
                   output init = to_json({ _id = \"rs0\", members = [for i, m in [a, b] => { _id = i, host = \"${m.address}:27017\" }], ports = [a.port], raw = a.address })\n";
        let c = compile(
            "main.env",
            &MemoryLoader::new([("main.env", src)]),
            &CompileOptions::default(),
        );
        assert!(c.diagnostics.is_empty(), "{:#?}", c.diagnostics);
        let spec = Spec::from_graph(&c.graph.unwrap(), &c.sources);
        let known: Vec<Option<Known>> = spec
            .nodes
            .iter()
            .map(|n| {
                let f = facts.iter().find(|(name, _)| *name == n.name)?.1;
                Some(Known::new(
                    f.iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect(),
                ))
            })
            .collect();
        let (_, v) = &spec.outputs[0];
        // Every output as the fact of its name, as most kinds report them.
        let read: ReadOutput = |p, o, f| read_fact(p, o, o, f);
        let text = output_json(&spec, v, &|j| known[j].as_ref(), read);
        let Json::String(text) = text else {
            panic!("not a string: {text}")
        };
        let parsed: Json = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
        assert_eq!(parsed, expected, "{text}");
    }

    #[test]
    fn to_json_of_deferred_values_is_json_once_they_are_known() {
        check(
            &[
                ("db-0", &[("address", "10.0.0.2"), ("port", "22")]),
                ("db-1", &[("address", "10.0.0.3"), ("port", "22")]),
            ],
            json!({"_id": "rs0", "members": [{"_id": 0, "host": "10.0.0.2:27017"}, {"_id": 1, "host": "10.0.0.3:27017"}], "ports": [22], "raw": "10.0.0.2"}),
        );
        // What a producer reports is escaped where it lands, quotes and backslashes too.
        check(
            &[
                ("db-0", &[("address", "a\"b\\c\n"), ("port", "1")]),
                ("db-1", &[("address", "}]"), ("port", "2")]),
            ],
            json!({"_id": "rs0", "members": [{"_id": 0, "host": "a\"b\\c\n:27017"}, {"_id": 1, "host": "}]:27017"}], "ports": [1], "raw": "a\"b\\c\n"}),
        );
    }
}
