//! `adopt` lines: nodes of the graph that take over what already exists on their target (a
//! file, a package, a service) or a machine made outside envc (a QEMU VM by its disk and
//! port, an EC2 instance by its id), instead of creating it. Terraform's `import` block.
//!
//! An adoption is not part of any node's id: the node is the same derivation whether envc
//! made the thing or found it. It only changes what the first build does (records what it
//! finds; updates it in place where it differs) and what leaving the source does (the thing
//! stays, as it was found).

use std::collections::BTreeMap;
use std::rc::Rc;

use envc_lang::ast::{Adopt, ItemKind};
use envc_lang::{closest, did_you_mean, Diagnostic, FileId, Span};

use crate::eval::Evaluator;
use crate::program::Program;
use crate::types::NodeKind;
use crate::value::{Node, Value};

/// One `adopt` line, checked against the graph.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Adoption {
    /// The node's state key (`web-0/file:/etc/motd`, `vm:legacy`).
    pub key: String,
    /// `from { … }`: each field as text (a port as its digits).
    pub from: BTreeMap<String, String>,
    /// Where the line is written.
    pub file: FileId,
    pub span: Span,
}

/// The fields a `from` may give for a machine, by provider; the first ones are required.
struct Fields {
    provider: &'static str,
    required: &'static [&'static str],
    optional: &'static [&'static str],
}

/// A QEMU VM made outside envc: its disk (the overlay or image QEMU runs), the port on this
/// machine its ssh is forwarded to, and, when the user knows it, its host key.
const QEMU: Fields = Fields {
    provider: "a QEMU VM",
    required: &["disk", "port"],
    optional: &["host_key"],
};

/// An EC2 instance: its id, and its host key when the user knows it.
const EC2: Fields = Fields {
    provider: "an EC2 instance",
    required: &["instance_id"],
    optional: &["host_key"],
};

/// The state key of node `n`, as `plan` prints it.
pub fn key_of(n: &Node) -> String {
    envc_ids::NodeKey::new(n.kind, &n.name, n.target.as_ref().map(|t| &*t.name)).to_string()
}

/// The adoptions of the root module, checked against the graph's nodes; diagnostics for every line
/// that names no node, a kind that cannot be adopted, or a `from` that does not fit.
pub fn collect(
    program: &Program,
    evaluator: &mut Evaluator,
    graph_nodes: impl Iterator<Item = Rc<Node>>,
) -> (Vec<Adoption>, Vec<Diagnostic>) {
    let owned: Vec<Rc<Node>> = graph_nodes.collect();
    let nodes: BTreeMap<String, &Rc<Node>> = owned.iter().map(|n| (key_of(n), n)).collect();
    let root = program.root;
    let file = program.modules[root].file;
    let mut out: Vec<Adoption> = Vec::new();
    let mut errors = Vec::new();
    for item in &program.modules[root].ast.items {
        let ItemKind::Adopt(a) = &item.kind else {
            continue;
        };
        match adoption(a, file, item.span, &nodes, evaluator) {
            Ok(adoption) => {
                if let Some(first) = out.iter().find(|x| x.key == adoption.key) {
                    errors.push(
                        Diagnostic::new(
                            "adopt::duplicate",
                            format!("`{}` is adopted twice", a.node),
                        )
                        .label(file, a.node_span, "adopted again here")
                        .label(first.file, first.span, "first adopted here")
                        .help("remove one of the two lines"),
                    );
                    continue;
                }
                out.push(adoption);
            }
            Err(d) => errors.push(*d),
        }
    }
    (out, errors)
}

