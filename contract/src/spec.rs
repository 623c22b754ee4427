//! The graph, as the executor works on it: owned, `Send` data (the compiler's values are
//! `Rc`-shared and stay on the compiling thread), with nodes referred to by their position
//! in the graph's canonical order, which is topological.

use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;

use envc_compiler::pin::PinKey;
pub use envc_compiler::rollout::Amount;
use envc_compiler::types::{CheckKind, NodeKind};
use envc_compiler::value::{Check, Deferred, Node, Value};
use envc_compiler::{DerivationId, Graph, SourceMap};
use envc_ids::NodeKey;

use crate::debs::DebSource;
use crate::record::Phase;
use envc_lockfiles::Lockfile;

/// An attribute value. `Node` and `Output` point into `Spec::nodes`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Val {
    Int(i64),
    Str(String),
    Bool(bool),
    Size(u64),
    Mode(u32),
    /// A project file: its path relative to the project and the blake3 of its content.
    Path {
        path: String,
        blake3: String,
    },
    List(Vec<Val>),
    Record(BTreeMap<String, Val>),
    Node(usize),
    /// Output `output` of a node, known once that node is realized.
    Output {
        node: usize,
        output: String,
    },
    /// A string made of known and deferred parts.
    Concat(Vec<Val>),
    /// `secret("name")`, until substitution reads its value.
    Secret(String),
    /// A deferred value written as JSON once known (a part of `to_json`'s string):
    /// substitution quotes and escapes a string, writes a number as is.
    Json(Box<Val>),
    /// A string that holds a secret, after substitution.
    Sealed(Sealed),
}

/// A string that holds a secret: its plaintext goes to the target and nowhere else.
/// Whatever is hashed or shown of it is `keyed`, its hash under the store's key; its Debug
/// form is that too, so no `{:?}` can print the plaintext.
#[derive(Clone, PartialEq, Eq)]
pub struct Sealed {
    pub value: String,
    pub keyed: String,
}

impl std::fmt::Debug for Sealed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "<secret {}>", self.keyed)
    }
}

#[derive(Clone, Debug)]
pub struct NodeSpec {
    /// The derivation id (blake3 of the canonical encoding), hex.
    pub id: String,
    pub kind: NodeKind,
    pub name: String,
    pub target: Option<usize>,
    /// Every attribute but the name and the target.
    pub attrs: BTreeMap<String, Val>,
    pub inputs: Vec<usize>,
    /// Lockfile pins the node uses: key → value (see `envc_lockfiles::Lockfile::pin_value`).
    pub pins: BTreeMap<PinKey, String>,
    /// `target/kind:name`, or `kind:name` for nodes without a target: how the state finds
    /// what this node manages from one run to the next.
    pub key: String,
    /// Its preconditions, then its postconditions, each in the order written.
    pub checks: Vec<CheckDecl>,
    /// A host's declared `base`: the key of the image (in `Spec::lab_images` or among the
    /// nodes) that `envc verify`'s lab boots a fresh VM from to stand in for it.
    pub base: Option<String>,
    /// A VM the lab boots in place of a host: it ranks after the environment's own VMs.
    pub stands_in: bool,
    /// Its tags (not part of its id): recorded with what the run did to it.
    pub tags: BTreeMap<String, String>,
    /// Whether a failed update is rolled back (`rollback = false` says no; not in its id).
    pub rollback: bool,
}

/// A check as declared: arguments may still hold deferred values (`Val::Output`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckDecl {
    pub phase: Phase,
    pub kind: CheckKind,
    pub args: BTreeMap<String, Val>,
    /// `FILE:LINE:COL` where it was written (project-relative), for messages and records.
    pub location: String,
}

impl NodeSpec {
    pub fn attr(&self, name: &str) -> Option<&Val> {
        self.attrs.get(name)
    }

    /// The strings of a list attribute (an image's `packages`); other items are skipped.
    pub fn str_list(&self, name: &str) -> Vec<String> {
        strings(self.attrs.get(name))
    }

    pub fn str_attr(&self, name: &str) -> Option<&str> {
        match self.attrs.get(name) {
            Some(Val::Str(s)) => Some(s),
            _ => None,
        }
    }
}

