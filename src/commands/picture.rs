//! `envc graph --format html|svg` and `envc plan --format html`: the environment as a
//! picture, laid out by target. Machines are boxes holding what runs on them (files,
//! packages, services, commands); Kubernetes objects are grouped by namespace; images and
//! other nodes without a target have boxes of their own. Each node is coloured by what the
//! plan says of it (unchanged, to create, update, replace, check or delete), by drift, and by
//! the last run when that failed it.
//!
//! [`Picture`] is the one model both pictures draw: a pure function of the compiled graph,
//! the plan and the last run, serialised into the page, which lays it out in the browser (so
//! one self-contained file, no network), or laid out here as a static SVG for documents.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use envc_compiler::value::{Deferred, Value};
use envc_compiler::Graph;
use envc_executor::{PlanReport, RealizationRecord, Resolution, RunRecord, Session, Spec};

use super::CompiledEnv;
use crate::exit::Failure;
use serde::Serialize;

/// The page: the picture's JSON goes where the marker is.
const PAGE: &str = include_str!("picture.html");
const MARKER: &str = "/*PICTURE*/null";

#[derive(Serialize)]
pub struct Picture {
    pub env: String,
    /// What coloured it: `graph` (the plan against the last records) or `plan`.
    pub source: &'static str,
    pub groups: Vec<Group>,
    pub nodes: Vec<PictureNode>,
    /// `(from, to, kind)`: `from` is used by `to`; kind `value` when `to` reads one of
    /// `from`'s outputs (a deferred value), `order` otherwise (a node it names, `after`).
    /// A node's target is its box, not an edge.
    pub edges: Vec<(usize, usize, &'static str)>,
    /// How many nodes have each status.
    pub counts: BTreeMap<&'static str, usize>,
    /// The run whose outcomes it shows, if any.
    pub last_run: Option<String>,
    /// Each status's colour: the page and the SVG colour from this one table.
    pub palette: BTreeMap<&'static str, &'static str>,
}

#[derive(Serialize)]
pub struct Group {
    pub label: String,
    /// `machine`, `namespace`, `images` or `environment`.
    pub kind: &'static str,
    /// The machine node a machine's box stands for.
    pub machine: Option<usize>,
    pub nodes: Vec<usize>,
}

#[derive(Serialize)]
pub struct PictureNode {
    pub key: String,
    pub kind: String,
    pub name: String,
    pub group: usize,
    /// `unchanged`, `create`, `update`, `replace`, `check`, `delete`, `drifted`, `failed` or
    /// `error` (it cannot be resolved).
    pub status: &'static str,
    pub reasons: Vec<String>,
    /// The derivation id; none for a record whose node left the graph.
    pub id: Option<String>,
    pub resolved_hash: Option<String>,
    pub attrs: BTreeMap<String, String>,
    pub tags: BTreeMap<String, String>,
    pub record: Option<RecordView>,
    /// What the last run did to it (`ok`, `failed: …`), when it ran.
    pub last: Option<String>,
}

#[derive(Serialize)]
pub struct RecordView {
    pub resolved_hash: String,
    pub run: String,
    pub at_unix: u64,
    pub facts: BTreeMap<String, String>,
}

impl RecordView {
    fn of(r: &RealizationRecord) -> RecordView {
        RecordView {
            resolved_hash: r.resolved_hash.to_string(),
            run: r.run.clone(),
            at_unix: r.at_unix,
            facts: r.facts.clone(),
        }
    }
}

/// The picture of a compiled environment, coloured by `report` (a plan of it), the live
/// records and the environment's newest run.
pub fn of(
    session: &Session,
    env: &CompiledEnv,
    report: &PlanReport,
    source: &'static str,
) -> Result<Picture, Failure> {
    let graph = (env.compiled.graph.as_ref())
        .ok_or_else(|| Failure::Input("the environment has no graph".into()))?;
    let (records, _) = session.live()?;
    let history = session.history()?;
    let last = history.runs.iter().find_map(|r| r.as_ref().ok());
    Ok(Picture::new(
        &session.env,
        source,
        &env.spec,
        graph,
        report,
        &records,
        last,
    ))
}

/// What a run's outcome says of a node, in a word or a line.
fn outcome_text(o: &envc_executor::StepOutcome) -> String {
    use envc_executor::StepOutcome as O;
    match o {
        O::Ok(None) => "ok".into(),
        O::Ok(Some(note)) => format!("ok: {note}"),
        O::Cached => "unchanged".into(),
        O::Failed(why) => format!("failed: {why}"),
        O::Skipped(why) => format!("skipped: {why}"),
    }
}

/// The nodes whose outputs `v` reads.
fn producers(v: &Value, out: &mut BTreeSet<String>) {
    match v {
        Value::Deferred(d) => match &**d {
            Deferred::Output { node, .. } => {
                out.insert(node.id.hex());
            }
            Deferred::Concat(parts) => parts.iter().for_each(|p| producers(p, out)),
            Deferred::Json(inner) => producers(inner, out),
            Deferred::Secret(_) => {}
        },
        Value::List(xs) => xs.iter().for_each(|x| producers(x, out)),
        Value::Record(r) => r.values().for_each(|x| producers(x, out)),
        _ => {}
    }
}

/// Node `i` of the spec as the compiler made it (the spec keeps the graph's order).
fn graph_node(graph: &Graph, i: usize) -> Option<&envc_compiler::value::Node> {
    graph.order.get(i).map(|g| &*graph.dag[*g])
}

/// The machines: the hosts and VMs, each drawn as a box holding what is on it.
fn machines(spec: &Spec) -> BTreeSet<usize> {
    (spec.nodes.iter().enumerate())
        .filter(|(_, n)| matches!(n.kind.name(), "host" | "vm"))
        .map(|(i, _)| i)
        .collect()
}

impl Picture {
    pub fn new(
        env: &str,
        source: &'static str,
        spec: &Spec,
        graph: &Graph,
        report: &PlanReport,
        records: &BTreeMap<String, RealizationRecord>,
        last_run: Option<&RunRecord>,
    ) -> Picture {
        let last: BTreeMap<&str, &envc_executor::StepOutcome> = last_run
            .map(|r| {
                (r.nodes.iter())
                    .map(|o| (o.node.as_str(), &o.outcome))
                    .collect()
            })
            .unwrap_or_default();
        let failed_last = |key: &str| {
            last.get(key)
                .is_some_and(|o| matches!(o, envc_executor::StepOutcome::Failed(_)))
        };

        // Boxes: one per machine (in the graph's order), then namespaces, images, the rest.
        let machine_set = machines(spec);
        let mut groups: Vec<Group> = Vec::new();
        let mut group_of_machine: BTreeMap<usize, usize> = BTreeMap::new();
        let mut in_order: Vec<usize> = machine_set.iter().copied().collect();
        in_order.sort_by_cached_key(|&m| natural(&spec.nodes[m].name));
        for m in in_order {
            group_of_machine.insert(m, groups.len());
            let n = &spec.nodes[m];
            groups.push(Group {
                label: format!("{} {}", n.kind.name(), n.name),
                kind: "machine",
                machine: Some(m),
                nodes: Vec::new(),
            });
        }
        let mut named: BTreeMap<(&'static str, String), usize> = BTreeMap::new();
        let mut group_for = |kind: &'static str, label: String, groups: &mut Vec<Group>| {
            *named.entry((kind, label.clone())).or_insert_with(|| {
                groups.push(Group {
                    label,
                    kind,
                    machine: None,
                    nodes: Vec::new(),
                });
                groups.len() - 1
            })
        };
        let by_id: BTreeMap<&str, usize> = (spec.nodes.iter().enumerate())
            .map(|(i, n)| (n.id.as_str(), i))
            .collect();
        let planned: BTreeMap<usize, &envc_executor::Assessment> = (report.plan.nodes.iter())
            .map(|p| (p.index, &p.assessment))
            .collect();

        let mut nodes = Vec::with_capacity(spec.nodes.len() + report.plan.deletions.len());
        for (i, n) in spec.nodes.iter().enumerate() {
            let on_machine = n.target.and_then(|t| group_of_machine.get(&t));
            let group = if let Some(&g) = group_of_machine.get(&i) {
                g
            } else if let (Some(t), false) = (on_machine, n.kind.name() == "manifest") {
                *t
            } else {
                match n.kind.name() {
                    // Delivered through a repository or only rendered, an object is read
                    // by its namespace, as Argo CD shows it.
                    "manifest" => {
                        let ns = n.str_attr("namespace").filter(|s| !s.is_empty());
                        let label =
                            ns.map_or("cluster-wide".to_string(), |ns| format!("namespace {ns}"));
                        group_for("namespace", label, &mut groups)
                    }
                    "image" => group_for("images", "images".into(), &mut groups),
                    _ => group_for("environment", "environment".into(), &mut groups),
                }
            };
            groups[group].nodes.push(i);
            let a = planned.get(&i);
            let record = records.get(&n.key);
            let mut status = a.map_or("unchanged", |a| a.action.name());
            if matches!(a.map(|a| &a.resolved), Some(Err(Resolution::Failed(_)))) {
                status = "error";
            } else if report.drift.contains_key(&n.key) {
                status = "drifted";
            } else if status != "unchanged" && failed_last(&n.key) {
                status = "failed";
            }
            let resolved = a.and_then(|a| a.resolved.as_ref().ok());
            let mut reasons = a.map(|a| a.reasons.clone()).unwrap_or_default();
            if let Some(Err(Resolution::Failed(e))) = a.map(|a| &a.resolved) {
                reasons.push(e.to_string());
            }
            nodes.push(PictureNode {
                key: n.key.clone(),
                kind: n.kind.name().to_string(),
                name: n.name.clone(),
                group,
                status,
                reasons,
                id: Some(n.id.clone()),
                resolved_hash: resolved.map(|r| r.hash.to_string()),
                // Resolved as a record shows them; before that, as written, deferred
                // values named by where they will come from.
                attrs: match resolved {
                    Some(r) => r.display.clone(),
                    None => graph_node(graph, i)
                        .map(|g| {
                            (g.attrs.iter())
                                .map(|(k, v)| (k.to_string(), super::shown::human(v)))
                                .collect()
                        })
                        .unwrap_or_default(),
                },
                tags: n.tags.clone(),
                record: record.map(RecordView::of),
                last: last.get(n.key.as_str()).map(|o| outcome_text(o)),
            });
        }
        // Records whose node left the graph: in their machine's box when it is still there.
        for (key, r) in &report.plan.deletions {
            let on = key.split_once('/').map(|(t, _)| t);
            let group = (spec.nodes.iter().enumerate())
                .find(|(i, m)| machine_set.contains(i) && Some(m.name.as_str()) == on)
                .and_then(|(i, _)| group_of_machine.get(&i).copied())
                .unwrap_or_else(|| group_for("environment", "environment".into(), &mut groups));
            groups[group].nodes.push(nodes.len());
            let (kind, name) = match envc_executor::on_target(key) {
                Some(k) => (k.kind.name().to_string(), k.name.to_string()),
                None => key
                    .split_once(':')
                    .map_or((String::new(), key.clone()), |(k, n)| {
                        (k.to_string(), n.to_string())
                    }),
            };
            nodes.push(PictureNode {
                key: key.clone(),
                kind,
                name,
                group,
                status: "delete",
                reasons: vec!["no longer in the source".into()],
                id: None,
                resolved_hash: None,
                attrs: r.attrs.clone(),
                tags: BTreeMap::new(),
                record: Some(RecordView::of(r)),
                last: last.get(key.as_str()).map(|o| outcome_text(o)),
            });
        }

        // In a box: its machine first, then by kind and name as people sort them.
        for g in &mut groups {
            let order = |i: &usize| {
                let n: &PictureNode = &nodes[*i];
                (Some(*i) != g.machine, n.kind.clone(), natural(&n.name))
            };
            g.nodes.sort_by_cached_key(order);
        }
        let mut edges = Vec::new();
        for i in 0..spec.nodes.len() {
            let Some(node) = graph_node(graph, i) else {
                continue;
            };
            let mut reads = BTreeSet::new();
            node.attrs.values().for_each(|v| producers(v, &mut reads));
            for input in &node.inputs {
                let from = by_id.get(input.id.hex().as_str()).copied();
                let Some(from) = from else { continue };
                if Some(from) == spec.nodes[i].target {
                    continue;
                }
                let kind = if reads.contains(&input.id.hex()) {
                    "value"
                } else {
                    "order"
                };
                edges.push((from, i, kind));
            }
        }
        let mut counts = BTreeMap::new();
        for n in &nodes {
            *counts.entry(n.status).or_insert(0) += 1;
        }
        Picture {
            env: env.to_string(),
            source,
            groups,
            nodes,
            edges,
            counts,
            last_run: last_run.map(|r| r.run.clone()),
            palette: STATUSES.iter().map(|s| (*s, colour(s).0)).collect(),
        }
    }

