//! `moved "OLD" -> "NEW"` (issue 37): a node renamed in the source keeps what the state
//! recorded under its old key. The compiler reads the declarations once the graph is known
//! and holds each one to it: both sides are node keys as `envc plan` prints them, the new
//! one is in the graph and the old one no longer is, each side is moved once, and the kind
//! stays. Whether anything is recorded under the old key is the state's to say (`plan` and
//! `build` warn when nothing is), not the compiler's, which has no state.

use std::collections::BTreeMap;
use std::rc::Rc;

use envc_ids::NodeKey;
use envc_lang::ast::{ItemKind, Moved};
use envc_lang::{Diagnostic, FileId, Span};

use crate::program::Program;
use crate::types::NodeKind;
use crate::value::Node;

/// One declared rename, checked against the graph, with where it is written (a plan that
/// finds the new key already recorded points at the line: `moved::target-exists`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Move {
    pub from: NodeKey,
    pub to: NodeKey,
    pub file: FileId,
    pub from_span: Span,
    pub to_span: Span,
}

/// The state key of a node, as `envc plan` prints it.
pub fn key_of(n: &Node) -> NodeKey {
    NodeKey::new(n.kind, &n.name, n.target.as_ref().map(|t| &*t.name))
}

/// Kinds whose name is the thing's identity on its target: renaming one declares another
/// thing, and the old one stays where it is. Why, for the diagnostic.
fn identity(kind: NodeKind) -> Option<&'static str> {
    Some(match kind {
        NodeKind::File => "a file's name is its path on the target",
        NodeKind::Package => "a package's name is the package the target installs",
        NodeKind::Service => "a service's name is its systemd unit on the target",
        NodeKind::Manifest => {
            "a manifest's name is the object's namespace, kind and name in the cluster"
        }
        NodeKind::Stack => "a stack's name is the environment it reads",
        _ => return None,
    })
}

struct Declared<'a> {
    file: FileId,
    item: &'a Moved,
    span: Span,
}

