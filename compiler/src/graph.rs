//! Lowering: the graph is every node reachable from the root file's top-level bindings and
//! outputs (closure semantics: not a side effect of evaluation order), deduplicated by id,
//! in a canonical topological order (ties broken by target, kind, name, id).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::rc::Rc;

use envc_lang::{did_you_mean, Diagnostic};
use petgraph::graph::{DiGraph, NodeIndex};

use crate::derivation::{check_json, value_json, DerivationId};
use crate::eval::{collect_nodes, Evaluated};
use crate::types::NodeKind;
use crate::value::{Node, Tags, Value};

pub struct Graph {
    /// Edges point from an input to the node that uses it.
    pub dag: DiGraph<Rc<Node>, ()>,
    /// Every node, inputs before the nodes that use them, in a canonical order.
    pub order: Vec<NodeIndex>,
    pub outputs: Vec<(Rc<str>, Value)>,
    /// The images only `envc verify`'s lab boots (hosts' `base`) that the graph does not
    /// build itself: locked with the environment, never built by it. Sorted by id.
    pub lab_images: Vec<Rc<Node>>,
    /// How many policies judged it (every one kept, or there would be no graph).
    pub policies: usize,
    /// Its `moved` declarations, checked against it (`moved.rs`).
    pub moved: Vec<crate::moved::Move>,
    /// Its `rollout` groups: which machines a build updates batch by batch. Not part of
    /// any node's id.
    pub rollouts: Vec<crate::rollout::Rollout>,
    /// The root file's `adopt` lines, each naming a node of the graph. Not part of any id.
    pub adoptions: Vec<crate::adopt::Adoption>,
}

/// Target name (none first), kind, name, id. Borrowed names: no allocation per comparison.
type SortKey = (Option<Rc<str>>, NodeKind, Rc<str>, DerivationId);

fn sort_key(n: &Node) -> SortKey {
    (
        n.target.as_ref().map(|t| t.name.clone()),
        n.kind,
        n.name.clone(),
        n.id,
    )
}

pub fn lower(ev: &Evaluated) -> Result<Graph, Vec<Diagnostic>> {
    let mut roots = Vec::new();
    for (_, v) in ev.bindings.iter().chain(&ev.outputs) {
        collect_nodes(v, &mut roots);
    }
    let mut dag: DiGraph<Rc<Node>, ()> = DiGraph::new();
    let mut index: HashMap<DerivationId, NodeIndex> = HashMap::new();
    let mut work = roots;
    let mut errors = Vec::new();
    while let Some(n) = work.pop() {
        if let Some(&seen) = index.get(&n.id) {
            errors.extend(check_conflict(&dag[seen], &n));
            match merged_tags(&dag[seen], &n) {
                Ok(Some(tags)) => {
                    let merged = Node {
                        tags,
                        ..(*dag[seen]).clone()
                    };
                    dag[seen] = Rc::new(merged);
                }
                Ok(None) => {}
                Err(d) => errors.push(d),
            }
            continue;
        }
        work.extend(n.inputs.iter().chain(&n.check_inputs).cloned());
        index.insert(n.id, dag.add_node(n));
    }
    for ix in dag.node_indices().collect::<Vec<_>>() {
        // The nodes a node's checks read run before it too (they are not in its id).
        let n = &dag[ix];
        let inputs: Vec<NodeIndex> = n
            .inputs
            .iter()
            .chain(&n.check_inputs)
            .map(|i| index[&i.id])
            .collect();
        for i in inputs {
            dag.add_edge(i, ix, ());
        }
    }

    // A host's base (locked, built only by the lab) shares the lockfile's names with
    // what the graph builds: an image of the same name must be the same image.
    let mut lab_images: Vec<Rc<Node>> = dag
        .node_weights()
        .flat_map(|n| n.lab_inputs.iter())
        .filter(|n| !index.contains_key(&n.id))
        .cloned()
        .collect();
    lab_images.sort_by_key(|n| n.id);
    lab_images.dedup_by_key(|n| n.id);
    errors.extend(conflicts(dag.node_weights().chain(&lab_images).collect()));
    let order = match canonical_order(&dag) {
        Ok(o) => o,
        Err(cycle) => {
            errors.push(cycle);
            Vec::new()
        }
    };
    if !errors.is_empty() {
        return Err(errors);
    }
    Ok(Graph {
        dag,
        order,
        outputs: ev.outputs.clone(),
        lab_images,
        policies: 0,
        moved: Vec::new(),
        rollouts: Vec::new(),
        adoptions: Vec::new(),
    })
}