fn adoption(
    a: &Adopt,
    file: FileId,
    span: Span,
    nodes: &BTreeMap<String, &Rc<Node>>,
    evaluator: &mut Evaluator,
) -> Result<Adoption, Box<Diagnostic>> {
    let Some(node) = nodes.get(&*a.node) else {
        let mut d = Diagnostic::new(
            "adopt::unknown-node",
            format!("`{}` is not a node of this environment", a.node),
        )
        .label(file, a.node_span, "no node has this name")
        .message("An `adopt` line names a node of the graph by its state key, as `envc plan` prints it (`TARGET/KIND:NAME`, or `KIND:NAME` for a machine).");
        d = match closest(&a.node, nodes.keys().map(String::as_str)) {
            Some(c) => d.help(format!("did you mean `{c}`?")),
            None => d.help("declare the node first; `envc graph FILE` lists every node's key"),
        };
        return Err(Box::new(d));
    };
    let fields = match node.kind {
        NodeKind::File | NodeKind::Package | NodeKind::Service => None,
        NodeKind::Vm if node.attrs.contains_key("cloud") => Some(&EC2),
        NodeKind::Vm => Some(&QEMU),
        other => {
            return Err(Box::new(
                Diagnostic::new(
                    "adopt::not-adoptable",
                    format!("`{}` nodes cannot be adopted", other.name()),
                )
                .label(file, a.node_span, "this node")
                .message("Files, packages, services and VMs can be adopted: they exist on their own before envc knows them. Other nodes are built or run by envc itself.")
                .help("remove this `adopt` line"),
            ))
        }
    };
    let mut from = BTreeMap::new();
    match (fields, &a.from) {
        (None, None) => {}
        (None, Some(e)) => {
            let at = a
                .from_span
                .map_or(e.span, |s| Span::new(s.start as usize, e.span.end as usize));
            return Err(Box::new(
                Diagnostic::new(
                    "adopt::from-not-allowed",
                    format!("a `{}` is adopted where its node says, without `from`", node.kind.name()),
                )
                .label(file, at, "not for this kind")
                .message("A file, a package or a service is found on its node's target, at its node's path or name: there is nothing more to say where it is.")
                .help(format!("write `adopt \"{}\"`", a.node)),
            ));
        }
        (Some(f), None) => {
            return Err(Box::new(
                Diagnostic::new(
                    "adopt::missing-from",
                    format!("adopting a VM needs `from`: where {} is", f.provider),
                )
                .label(file, a.node_span, "found where?")
                .message(format!(
                    "envc did not make this machine, so it cannot know where it is: {} is found by {}.",
                    f.provider,
                    f.required.iter().map(|r| format!("`{r}`")).collect::<Vec<_>>().join(" and ")
                ))
                .help(example(&a.node, f)),
            ));
        }
        (Some(f), Some(e)) => {
            let value = evaluator.eval_top_level(e).map_err(Box::new)?;
            let Value::Record(rec) = value else {
                return Err(Box::new(
                    Diagnostic::new("adopt::from-not-a-record", "`from` is a record of fields")
                        .label(file, e.span, "not a record")
                        .help(example(&a.node, f)),
                ));
            };
            let known: Vec<&str> = f.required.iter().chain(f.optional).copied().collect();
            for (name, v) in rec.iter() {
                if !known.contains(&&**name) {
                    let mut d = Diagnostic::new(
                        "adopt::unknown-field",
                        format!("`{name}` is not a field of adopting {}", f.provider),
                    )
                    .label(file, field_span(e, name), "unknown field")
                    .message(format!(
                        "{} is adopted with {}.",
                        f.provider,
                        known
                            .iter()
                            .map(|k| format!("`{k}`"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ));
                    if let Some(h) = did_you_mean(name, known.iter().copied()) {
                        d = d.help(h);
                    }
                    return Err(Box::new(d));
                }
                let text = match (&**name, v) {
                    ("port", Value::Int(p)) if (1..=65535).contains(p) => p.to_string(),
                    ("port", _) => {
                        return Err(Box::new(field_type(
                            file,
                            e,
                            name,
                            "a port number (1 to 65535)",
                        )))
                    }
                    (_, Value::Str(s)) => s.to_string(),
                    _ => return Err(Box::new(field_type(file, e, name, "a string"))),
                };
                from.insert(name.to_string(), text);
            }
            if let Some(missing) = f.required.iter().find(|r| !from.contains_key(**r)) {
                return Err(Box::new(
                    Diagnostic::new("adopt::missing-field", format!("`from` lacks `{missing}`"))
                        .label(file, e.span, format!("no `{missing}` here"))
                        .message(format!(
                            "{} is found by {}.",
                            f.provider,
                            f.required
                                .iter()
                                .map(|r| format!("`{r}`"))
                                .collect::<Vec<_>>()
                                .join(" and ")
                        ))
                        .help(example(&a.node, f)),
                ));
            }
        }
    }
    Ok(Adoption {
        key: a.node.to_string(),
        from,
        file,
        span,
    })
}

fn example(node: &str, f: &Fields) -> String {
    if f.required.contains(&"instance_id") {
        format!("write `adopt \"{node}\" from {{ instance_id = \"i-0123456789abcdef0\" }}`")
    } else {
        format!(
            "write `adopt \"{node}\" from {{ disk = \"/var/lib/vms/{}.qcow2\", port = 2222 }}`",
            node.trim_start_matches("vm:")
        )
    }
}

fn field_type(file: FileId, e: &envc_lang::ast::Expr, name: &str, want: &str) -> Diagnostic {
    Diagnostic::new("adopt::field-type", format!("`{name}` must be {want}"))
        .label(file, field_span(e, name), format!("not {want}"))
        .help(match name {
            "port" => "the port on this machine that the VM's ssh is forwarded to, such as `2222`",
            "host_key" => "the VM's public host key as its `.pub` file holds it, such as \"ssh-ed25519 AAAA…\"",
            _ => "write it as a string",
        })
}

/// Where field `name` is written in the record literal `e` (the record itself otherwise).
fn field_span(e: &envc_lang::ast::Expr, name: &str) -> Span {
    if let envc_lang::ast::ExprKind::Record(fields) = &e.kind {
        if let Some(f) = fields.iter().find(|f| &*f.name.name == name) {
            return f.name.span;
        }
    }
    e.span
}
