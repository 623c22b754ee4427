//! Runtime values. Values are immutable and shared (`Rc`), so a node built once is the same
//! object wherever it flows, and its id is computed once, when it is constructed.

use std::collections::BTreeMap;
use std::fmt;
use std::rc::Rc;

use envc_lang::ast::FnDecl;
use envc_lang::{FileId, Span};

use crate::builtins::Builtin;
use crate::id::DerivationId;
use crate::types::{CheckKind, ModuleId, NodeKind};

/// Still here for the executor, which prints a check's sizes through this path.
pub use crate::size::format_size;

#[derive(Clone, Debug)]
pub enum Value {
    Int(i64),
    Str(Rc<str>),
    Bool(bool),
    Size(u64),
    Mode(u32),
    Path(Rc<ProjectFile>),
    List(Rc<[Value]>),
    Record(Rc<BTreeMap<Rc<str>, Value>>),
    Fn(Rc<Closure>),
    Builtin(Builtin),
    Node(Rc<Node>),
    Deferred(Rc<Deferred>),
    Module(ModuleId),
    Check(Rc<Check>),
}

/// A check (`http("http://${vm.address}/")`): a probe run on a node's target, before it
/// changes anything (`require`) or after (`expect`). Its arguments, defaults filled in, may
/// hold deferred values. Where it was written is kept for messages, never hashed.
#[derive(Debug)]
pub struct Check {
    pub kind: CheckKind,
    pub args: BTreeMap<Rc<str>, Value>,
    pub file: FileId,
    pub span: Span,
}

/// A file of the project, identified by its project-relative path and content hash.
#[derive(Debug, PartialEq, Eq)]
pub struct ProjectFile {
    pub path: Rc<str>,
    pub hash: blake3::Hash,
}

/// A value known only once a node has been realized.
#[derive(Debug)]
pub enum Deferred {
    /// `vm.address`: output `output` of `node`.
    Output { node: Rc<Node>, output: Rc<str> },
    /// A string built from known strings and deferred parts, concatenated at deploy time.
    Concat(Vec<Value>),
    /// `secret("name")`: a value only the executor reads (from the project's secrets), never
    /// the compiler; nodes hold its name. Whatever is built from it is secret too.
    Secret(Rc<str>),
    /// A deferred value written as JSON once it is known (`to_json` of a value that holds
    /// one): a string quoted and escaped, a number as is. It sits inside a `Concat` beside
    /// the known JSON around it, so the executor, not the compiler, does the escaping of
    /// what only it reads (a member address, a password with a `"` in it).
    Json(Value),
}

pub struct Closure {
    pub decl: Rc<FnDecl>,
    pub env: Env,
    pub module: ModuleId,
}

impl fmt::Debug for Closure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "<fn {}>",
            self.decl.name.as_ref().map_or("anonymous", |n| &n.name)
        )
    }
}

/// Local variables: a persistent linked list, cheap to capture in closures.
#[derive(Clone, Default, Debug)]
pub struct Env(pub Option<Rc<Binding>>);

#[derive(Debug)]
pub struct Binding {
    pub name: Rc<str>,
    pub value: Value,
    pub parent: Env,
}

impl Env {
    pub fn bind(&self, name: Rc<str>, value: Value) -> Env {
        Env(Some(Rc::new(Binding {
            name,
            value,
            parent: self.clone(),
        })))
    }

    pub fn get(&self, name: &str) -> Option<&Value> {
        let mut cur = &self.0;
        while let Some(b) = cur {
            if &*b.name == name {
                return Some(&b.value);
            }
            cur = &b.parent.0;
        }
        None
    }
}

/// A node's tags: name → value.
pub type Tags = BTreeMap<Rc<str>, Rc<str>>;

/// A node of the graph: a derivation plus where it was written (for diagnostics only).
#[derive(Clone, Debug)]
pub struct Node {
    pub id: DerivationId,
    pub kind: NodeKind,
    pub name: Rc<str>,
    pub target: Option<Rc<Node>>,
    /// Every attribute but the name and the target, defaults filled in.
    pub attrs: BTreeMap<Rc<str>, Value>,
    /// Nodes this one depends on: its target, nodes named in its attributes, and the
    /// producers of deferred values it uses. Sorted by id, no duplicates.
    pub inputs: Vec<Rc<Node>>,
    /// The lockfile pins this node uses (`package:hello` → its version and hash), part of
    /// its id: a moved pin changes exactly the nodes that use it and what depends on them.
    pub pins: BTreeMap<crate::pin::PinKey, Rc<str>>,
    /// Its postconditions (`expect`) and preconditions (`require`), in the order written.
    /// Not part of its id: a check does not change what is on the target (see
    /// `derivation.rs`).
    pub expect: Vec<Rc<Check>>,
    pub require: Vec<Rc<Check>>,
    /// Nodes the checks use (producers of deferred values in them) that are not inputs:
    /// the node waits for them, but they are not part of its id.
    pub check_inputs: Vec<Rc<Node>>,
    /// A host's declared `base` image: what `envc verify`'s lab boots a fresh VM from to
    /// stand in for it. Locked with the environment but not built by it, and not part of
    /// the host's id: a new base does not change the machine that already exists.
    pub lab_inputs: Vec<Rc<Node>>,
    /// A VM the lab boots in place of a host (`StandIn::Vm`): its private address comes
    /// after the environment's own VMs', which keep theirs.
    pub stands_in: bool,
    /// `rollback = false`: a failed postcondition leaves what this node changed in place
    /// (automatic rollback is on otherwise). Not part of its id, as checks are not: it says
    /// what to do when an update fails, not what is on the target.
    pub rollback: bool,
    /// Its tags, `default tags` merged in: for people and policies. Not part of its id (a
    /// manifest's are, as its labels): changing a tag re-runs only where it is materialized.
    pub tags: Tags,
    /// Made inside a function: the outermost call that made it, where the environment
    /// asked for it (what a policy points at; a component's `vm(…)` is one line for many).
    pub called_from: Option<(FileId, Span)>,
    pub file: FileId,
    pub span: Span,
}