/// The `moved` declarations of the program, checked against the graph's `nodes`: the
/// moves, or why some are wrong.
pub fn check<'g>(
    program: &Program,
    nodes: impl Iterator<Item = &'g Rc<Node>>,
) -> (Vec<Move>, Vec<Diagnostic>) {
    let mut declared = Vec::new();
    for m in &program.modules {
        for item in &m.ast.items {
            if let ItemKind::Moved(mv) = &item.kind {
                declared.push(Declared {
                    file: m.file,
                    item: mv,
                    span: item.span,
                });
            }
        }
    }
    if declared.is_empty() {
        return (Vec::new(), Vec::new());
    }
    let nodes: BTreeMap<String, &Rc<Node>> = nodes.map(|n| (key_of(n).to_string(), n)).collect();
    let mut errors = Vec::new();
    let mut moves: Vec<(Move, &Declared)> = Vec::new();
    for d in &declared {
        let parse = |text: &str, span: Span, which: &str| {
            text.parse::<NodeKey>().map_err(|_| {
                let bare = nodes.keys().filter(|k| {
                    k.parse::<NodeKey>()
                        .is_ok_and(|key| key.name == text && key.target.is_none())
                });
                let hint = envc_lang::did_you_mean(text, nodes.keys().map(String::as_str))
                    .or_else(|| bare.clone().next().map(|k| format!("did you mean `{k}`?")))
                    .unwrap_or_else(|| {
                        "write it as `envc plan` prints it: `vm:web-0`, `host:db-0`, `web-0/file:/etc/motd`".into()
                    });
                Diagnostic::new("moved::bad-key", format!("`{text}` is not a node key"))
                    .label(d.file, span, format!("the {which} key"))
                    .message("`moved` names nodes by their key in the state: `kind:name`, or `target/kind:name` for what is on a machine.")
                    .help(hint)
            })
        };
        let from = parse(&d.item.from, d.item.from_span, "old");
        let to = parse(&d.item.to, d.item.to_span, "new");
        let (from, to) = match (from, to) {
            (Ok(f), Ok(t)) => (f, t),
            (f, t) => {
                errors.extend(f.err());
                errors.extend(t.err());
                continue;
            }
        };
        if from == to {
            errors.push(
                Diagnostic::new("moved::same-key", format!("`{from}` is moved onto itself"))
                    .label(d.file, d.span, "the old and the new key are the same")
                    .help("remove this line"),
            );
            continue;
        }
        if from.kind != to.kind {
            errors.push(
                Diagnostic::new(
                    "moved::kind-change",
                    format!("a `{}` cannot move to a `{}`", from.kind, to.kind),
                )
                .label(d.file, d.item.to_span, format!("a `{}`", to.kind))
                .label(d.file, d.item.from_span, format!("a `{}`", from.kind))
                .message("`moved` renames a node and keeps what it manages; a node of another kind manages another thing, so the old one is removed and the new one created.")
                .help("remove this line, and let the plan delete the old node and create the new one"),
            );
            continue;
        }
        if let (Some(why), true) = (identity(from.kind), from.name != to.name) {
            errors.push(
                Diagnostic::new(
                    "moved::identity",
                    format!("`{from}` and `{to}` are two things, not one renamed"),
                )
                .label(d.file, d.span, format!("another {} name", from.kind))
                .message(format!(
                    "{why}: after this `moved` the old one would stay on the target, still thought managed under the new name."
                ))
                .help("remove this line: the plan then removes the old one and creates the new one"),
            );
            continue;
        }
        moves.push((
            Move {
                from,
                to,
                file: d.file,
                from_span: d.item.from_span,
                to_span: d.item.to_span,
            },
            d,
        ));
    }
    // Each side once.
    let mut by_from: BTreeMap<&NodeKey, &Declared> = BTreeMap::new();
    let mut by_to: BTreeMap<&NodeKey, &Declared> = BTreeMap::new();
    for (mv, d) in &moves {
        if let Some(first) = by_from.insert(&mv.from, d) {
            errors.push(
                Diagnostic::new("moved::duplicate", format!("`{}` is moved twice", mv.from))
                    .label(d.file, d.item.from_span, "moved again here")
                    .label(first.file, first.item.from_span, "first moved here")
                    .message("one node's records can go to one new name only.")
                    .help("keep the line that names where it went"),
            );
        }
        if let Some(first) = by_to.insert(&mv.to, d) {
            errors.push(
                Diagnostic::new(
                    "moved::duplicate",
                    format!("two nodes are moved into `{}`", mv.to),
                )
                .label(d.file, d.item.to_span, "moved into again here")
                .label(first.file, first.item.to_span, "first moved into here")
                .message("a node can take over the records of one old node only.")
                .help("keep the line that names where it came from"),
            );
        }
    }
    let machines: BTreeMap<&str, &str> = moves
        .iter()
        .filter(|(m, _)| m.to.kind.is_target())
        .map(|(m, _)| (&*m.to.name, &*m.from.name))
        .collect();
    // A chain (`a -> b`, `b -> c`): which of `a` and `b` the state holds depends on whether
    // `b` was built, which the source cannot say, and the records' hashes name one of them.
    // One line from the key the state has says it.
    let mut chained: std::collections::BTreeSet<&NodeKey> = Default::default();
    for (mv, d) in &moves {
        let Some(next) = by_from.get(&mv.to) else {
            continue;
        };
        chained.extend([&mv.from, &mv.to]);
        let last = (moves.iter())
            .find(|(m, _)| m.from == mv.to)
            .map_or_else(|| mv.to.to_string(), |(m, _)| m.to.to_string());
        errors.push(
            Diagnostic::new(
                "moved::chain",
                format!("`{}` is moved on again", mv.to),
            )
            .label(d.file, d.item.to_span, "moved into here")
            .label(next.file, next.item.from_span, "and on from here")
            .message(format!(
                "`moved` lines do not chain: each carries records from the key the state has to a node of the environment, and whether the state has `{}` or `{}` depends on whether `{}` was built.",
                mv.from, mv.to, mv.to
            ))
            .help(format!(
                "replace the lines with one: `moved \"{}\" -> \"{last}\"` if `{}` was never built, else `moved \"{}\" -> \"{last}\"` (`envc plan` without them shows which key it would delete)",
                mv.from, mv.to, mv.to
            )),
        );
    }
    for (mv, d) in &moves {
        if chained.contains(&mv.from) || chained.contains(&mv.to) {
            continue;
        }
        if let Some(n) = nodes.get(&mv.from.to_string()) {
            errors.push(
                Diagnostic::new(
                    "moved::source-exists",
                    format!("`{}` is still in the environment", mv.from),
                )
                .label(d.file, d.item.from_span, "moved away from here")
                .label(n.file, n.span, "but still declared here")
                .message("`moved` carries the records of a node that left the source to its new name; this one did not leave.")
                .help("rename the node in the source, or remove this line"),
            );
        }
        if !nodes.contains_key(&mv.to.to_string()) {
            let hint =
                envc_lang::did_you_mean(&mv.to.to_string(), nodes.keys().map(String::as_str))
                    .unwrap_or_else(|| {
                        "`envc plan` and `envc graph` list the keys of the environment's nodes"
                            .into()
                    });
            errors.push(
                Diagnostic::new(
                    "moved::target-missing",
                    format!("`{}` is not in the environment", mv.to),
                )
                .label(d.file, d.item.to_span, "no node has this key")
                .message("the new key of a `moved` must be a node of the graph, which takes over the old one's records.")
                .help(hint),
            );
        }
        // What is on a machine moves with its machine, and no other way: a file moved to
        // another machine would be left on the first one.
        if let (Some(ft), Some(tt)) = (&mv.from.target, &mv.to.target) {
            if ft != tt && machines.get(tt.as_str()) != Some(&ft.as_str()) {
                let kind = (nodes.values())
                    .find(|n| n.kind.is_target() && &*n.name == tt.as_str())
                    .map_or("vm", |n| n.kind.name());
                errors.push(
                    Diagnostic::new(
                        "moved::other-target",
                        format!("`{}` cannot move from `{ft}` to `{tt}`", mv.from),
                    )
                    .label(d.file, d.span, "another machine")
                    .message("what is on a machine stays on it: the new machine would not have it, and the old one would keep it.")
                    .help(format!(
                        "if `{tt}` is `{ft}` renamed, move the machine (`moved \"{kind}:{ft}\" -> \"{kind}:{tt}\"`): what is on it follows"
                    )),
                );
            }
        }
    }
    if !errors.is_empty() {
        return (Vec::new(), errors);
    }
    (moves.into_iter().map(|(m, _)| m).collect(), Vec::new())
}