/// The same derivation declared twice with different checks: checks are not part of a
/// node's id, so the two would be one node, and one declaration's checks would be lost.
fn check_conflict(a: &Node, b: &Node) -> Option<Diagnostic> {
    let checks = |n: &Node| -> Vec<serde_json::Value> {
        let both = n.expect.iter().chain(&n.require);
        both.map(|c| check_json(c)).collect()
    };
    let same = checks(a) == checks(b) && a.expect.len() == b.expect.len();
    if same {
        return None;
    }
    let on = a
        .target
        .as_ref()
        .map_or(String::new(), |t| format!(" on `{}`", t.name));
    let (la, lb) = (
        a.called_from.unwrap_or((a.file, a.span)),
        b.called_from.unwrap_or((b.file, b.span)),
    );
    Some(
        Diagnostic::new(
            "graph::check-conflict",
            format!(
                "`{}` node `{}`{on} is declared twice with different checks",
                a.kind.name(),
                a.name
            ),
        )
        .label(lb.0, lb.1, "declared here")
        .label(la.0, la.1, "and here")
        .message("Checks are not part of what a node is, so both declarations are one node, and the checks of one would be lost.")
        .help("declare the node once, with all its checks, and share the value"),
    )
}

/// The tags of a derivation declared twice (from two modules' `default tags`, or its own),
/// when they differ: both sets, so that none is lost whichever declaration came first; two
/// values for one tag are an error.
fn merged_tags(a: &Node, b: &Node) -> Result<Option<Tags>, Diagnostic> {
    if a.tags == b.tags {
        return Ok(None);
    }
    let clash = b
        .tags
        .iter()
        .any(|(k, v)| a.tags.get(k).is_some_and(|w| w != v));
    if !clash {
        let mut tags = a.tags.clone();
        tags.extend(b.tags.iter().map(|(k, v)| (k.clone(), v.clone())));
        return Ok(Some(tags));
    }
    let show = |n: &Node| {
        let pairs: Vec<String> = n.tags.iter().map(|(k, v)| format!("{k} = {v:?}")).collect();
        format!("tags {{ {} }}", pairs.join(", "))
    };
    let (la, lb) = (
        a.called_from.unwrap_or((a.file, a.span)),
        b.called_from.unwrap_or((b.file, b.span)),
    );
    Err(
        Diagnostic::new(
            "graph::tag-conflict",
            format!("`{}` node `{}` is declared twice with different tags", a.kind.name(), a.name),
        )
        .label(lb.0, lb.1, format!("declared here with {}", show(b)))
        .label(la.0, la.1, format!("and here with {}", show(a)))
        .message("Tags are not part of what a node is, so both declarations are one node, which cannot take both values of a tag.")
        .help("declare the node once and share the value, or give the tag one value in both"),
    )
}

/// Two different nodes that would manage the same thing on the same target.
fn conflicts(mut nodes: Vec<&Rc<Node>>) -> Vec<Diagnostic> {
    type Managed = (NodeKind, Option<DerivationId>, Rc<str>);
    let mut seen: BTreeMap<Managed, &Rc<Node>> = BTreeMap::new();
    let mut errors = Vec::new();
    nodes.sort_by_cached_key(|n| sort_key(n));
    for n in nodes {
        let key = (n.kind, n.target.as_ref().map(|t| t.id), n.name.clone());
        if let Some(first) = seen.get(&key) {
            let on = n
                .target
                .as_ref()
                .map_or(String::new(), |t| format!(" on `{}`", t.name));
            let what = crate::builtins::schema(n.kind).name_attr;
            let differ = differences(first, n);
            let shown = |d: &[(Rc<str>, String, String)], mine: bool| -> String {
                let parts: Vec<String> = d
                    .iter()
                    .take(3)
                    .map(|(k, a, b)| format!("{k} = {}", if mine { b } else { a }))
                    .collect();
                if parts.is_empty() {
                    String::new()
                } else {
                    format!(" with {}", parts.join(", "))
                }
            };
            let names: Vec<String> = differ.iter().map(|(k, _, _)| format!("`{k}`")).collect();
            let message = if names.is_empty() {
                "Both would manage the same thing on the same target with different settings (they differ in what they are built from: their inputs or lockfile pins), and the last to run would win.".to_string()
            } else {
                format!(
                    "Both would manage the same thing on the same target, and they differ in {}: the last to run would win.",
                    names.join(", ")
                )
            };
            // Where the environment asked for each (a `debian.machine(…)` call), not the
            // line of `std/` or of a component that both share.
            let (nf, ns) = n.called_from.unwrap_or((n.file, n.span));
            let (ff, fs) = first.called_from.unwrap_or((first.file, first.span));
            errors.push(
                Diagnostic::new(
                    "graph::conflict",
                    format!(
                        "two different `{}` nodes with {what} `{}`{on}",
                        n.kind.name(),
                        n.name
                    ),
                )
                .label(
                    nf,
                    ns,
                    format!("one is declared here{}", shown(&differ, true)),
                )
                .label(ff, fs, format!("the other here{}", shown(&differ, false)))
                .message(message)
                .help("declare it once and share the value, or give them different names"),
            );
        } else {
            seen.insert(key, n);
        }
    }
    errors
}