impl Node {
    /// The name the source gave it: a manifest's node is named `NAMESPACE/KIND/NAME` (so
    /// that objects of different kinds may share a name), its object `NAME`.
    pub fn given_name(&self) -> &str {
        match self.kind {
            crate::types::NodeKind::Manifest => envc_k8s::object_name(&self.name),
            _ => &self.name,
        }
    }
}

impl Value {
    pub fn type_name(&self) -> String {
        match self {
            Value::Int(_) => "int".into(),
            Value::Str(_) => "str".into(),
            Value::Bool(_) => "bool".into(),
            Value::Size(_) => "size".into(),
            Value::Mode(_) => "mode".into(),
            Value::Path(_) => "path".into(),
            Value::List(_) => "list".into(),
            Value::Record(_) => "record".into(),
            Value::Fn(_) | Value::Builtin(_) => "function".into(),
            Value::Node(n) => n.kind.name().into(),
            v @ Value::Deferred(_) if contains_secret(v) => "secret".into(),
            Value::Deferred(_) => "deferred value".into(),
            Value::Module(_) => "module".into(),
            Value::Check(_) => "check".into(),
        }
    }

    pub fn is_deferred(&self) -> bool {
        matches!(self, Value::Deferred(_))
    }
}

/// How a known value reads inside a string.
pub fn display(v: &Value) -> String {
    match v {
        Value::Int(n) => n.to_string(),
        Value::Str(s) => s.to_string(),
        Value::Bool(b) => b.to_string(),
        Value::Size(n) => format_size(*n),
        Value::Mode(m) => format!("{m:04o}"),
        other => format!("<{}>", other.type_name()),
    }
}

/// Whether `v`, written out (JSON, a derivation's encoding), stays under `limit` bytes.
/// Values share strings and lists (`Rc`), so a small value in memory can expand hugely:
/// this counts the expansion, and stops counting as soon as it passes the limit.
pub fn expands_within(v: &Value, limit: usize) -> bool {
    fn walk(v: &Value, budget: &mut usize) -> bool {
        let own = match v {
            Value::Str(s) => s.len() + 2,
            Value::Path(p) => p.path.len() + 80,
            Value::List(xs) => {
                if !take(budget, 2 + xs.len()) {
                    return false;
                }
                return xs.iter().all(|x| walk(x, budget));
            }
            Value::Record(r) => {
                if !take(budget, 2 + r.len()) {
                    return false;
                }
                return r
                    .iter()
                    .all(|(k, x)| take(budget, k.len() + 3) && walk(x, budget));
            }
            Value::Deferred(d) => match &**d {
                Deferred::Output { output, .. } => output.len() + 100,
                Deferred::Secret(name) => name.len() + 100,
                Deferred::Concat(parts) => return parts.iter().all(|x| walk(x, budget)),
                Deferred::Json(inner) => return take(budget, 2) && walk(inner, budget),
            },
            _ => 70,
        };
        take(budget, own)
    }
    fn take(budget: &mut usize, n: usize) -> bool {
        match budget.checked_sub(n) {
            Some(rest) => {
                *budget = rest;
                true
            }
            None => false,
        }
    }
    let mut budget = limit;
    walk(v, &mut budget)
}

/// Whether `name` can name a secret: letters, digits and `_-.`, starting with a letter, at
/// most 64 characters (the compiler's `secret(…)` and `envc secret` both ask).
pub fn is_secret_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_-.".contains(c))
        && name.starts_with(|c: char| c.is_ascii_alphabetic())
}

/// Whether a value holds a secret anywhere (directly, in an interpolation, in a list or a
/// record).
pub fn contains_secret(v: &Value) -> bool {
    match v {
        Value::Deferred(d) => match &**d {
            Deferred::Secret(_) => true,
            Deferred::Concat(parts) => parts.iter().any(contains_secret),
            Deferred::Json(inner) => contains_secret(inner),
            Deferred::Output { .. } => false,
        },
        Value::List(xs) => xs.iter().any(contains_secret),
        Value::Record(r) => r.values().any(contains_secret),
        _ => false,
    }
}