#[derive(Clone, Debug, Default)]
pub struct Spec {
    /// In the graph's canonical order: inputs come before the nodes that use them.
    pub nodes: Vec<NodeSpec>,
    pub outputs: Vec<(String, Val)>,
    /// blake3 over the node ids in order: the graph's identity, for run records.
    pub graph_hash: String,
    /// Images the environment locks but never builds: hosts' `base`, booted only by
    /// `envc verify`'s lab. Not part of `graph_hash`.
    pub lab_images: Vec<NodeSpec>,
    /// Where each pinned `.deb` comes from (the lockfile's packages by name, with their
    /// archive's mirror): set by [`Spec::with_lock`]. Not part of `graph_hash`: the pins the
    /// nodes carry name the bytes; this says only where to fetch them.
    pub debs: BTreeMap<String, DebSource>,
    /// The values of the secrets it names, and the store's key for their hashes: set by
    /// `Session::unseal` before anything is resolved. Not part of `graph_hash`.
    pub secrets: Option<std::sync::Arc<crate::secrets::Secrets>>,
    /// What each referenced environment (a `stack` node's name) published, as its state
    /// holds it now: read by the CLI before anything is resolved; absent if never built.
    /// Not part of `graph_hash`: the `stack` nodes' resolved hashes cover what they read.
    pub stacks: BTreeMap<String, Published>,
    /// The nodes whose key a `moved` declaration changed (directly, or as what is on a
    /// moved machine), by index: what they were called before. Not part of `graph_hash`.
    pub moved: BTreeMap<usize, MovedFrom>,
    /// The `moved` declarations as written: (old key, new key).
    pub moves: Vec<(String, String)>,
    /// A targeted plan or build (`--only`, `--exclude`): what was left out of this graph,
    /// which deletions spare (`crate::targeting`). Not part of `graph_hash`.
    pub targeted: Option<std::sync::Arc<crate::record::Targeted>>,
    /// Its `rollout` groups, machines by index. Not part of `graph_hash`: a rollout orders
    /// the work, it changes none of it.
    pub rollouts: Vec<RolloutSpec>,
    /// The source's `adopt` lines, by node key. Not part of `graph_hash`: the nodes are
    /// the same derivations whether envc made their things or found them.
    pub adoptions: BTreeMap<String, AdoptSpec>,
}

/// What a moved node was called before: its key in the state and its name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MovedFrom {
    pub key: String,
    pub name: String,
}

/// A `rollout`: machines (host and VM nodes, by index, in the order written) that a build
/// updates a batch at a time.
#[derive(Clone, Debug)]
pub struct RolloutSpec {
    pub name: String,
    pub targets: Vec<usize>,
    pub batch: Amount,
    pub max_failures: Amount,
}

/// An `adopt` line: where a machine is found (`from`), and where the line is written.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AdoptSpec {
    pub from: BTreeMap<String, String>,
    /// `FILE:LINE:COL` (project-relative), for messages.
    pub location: String,
}

/// The names of the secrets a value holds.
fn secrets_in(v: &Val, out: &mut std::collections::BTreeSet<String>) {
    match v {
        Val::Secret(name) => {
            out.insert(name.clone());
        }
        Val::List(xs) | Val::Concat(xs) => xs.iter().for_each(|x| secrets_in(x, out)),
        Val::Json(inner) => secrets_in(inner, out),
        Val::Record(r) => r.values().for_each(|x| secrets_in(x, out)),
        _ => {}
    }
}

/// What an environment's last build published: its run and its outputs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Published {
    pub run: String,
    pub outputs: BTreeMap<String, serde_json::Value>,
}