/// The attributes in which two nodes of one kind and name differ: name, `a`'s value, `b`'s.
fn differences(a: &Node, b: &Node) -> Vec<(Rc<str>, String, String)> {
    let keys: BTreeSet<&Rc<str>> = a.attrs.keys().chain(b.attrs.keys()).collect();
    let show = |v: Option<&Value>| match v {
        None => "(none)".to_string(),
        Some(v) => short(v),
    };
    keys.into_iter()
        .filter_map(|k| {
            let (x, y) = (a.attrs.get(k), b.attrs.get(k));
            let same = x.map(value_json) == y.map(value_json);
            (!same).then(|| (k.clone(), show(x), show(y)))
        })
        .collect()
}

/// A value as the source would write it, cut short: for a label.
fn short(v: &Value) -> String {
    let text = match v {
        Value::Str(s) => format!("{:?}", &**s),
        Value::Int(_) | Value::Bool(_) | Value::Size(_) => crate::value::display(v),
        Value::Mode(m) => format!("0o{m:o}"),
        Value::Node(n) => format!("{} `{}`", n.kind.name(), n.name),
        other => value_json(other).to_string(),
    };
    if text.chars().count() > 40 {
        format!("{}…", text.chars().take(39).collect::<String>())
    } else {
        text
    }
}

/// Kahn's algorithm, always taking the smallest ready node: the same graph gives the same
/// order on every machine.
fn canonical_order(dag: &DiGraph<Rc<Node>, ()>) -> Result<Vec<NodeIndex>, Diagnostic> {
    let mut indegree: Vec<usize> = dag
        .node_indices()
        .map(|i| {
            dag.neighbors_directed(i, petgraph::Direction::Incoming)
                .count()
        })
        .collect();
    let mut ready: BTreeSet<(SortKey, NodeIndex)> = dag
        .node_indices()
        .filter(|i| indegree[i.index()] == 0)
        .map(|i| (sort_key(&dag[i]), i))
        .collect();
    let mut order = Vec::with_capacity(dag.node_count());
    while let Some((_, i)) = ready.pop_first() {
        order.push(i);
        for j in dag.neighbors_directed(i, petgraph::Direction::Outgoing) {
            indegree[j.index()] -= 1;
            if indegree[j.index()] == 0 {
                ready.insert((sort_key(&dag[j]), j));
            }
        }
    }
    if order.len() == dag.node_count() {
        return Ok(order);
    }
    // Values are immutable, so the evaluator cannot build a cycle; if one appears anyway,
    // report it rather than loop.
    let scc = petgraph::algo::tarjan_scc(dag)
        .into_iter()
        .find(|c| c.len() > 1)
        .unwrap_or_default();
    let names: Vec<String> = scc
        .iter()
        .map(|i| format!("{} {}", dag[*i].kind.name(), dag[*i].name))
        .collect();
    let mut d = Diagnostic::new("graph::cycle", "dependency cycle between nodes")
        .message(format!(
            "These nodes depend on each other in a circle: {}.",
            names.join(" → ")
        ))
        .help("remove one of the dependencies");
    for i in &scc {
        d = d.label(
            dag[*i].file,
            dag[*i].span,
            format!("{} `{}`", dag[*i].kind.name(), dag[*i].name),
        );
    }
    Err(d)
}

