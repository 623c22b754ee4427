//! Kubernetes objects at compile time: a `manifest` node's attributes as the object they
//! stand for, its namespace settled by its kind, and every problem the API schema finds
//! (`envc_k8s::validate`) as a diagnostic at the field that is wrong, where the field was
//! written in a record literal.

use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;

use envc_k8s::{Problem, ProblemKind, Seg};
use envc_lang::{Diagnostic, FileId, Span};
use serde_json::{json, Map, Value as Json};

use crate::value::{Deferred, Value};

/// Where a record literal was written: its file and span, and each field's name and value
/// spans. Kept (by the record's address) only while the program can build a manifest.
#[derive(Clone, Debug)]
pub struct RecordSite {
    pub file: FileId,
    pub span: Span,
    pub fields: Rc<[(Rc<str>, Span, Span)]>,
}

pub type RecordSites = HashMap<usize, RecordSite>;

pub fn address(r: &Rc<BTreeMap<Rc<str>, Value>>) -> usize {
    Rc::as_ptr(r) as *const () as usize
}

/// The site of record `r`, if it was written as a literal with exactly these fields (an
/// address can be reused once a record is dropped: the fields tell it apart).
fn site<'s>(sites: &'s RecordSites, r: &Rc<BTreeMap<Rc<str>, Value>>) -> Option<&'s RecordSite> {
    let site = sites.get(&address(r))?;
    let same =
        site.fields.len() == r.len() && site.fields.iter().all(|(k, _, _)| r.contains_key(k));
    same.then_some(site)
}

/// The value as Kubernetes reads it: a size is a quantity (`512Mi`), a mode an int (its
/// decimal value, as `defaultMode` takes it), a deferred value `envc_k8s::DEFERRED`.
/// `Err` names what cannot be in an object.
pub fn to_json(v: &Value) -> Result<Json, &'static str> {
    Ok(match v {
        Value::Int(n) => json!(n),
        Value::Str(s) => json!(&**s),
        Value::Bool(b) => json!(b),
        Value::Size(n) => envc_k8s::quantity(*n),
        Value::Mode(m) => json!(m),
        Value::List(xs) => Json::Array(xs.iter().map(to_json).collect::<Result<_, _>>()?),
        Value::Record(r) => Json::Object(
            r.iter()
                .map(|(k, x)| Ok((k.to_string(), to_json(x)?)))
                .collect::<Result<Map<_, _>, _>>()?,
        ),
        Value::Deferred(d) if matches!(&**d, Deferred::Secret(_)) => return Err("a secret"),
        Value::Deferred(_) => json!(envc_k8s::DEFERRED),
        Value::Path(_) => return Err("a project file (`path(…)`)"),
        Value::Node(_) => return Err("a node"),
        Value::Fn(_) | Value::Builtin(_) => return Err("a function"),
        Value::Module(_) => return Err("a module"),
        Value::Check(_) => return Err("a check"),
    })
}

/// What the schema found, as diagnostics: each at the field it names when that field was
/// written in a record literal, else at the attribute that holds it.
pub fn diagnostics(
    problems: &[Problem],
    what: &str,
    attrs: &BTreeMap<Rc<str>, Value>,
    at: &dyn Fn(&str) -> (FileId, Span),
    sites: &RecordSites,
) -> Vec<Diagnostic> {
    problems
        .iter()
        .map(|p| {
            let (file, span) = locate(p, attrs, at, sites);
            let version = envc_k8s::KUBERNETES_VERSION;
            let checked = match p.kind {
                ProblemKind::Mismatch => {
                    format!("Checked as the API server of Kubernetes {version} checks it.")
                }
                _ => format!("Checked against the API schema of Kubernetes {version}."),
            };
            let d = Diagnostic::new("eval::manifest-schema", format!("{what}: {}", p.message))
                .label(file, span, p.path_text())
                .message(checked);
            match &p.help {
                Some(h) => d.help(h.clone()),
                None => d,
            }
        })
        .collect()
}

/// Where a problem's path was written: the attribute it starts in (`body`, `labels`, …),
/// then down through every record written as a literal.
fn locate(
    p: &Problem,
    attrs: &BTreeMap<Rc<str>, Value>,
    at: &dyn Fn(&str) -> (FileId, Span),
    sites: &RecordSites,
) -> (FileId, Span) {
    let (attr, rest) = match p.path.as_slice() {
        [Seg::Field(f), ..] if f == "apiVersion" => ("api_version", &p.path[1..]),
        [Seg::Field(f), ..] if f == "kind" => ("kind", &p.path[1..]),
        [Seg::Field(m), Seg::Field(f), rest @ ..]
            if m == "metadata" && (f == "labels" || f == "annotations") =>
        {
            (f.as_str(), rest)
        }
        [Seg::Field(m), ..] if m == "metadata" => ("name", &[][..]),
        _ => ("body", p.path.as_slice()),
    };
    let mut found = at(attr);
    let mut value = attrs.get(attr);
    for (i, seg) in rest.iter().enumerate() {
        match (seg, value) {
            (Seg::Field(f), Some(Value::Record(r))) => {
                let Some(site) = site(sites, r) else {
                    value = r.get(f.as_str());
                    continue;
                };
                let last = i + 1 == rest.len();
                match site.fields.iter().find(|(k, _, _)| **k == **f) {
                    // An unknown field is its name; a wrong value is the value.
                    Some((_, name, val)) => {
                        found = (
                            site.file,
                            if last && p.kind == ProblemKind::UnknownField {
                                *name
                            } else {
                                *val
                            },
                        );
                    }
                    None => found = (site.file, site.span),
                }
                value = r.get(f.as_str());
            }
            (Seg::Index(n), Some(Value::List(xs))) => value = xs.get(*n),
            _ => break,
        }
    }
    // A missing field: the record that lacks it.
    if p.kind == ProblemKind::MissingField {
        if let Some(Value::Record(r)) = value {
            if let Some(site) = site(sites, r) {
                found = (site.file, site.span);
            }
        }
    }
    found
}