    /// One self-contained page: the model inline, laid out by the page's own script.
    pub fn to_html(&self) -> String {
        // Whatever a node's name or a tag holds, nothing in it can end or change the script
        // element it sits in (`</script>`, `<!--<script>`, which left the page blank): `<`,
        // `>` and `&` only appear inside JSON strings, where their escapes mean the same.
        let json = inline_json(&serde_json::to_string(self).unwrap_or_else(|_| "null".into()));
        PAGE.replacen(MARKER, &json, 1).replacen(
            "<title>envc</title>",
            &format!("<title>envc: {}</title>", xml(&self.env)),
            1,
        )
    }

    /// A static picture for documents: the boxes in columns, each listing its nodes
    /// (the first [`SVG_ROWS`]), coloured as the page colours them, and the edges between
    /// boxes.
    pub fn to_svg(&self) -> String {
        const COLUMNS: usize = 4;
        const WIDTH: usize = 300;
        const ROW: usize = 18;
        const HEAD: usize = 26;
        const GAP: usize = 24;
        let rows = |g: &Group| g.nodes.len().min(SVG_ROWS) + usize::from(g.nodes.len() > SVG_ROWS);
        let mut col_y = [GAP + 44; COLUMNS];
        let mut boxes = Vec::with_capacity(self.groups.len());
        for g in &self.groups {
            let c = (0..COLUMNS).min_by_key(|c| col_y[*c]).unwrap_or(0);
            let h = HEAD + rows(g) * ROW + 8;
            boxes.push((GAP + c * (WIDTH + GAP), col_y[c], h));
            col_y[c] += h + GAP;
        }
        let width = GAP + COLUMNS.min(self.groups.len().max(1)) * (WIDTH + GAP);
        let height = col_y.iter().max().copied().unwrap_or(100);
        let mut s = String::new();
        let _ = write!(
            s,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" \
             viewBox=\"0 0 {width} {height}\" font-family=\"sans-serif\" font-size=\"12\">\n\
             <rect width=\"100%\" height=\"100%\" fill=\"#fbfbfd\"/>\n\
             <text x=\"{GAP}\" y=\"24\" font-size=\"16\" font-weight=\"bold\">envc: {}</text>\n",
            xml(&self.env)
        );
        // The legend: the statuses it shows, with their counts.
        let mut x = GAP;
        for status in STATUSES {
            let Some(n) = self.counts.get(status) else {
                continue;
            };
            let label = format!("{status} {n}");
            let _ = writeln!(
                s,
                "<rect x=\"{x}\" y=\"36\" width=\"10\" height=\"10\" rx=\"2\" fill=\"{}\"/><text x=\"{}\" y=\"45\">{label}</text>",
                colour(status).0,
                x + 14
            );
            x += 14 + label.len() * 7 + 14;
        }
        // Edges between boxes, once each, under the boxes.
        let mut between = BTreeSet::new();
        for &(from, to, _) in &self.edges {
            let (a, b) = (self.nodes[from].group, self.nodes[to].group);
            if a != b {
                between.insert((a, b));
            }
        }
        for (a, b) in between {
            let ((ax, ay, ah), (bx, by, bh)) = (boxes[a], boxes[b]);
            let (x1, y1, x2, y2) = (ax + WIDTH / 2, ay + ah / 2, bx + WIDTH / 2, by + bh / 2);
            let _ = writeln!(
                s,
                "<path d=\"M{x1},{y1} C{x1},{} {x2},{} {x2},{y2}\" fill=\"none\" stroke=\"#9aa3b5\" stroke-width=\"1.5\" opacity=\"0.7\"/>",
                (y1 + y2) / 2,
                (y1 + y2) / 2
            );
        }
        for (g, &(x, y, h)) in self.groups.iter().zip(&boxes) {
            let head = g
                .machine
                .map_or("#e8ebf2", |m| colour(self.nodes[m].status).1);
            let _ = writeln!(
                s,
                "<g class=\"group\"><rect x=\"{x}\" y=\"{y}\" width=\"{WIDTH}\" height=\"{h}\" rx=\"6\" fill=\"#ffffff\" stroke=\"#c5cbd8\"/>\
                 <rect x=\"{x}\" y=\"{y}\" width=\"{WIDTH}\" height=\"{HEAD}\" rx=\"6\" fill=\"{head}\"/>\
                 <text x=\"{}\" y=\"{}\" font-weight=\"bold\">{}</text>",
                x + 8,
                y + 17,
                xml(&truncate(&format!("{} ({})", g.label, g.nodes.len()), 44))
            );
            for (row, &i) in g.nodes.iter().take(SVG_ROWS).enumerate() {
                let n = &self.nodes[i];
                let (fill, _) = colour(n.status);
                let ry = y + HEAD + row * ROW;
                let _ = writeln!(
                    s,
                    "<g class=\"node\" data-status=\"{}\"><rect x=\"{}\" y=\"{}\" width=\"10\" height=\"10\" rx=\"2\" fill=\"{fill}\"/>\
                     <text x=\"{}\" y=\"{}\">{}</text><title>{} — {}</title></g>",
                    n.status,
                    x + 10,
                    ry + 5,
                    x + 26,
                    ry + 14,
                    xml(&truncate(&format!("{} {}", n.kind, n.name), 42)),
                    xml(&n.key),
                    n.status
                );
            }
            if g.nodes.len() > SVG_ROWS {
                let _ = writeln!(
                    s,
                    "<text x=\"{}\" y=\"{}\" fill=\"#667\">… {} more</text>",
                    x + 26,
                    y + HEAD + SVG_ROWS * ROW + 14,
                    g.nodes.len() - SVG_ROWS
                );
            }
            s.push_str("</g>\n");
        }
        s.push_str("</svg>\n");
        s
    }
}

/// A name as people sort it: runs of digits compare as numbers, so `web-9` comes
/// before `web-10`.
fn natural(s: &str) -> Vec<(String, u64)> {
    let mut parts = Vec::new();
    let mut rest = s;
    while !rest.is_empty() {
        let text_end = rest
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(rest.len());
        let (text, tail) = rest.split_at(text_end);
        let digits_end = tail
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(tail.len());
        let (digits, tail) = tail.split_at(digits_end);
        parts.push((text.to_string(), digits.parse().unwrap_or(u64::MAX)));
        rest = tail;
    }
    parts
}

/// Nodes listed per box in the SVG; the page shows them all.
const SVG_ROWS: usize = 24;

/// Every status a node can have, in the order the legend lists them.
const STATUSES: [&str; 9] = [
    "create",
    "update",
    "replace",
    "delete",
    "check",
    "drifted",
    "failed",
    "error",
    "unchanged",
];

/// A status's colour, and the lighter one of a machine box's head.
fn colour(status: &str) -> (&'static str, &'static str) {
    match status {
        "create" => ("#2e9e4f", "#d5f0dc"),
        "update" => ("#d9920b", "#fbe9c8"),
        "replace" => ("#e0601b", "#fbd9c6"),
        "delete" => ("#c7362b", "#f6d0cd"),
        "check" => ("#2f6fd6", "#d3e1f8"),
        "drifted" => ("#8a3fc7", "#e6d5f4"),
        "failed" => ("#8b0f1a", "#f0c4c8"),
        "error" => ("#5b0f0f", "#e9c0c0"),
        _ => ("#8d95a5", "#e8ebf2"),
    }
}

fn truncate(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_string();
    }
    let cut: String = s.chars().take(max - 1).collect();
    format!("{cut}…")
}