/// The key each node of the graph had before the moves, for the nodes whose key moved:
/// the node named by a `moved` line, and everything on a moved machine (`web-0/file:…` for
/// `web-a/file:…` after `moved "vm:web-0" -> "vm:web-a"`).
pub fn old_keys<'k>(
    moves: &[Move],
    keys: impl Iterator<Item = &'k NodeKey>,
) -> BTreeMap<NodeKey, NodeKey> {
    let direct: BTreeMap<&NodeKey, &NodeKey> = moves.iter().map(|m| (&m.to, &m.from)).collect();
    let machines: BTreeMap<&str, &str> = moves
        .iter()
        .filter(|m| m.to.kind.is_target() && m.to.target.is_none())
        .map(|m| (&*m.to.name, &*m.from.name))
        .collect();
    let mut out = BTreeMap::new();
    for k in keys {
        if let Some(old) = direct.get(k) {
            out.insert(k.clone(), (*old).clone());
        } else if let Some(old) = k.target.as_deref().and_then(|t| machines.get(t)) {
            let mut was = k.clone();
            was.target = Some((*old).to_string());
            out.insert(k.clone(), was);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn key(s: &str) -> NodeKey {
        s.parse().unwrap()
    }

    fn check(moves: &[(&str, &str)], keys: &[&str], expected: &[(&str, &str)]) {
        let moves: Vec<Move> = moves
            .iter()
            .map(|(f, t)| Move {
                from: key(f),
                to: key(t),
                file: 0,
                from_span: Span::default(),
                to_span: Span::default(),
            })
            .collect();
        let keys: Vec<NodeKey> = keys.iter().map(|k| key(k)).collect();
        let mut got: Vec<(String, String)> = old_keys(&moves, keys.iter())
            .into_iter()
            .map(|(n, o)| (n.to_string(), o.to_string()))
            .collect();
        got.sort();
        let expected: Vec<(String, String)> = expected
            .iter()
            .map(|(n, o)| (n.to_string(), o.to_string()))
            .collect();
        assert_eq!(got, expected);
    }

    /// Compiles `src` and gives its moves as `OLD -> NEW`, or its diagnostics' codes.
    fn compiled(src: &str) -> Result<Vec<String>, Vec<&'static str>> {
        let loader = crate::MemoryLoader::new([("main.env", src)]);
        let c = crate::compile("main.env", &loader, &crate::CompileOptions::default());
        match c.graph {
            Some(g) => Ok(g
                .moved
                .iter()
                .map(|m| format!("{} -> {}", m.from, m.to))
                .collect()),
            None => Err(c.diagnostics.iter().map(|d| d.code).collect()),
        }
    }

    #[test]
    fn moves_are_checked_against_the_graph() {
        let web = "let img = image(name = \"i\")\nlet web = vm(name = \"web-a\", image = img)\n\
                   let motd = file(path = \"/etc/motd\", content = \"hi\", target = web)\n\
                   let init = exec(name = \"setup\", argv = [\"true\"], target = web)\n";
        let with = |lines: &str| format!("{web}{lines}");
        assert_eq!(compiled(web), Ok(vec![]));
        assert_eq!(
            compiled(&with("moved \"vm:web-0\" -> \"vm:web-a\"\nmoved \"web-0/exec:init\" -> \"web-a/exec:setup\"\n")),
            Ok(vec![
                "vm:web-0 -> vm:web-a".to_string(),
                "web-0/exec:init -> web-a/exec:setup".to_string()
            ])
        );
        // A file is its path: renaming it is another file.
        assert_eq!(
            compiled(&with(
                "moved \"web-a/file:/etc/issue\" -> \"web-a/file:/etc/motd\"\n"
            )),
            Err(vec!["moved::identity"])
        );
        // What is on a machine moves only with it.
        assert_eq!(
            compiled(&with("moved \"web-0/exec:init\" -> \"web-a/exec:setup\"\n")),
            Err(vec!["moved::other-target"])
        );
        assert_eq!(
            compiled(&with("moved \"image:i\" -> \"image:j\"\n")),
            Err(vec!["moved::source-exists", "moved::target-missing"])
        );
        // A chain says neither which key the state has nor, so, which names its records
        // hash (issue 60, item 2): refused, with both lines to replace.
        assert_eq!(
            compiled(&with(
                "moved \"vm:web-0\" -> \"vm:web-b\"\nmoved \"vm:web-b\" -> \"vm:web-a\"\n"
            )),
            Err(vec!["moved::chain"])
        );
        assert_eq!(
            compiled(&with("moved \"vm:\" -> \"vm:web-a\"\n")),
            Err(vec!["moved::bad-key"])
        );
    }

    #[test]
    fn what_is_on_a_moved_machine_moves_with_it() {
        check(
            &[("vm:web-0", "vm:web-a")],
            &[
                "vm:web-a",
                "web-a/file:/etc/motd",
                "web-b/file:/etc/motd",
                "image:base",
            ],
            &[
                ("vm:web-a", "vm:web-0"),
                ("web-a/file:/etc/motd", "web-0/file:/etc/motd"),
            ],
        );
        check(
            &[
                ("host:db-0", "host:db"),
                ("db-0/exec:init", "db/exec:setup"),
            ],
            &["host:db", "db/exec:setup", "db/package:nginx"],
            &[
                ("db/exec:setup", "db-0/exec:init"),
                ("db/package:nginx", "db-0/package:nginx"),
                ("host:db", "host:db-0"),
            ],
        );
        check(
            &[("image:a", "image:b")],
            &["image:b", "image:a"],
            &[("image:b", "image:a")],
        );
        check(&[], &["vm:a"], &[]);
    }
}