/// The strings of a list value.
pub fn strings(v: Option<&Val>) -> Vec<String> {
    match v {
        Some(Val::List(xs)) => xs
            .iter()
            .filter_map(|x| match x {
                Val::Str(s) => Some(s.clone()),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    }
}

/// The state key of a node (`target/kind:name`), as [`NodeKey`] spells it.
pub fn node_key(kind: NodeKind, name: &str, target: Option<&str>) -> String {
    NodeKey::new(kind, name, target).to_string()
}

/// The key of a node placed on a target (`target/kind:name`); `None` for targetless keys
/// (`host:name`) and for what is no key.
pub fn on_target(key: &str) -> Option<NodeKey> {
    key.parse::<NodeKey>().ok().filter(|k| k.target.is_some())
}

/// The key of a node with no target of its own (`vm:name`, `image:name`); `None` otherwise.
pub fn targetless(key: &str) -> Option<NodeKey> {
    key.parse::<NodeKey>().ok().filter(|k| k.target.is_none())
}

impl Spec {
    /// The names of every secret the nodes, their checks and the outputs use.
    pub fn secret_names(&self) -> std::collections::BTreeSet<String> {
        let mut out = std::collections::BTreeSet::new();
        for n in &self.nodes {
            n.attrs.values().for_each(|v| secrets_in(v, &mut out));
            for c in &n.checks {
                c.args.values().for_each(|v| secrets_in(v, &mut out));
            }
        }
        self.outputs
            .iter()
            .for_each(|(_, v)| secrets_in(v, &mut out));
        out
    }

    /// The graph as the executor works on it; `sources` locate the checks' source lines.
    pub fn from_graph(graph: &Graph, sources: &SourceMap) -> Spec {
        let mut index: HashMap<DerivationId, usize> = HashMap::new();
        let mut nodes = Vec::with_capacity(graph.order.len());
        let mut hasher = blake3::Hasher::new();
        hasher.update(b"envc-graph\0");
        for (i, n) in graph.nodes().enumerate() {
            index.insert(n.id, i);
            hasher.update(&n.id.0);
            let checks: Vec<CheckDecl> = (n.require.iter().map(|c| (Phase::Require, c)))
                .chain(n.expect.iter().map(|c| (Phase::Expect, c)))
                .map(|(phase, c)| check_decl(phase, c, &index, sources))
                .collect();
            if !checks.is_empty() {
                // A graph with checks is another graph (a graph without them hashes as it
                // always did); checks are not part of any node's id.
                let json: Vec<serde_json::Value> = (n.require.iter().map(|c| ("require", c)))
                    .chain(n.expect.iter().map(|c| ("expect", c)))
                    .map(|(p, c)| serde_json::json!([p, envc_compiler::derivation::check_json(c)]))
                    .collect();
                hasher.update(b"checks\0");
                hasher.update(serde_json::Value::Array(json).to_string().as_bytes());
            }
            let target = n.target.as_ref().map(|t| index[&t.id]);
            // The nodes its checks read are waited for like inputs.
            let mut inputs: Vec<usize> = (n.inputs.iter().chain(&n.check_inputs))
                .map(|i| index[&i.id])
                .collect();
            inputs.sort_unstable();
            inputs.dedup();
            nodes.push(NodeSpec {
                target,
                inputs,
                checks,
                base: n
                    .lab_inputs
                    .first()
                    .map(|b| node_key(b.kind, &b.name, None)),
                ..node_spec(n, &index)
            });
        }
        // Images hold no nodes (no image attribute is node-typed): they convert without
        // inputs of their own.
        let lab_images = graph
            .lab_images
            .iter()
            .map(|n| node_spec(n, &index))
            .collect();
        let moved = moved_from(graph, &nodes);
        Spec {
            lab_images,
            secrets: None,
            outputs: graph
                .outputs
                .iter()
                .map(|(k, v)| (k.to_string(), convert(v, &index)))
                .collect(),
            nodes,
            graph_hash: hasher.finalize().to_hex().to_string(),
            debs: BTreeMap::new(),
            stacks: BTreeMap::new(),
            moved,
            moves: (graph.moved.iter())
                .map(|m| (m.from.to_string(), m.to.to_string()))
                .collect(),
            targeted: None,
            rollouts: graph
                .rollouts
                .iter()
                .map(|r| RolloutSpec {
                    name: r.name.to_string(),
                    // A machine nothing is placed on, nor anything reaches, is in no graph.
                    targets: r
                        .targets
                        .iter()
                        .filter_map(|t| index.get(&t.id).copied())
                        .collect(),
                    batch: r.batch,
                    max_failures: r.max_failures,
                })
                .collect(),
            adoptions: graph
                .adoptions
                .iter()
                .map(|a| {
                    let spec = AdoptSpec {
                        from: a.from.clone(),
                        location: sources.location(a.file, a.span.start as usize),
                    };
                    (a.key.clone(), spec)
                })
                .collect(),
        }
    }

    /// This spec, with the lockfile it was compiled with: where its pinned `.deb`s come from.
    pub fn with_lock(self, lock: Option<&Lockfile>) -> Spec {
        Spec {
            debs: lock.map(crate::debs::sources).unwrap_or_default(),
            ..self
        }
    }

    pub fn find(&self, key: &str) -> Option<usize> {
        self.nodes.iter().position(|n| n.key == key)
    }
}

/// What each moved node was called before (`envc_compiler::moved::old_keys`).
fn moved_from(graph: &Graph, nodes: &[NodeSpec]) -> BTreeMap<usize, MovedFrom> {
    if graph.moved.is_empty() {
        return BTreeMap::new();
    }
    let keys: Vec<NodeKey> = (nodes.iter())
        .filter_map(|n| n.key.parse::<NodeKey>().ok())
        .collect();
    let old = envc_compiler::moved::old_keys(&graph.moved, keys.iter());
    (nodes.iter().enumerate())
        .filter_map(|(i, n)| {
            let was = old.get(&n.key.parse::<NodeKey>().ok()?)?;
            Some((
                i,
                MovedFrom {
                    key: was.to_string(),
                    name: was.name.clone(),
                },
            ))
        })
        .collect()
}

/// What a node converts to on its own: no target, inputs, checks or base yet.
fn node_spec(n: &Node, index: &HashMap<DerivationId, usize>) -> NodeSpec {
    NodeSpec {
        id: n.id.hex(),
        kind: n.kind,
        name: n.name.to_string(),
        target: None,
        attrs: n
            .attrs
            .iter()
            .map(|(k, v)| (k.to_string(), convert(v, index)))
            .collect(),
        inputs: Vec::new(),
        pins: n
            .pins
            .iter()
            .map(|(k, v)| (k.clone(), v.to_string()))
            .collect(),
        key: node_key(n.kind, &n.name, n.target.as_ref().map(|t| &*t.name)),
        checks: Vec::new(),
        base: None,
        stands_in: n.stands_in,
        rollback: n.rollback,
        tags: n
            .tags
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    }
}

fn check_decl(
    phase: Phase,
    c: &Check,
    index: &HashMap<DerivationId, usize>,
    sources: &SourceMap,
) -> CheckDecl {
    CheckDecl {
        phase,
        kind: c.kind,
        args: c
            .args
            .iter()
            .map(|(k, v)| (k.to_string(), convert(v, index)))
            .collect(),
        location: sources.location(c.file, c.span.start as usize),
    }
}

fn node_ix(n: &Rc<Node>, index: &HashMap<DerivationId, usize>) -> usize {
    // Lowering closes the graph over inputs, and order puts inputs first.
    index[&n.id]
}

fn convert(v: &Value, index: &HashMap<DerivationId, usize>) -> Val {
    match v {
        Value::Int(n) => Val::Int(*n),
        Value::Str(s) => Val::Str(s.to_string()),
        Value::Bool(b) => Val::Bool(*b),
        Value::Size(n) => Val::Size(*n),
        Value::Mode(m) => Val::Mode(*m),
        Value::Path(p) => Val::Path {
            path: p.path.to_string(),
            blake3: p.hash.to_hex().to_string(),
        },
        Value::List(xs) => Val::List(xs.iter().map(|x| convert(x, index)).collect()),
        Value::Record(r) => Val::Record(
            r.iter()
                .map(|(k, x)| (k.to_string(), convert(x, index)))
                .collect(),
        ),
        Value::Node(n) => Val::Node(node_ix(n, index)),
        Value::Deferred(d) => match &**d {
            Deferred::Output { node, output } => Val::Output {
                node: node_ix(node, index),
                output: output.to_string(),
            },
            Deferred::Concat(parts) => {
                Val::Concat(parts.iter().map(|x| convert(x, index)).collect())
            }
            Deferred::Secret(name) => Val::Secret(name.to_string()),
            Deferred::Json(inner) => Val::Json(Box::new(convert(inner, index))),
        },
        // The encoder refuses functions and modules in nodes, so none reach a graph.
        Value::Fn(_) | Value::Builtin(_) | Value::Module(_) | Value::Check(_) => {
            Val::Str(v.type_name())
        }
    }
}