impl Graph {
    pub fn nodes(&self) -> impl Iterator<Item = &Rc<Node>> + '_ {
        self.order.iter().map(|i| &self.dag[*i])
    }

    /// The graph as `envc graph --format json` prints it: one line, keys in sorted order.
    pub fn to_json(&self) -> String {
        // Fields are declared in sorted order: the output is what a sorted map would give.
        #[derive(serde::Serialize)]
        struct JsonNode<'a> {
            id: String,
            inputs: Vec<String>,
            kind: &'static str,
            name: &'a str,
            #[serde(skip_serializing_if = "BTreeMap::is_empty")]
            tags: BTreeMap<&'a str, &'a str>,
            target: Option<String>,
        }
        #[derive(serde::Serialize)]
        struct JsonGraph<'a> {
            nodes: Vec<JsonNode<'a>>,
            outputs: serde_json::Map<String, serde_json::Value>,
            version: u32,
        }
        let graph = JsonGraph {
            nodes: self
                .nodes()
                .map(|n| JsonNode {
                    id: n.id.hex(),
                    inputs: n.inputs.iter().map(|i| i.id.hex()).collect(),
                    kind: n.kind.name(),
                    name: &n.name,
                    tags: n.tags.iter().map(|(k, v)| (&**k, &**v)).collect(),
                    target: n.target.as_ref().map(|t| t.id.hex()),
                })
                .collect(),
            outputs: self
                .outputs
                .iter()
                .map(|(k, v)| (k.to_string(), value_json(v)))
                .collect(),
            version: 1,
        };
        serde_json::to_string(&graph).expect("the graph serialises")
    }

    pub fn to_dot(&self) -> String {
        let mut s = String::from(
            "digraph envc {\n  rankdir=LR;\n  node [shape=box, fontname=\"monospace\"];\n",
        );
        for n in self.nodes() {
            let on = n
                .target
                .as_ref()
                .map_or(String::new(), |t| format!("\\non {}", escape_dot(&t.name)));
            s.push_str(&format!(
                "  \"{}\" [label=\"{} {}{on}\\n{}\"];\n",
                n.id.short(),
                n.kind.name(),
                escape_dot(&n.name),
                n.id.short()
            ));
        }
        for n in self.nodes() {
            for i in &n.inputs {
                s.push_str(&format!(
                    "  \"{}\" -> \"{}\";\n",
                    i.id.short(),
                    n.id.short()
                ));
            }
        }
        s.push_str("}\n");
        s
    }

    /// Finds nodes by id prefix, `kind:name`, `target/kind:name` or plain name.
    pub fn select(&self, selector: &str) -> Result<&Rc<Node>, Diagnostic> {
        let is_hex = selector.len() >= 4 && selector.chars().all(|c| c.is_ascii_hexdigit());
        let matches: Vec<&Rc<Node>> =
            self.nodes()
                .filter(|n| {
                    let qualified = envc_ids::NodeKey::new(n.kind, &n.name, None).to_string();
                    let on = n.target.as_ref().map(|t| {
                        envc_ids::NodeKey::new(n.kind, &n.name, Some(&t.name)).to_string()
                    });
                    (is_hex && n.id.hex().starts_with(&selector.to_ascii_lowercase()))
                        || selector == qualified
                        || Some(selector) == on.as_deref()
                        || selector == &*n.name
                })
                .collect();
        match matches.as_slice() {
            [one] => Ok(one),
            [] => {
                let names: Vec<String> = self
                    .nodes()
                    .map(|n| envc_ids::NodeKey::new(n.kind, &n.name, None).to_string())
                    .collect();
                let mut d = Diagnostic::new("graph::no-such-node", format!("no node matches `{selector}`"))
                    .help("name a node by id prefix, `kind:name`, or `target/kind:name`; `envc graph FILE` lists them");
                if let Some(s) = did_you_mean(selector, names.iter().map(String::as_str)) {
                    d = d.help(s);
                }
                Err(d)
            }
            many => {
                let list: Vec<String> = many
                    .iter()
                    .map(|n| {
                        let on = n
                            .target
                            .as_ref()
                            .map_or(String::new(), |t| format!("{}/", t.name));
                        format!("{on}{}:{} ({})", n.kind.name(), n.name, n.id.short())
                    })
                    .collect();
                Err(Diagnostic::new(
                    "graph::ambiguous-node",
                    format!("`{selector}` matches {} nodes", many.len()),
                )
                .message(format!("It matches: {}.", list.join(", ")))
                .help("qualify it as `target/kind:name`, or give an id prefix"))
            }
        }
    }
}

fn escape_dot(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"")
}