/// The object a `manifest` node stands for, as [`to_json`] gives its values (`None` when
/// one cannot be in an object: the node would not have compiled).
fn object_of(node: &crate::value::Node) -> Option<Json> {
    let text = |k: &str| match node.attrs.get(k) {
        Some(Value::Str(s)) => s.to_string(),
        _ => String::new(),
    };
    let json = |k: &str| {
        node.attrs
            .get(k)
            .map(to_json)
            .unwrap_or(Ok(Json::Null))
            .ok()
    };
    let mut parts = node.name.rsplitn(3, '/');
    let name = parts.next().unwrap_or_default();
    let _kind = parts.next();
    let namespace = parts.next().unwrap_or_default();
    Some(envc_k8s::object(
        &text("api_version"),
        &text("kind"),
        name,
        namespace,
        json("labels")?,
        json("annotations")?,
        json("body")?,
    ))
}

/// "did you mean `app = "web"`?" when a selector's value is a likely typo of a label the
/// pods of namespace `ns` have under that key.
fn close_label(
    selector: &Map<String, Json>,
    ns: &str,
    manifests: &[(&crate::value::Node, Json)],
) -> Option<String> {
    let labels: Vec<&Map<String, Json>> = manifests
        .iter()
        .filter(|(_, o)| {
            o.pointer("/metadata/namespace")
                .and_then(Json::as_str)
                .unwrap_or("")
                == ns
        })
        .filter_map(|(_, o)| envc_k8s::selector::pod_labels(o))
        .collect();
    selector.iter().find_map(|(k, v)| {
        let v = v.as_str()?;
        let values = labels.iter().filter_map(|l| l.get(k)?.as_str());
        let close = envc_lang::closest(v, values)?;
        Some(format!("did you mean `{k} = \"{close}\"`?"))
    })
}

/// A Service whose selector selects no pod that an object of the environment makes, in
/// its namespace: a warning, not an error, as the pods may come from elsewhere (another
/// environment, an operator, a Helm chart).
pub fn warnings<'g>(nodes: impl Iterator<Item = &'g Rc<crate::value::Node>>) -> Vec<Diagnostic> {
    let manifests: Vec<(&crate::value::Node, Json)> = nodes
        .filter(|n| n.kind == crate::types::NodeKind::Manifest)
        .filter_map(|n| Some((&**n, object_of(n)?)))
        .collect();
    let namespace = |o: &Json| {
        o.pointer("/metadata/namespace")
            .and_then(Json::as_str)
            .unwrap_or("")
            .to_string()
    };
    let mut out = Vec::new();
    for (node, o) in &manifests {
        if o.get("apiVersion").and_then(Json::as_str) != Some("v1")
            || o.get("kind").and_then(Json::as_str) != Some("Service")
        {
            continue;
        }
        // No selector (endpoints given by hand, `ExternalName`): nothing to select.
        let Some(selector) = o
            .pointer("/spec/selector")
            .and_then(Json::as_object)
            .filter(|s| !s.is_empty())
        else {
            continue;
        };
        let ns = namespace(o);
        let selected = manifests.iter().any(|(_, p)| {
            namespace(p) == ns
                && envc_k8s::selector::pod_labels(p)
                    .is_some_and(|labels| envc_k8s::selector::selects(selector, labels))
        });
        if selected {
            continue;
        }
        let shown: Vec<String> = selector
            .iter()
            .map(|(k, v)| match v.as_str() {
                Some(s) => format!("{k} = \"{s}\""),
                None => format!("{k} = {v}"),
            })
            .collect();
        let name = envc_k8s::object_name(&node.name);
        let place = match ns.as_str() {
            "" => String::new(),
            ns => format!(" in namespace `{ns}`"),
        };
        out.push(
            Diagnostic::new(
                "graph::service-selects-nothing",
                format!("Service `{name}` selects no pod of this environment"),
            )
            .label(node.file, node.span, format!("selects {{ {} }}", shown.join(", ")))
            .message(format!(
                "No Deployment, StatefulSet, DaemonSet, ReplicaSet, Job, CronJob or Pod of this environment{place} has a pod template with these labels, so the Service has no endpoints unless its pods come from elsewhere."
            ))
            .help(close_label(selector, &ns, &manifests).unwrap_or_else(|| {
                "give the workload's pod template (`spec.template.metadata.labels`) these labels, or correct the selector".into()
            })),
        );
    }
    out
}