/// Text as XML character data or an attribute value.
fn xml(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// JSON made safe to sit inside an HTML `<script>` element, as frameworks inline it.
fn inline_json(json: &str) -> String {
    json.replace('<', "\\u003c")
        .replace('>', "\\u003e")
        .replace('&', "\\u0026")
        .replace('\u{2028}', "\\u2028")
        .replace('\u{2029}', "\\u2029")
}

#[cfg(test)]
mod tests {
    use super::{inline_json, natural};

    /// A tag value that once left the page blank, and the rest of HTML's script hazards:
    /// none survives into the page raw, and the JSON still reads back to the same value.
    #[test]
    fn inline_json_cannot_leave_or_change_its_script_element() {
        let value = serde_json::json!({"tags": {"note": "<!--<script> </script> a & b \u{2028}"}});
        let inlined = inline_json(&value.to_string());
        for raw in ["<", ">", "&", "\u{2028}"] {
            assert!(!inlined.contains(raw), "{raw} in {inlined}");
        }
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(&inlined).unwrap(),
            value
        );
    }

    fn check(names: &[&str], expected: &[&str]) {
        let mut sorted = names.to_vec();
        sorted.sort_by_key(|n| natural(n));
        assert_eq!(sorted, expected);
    }

    #[test]
    fn machines_sort_as_people_count() {
        check(
            &["web-10", "web-2", "db-0", "web-1", "web"],
            &["db-0", "web", "web-1", "web-2", "web-10"],
        );
        check(&["h-9a", "h-10", "h-9"], &["h-9", "h-9a", "h-10"]);
        check(
            &["n99999999999999999999", "n1"],
            &["n1", "n99999999999999999999"],
        );
    }
}
