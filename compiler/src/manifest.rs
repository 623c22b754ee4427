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
            let d = Diagnostic::new("eval::manifest-schema", format!("{what}: {}", p.message))
                .label(file, span, p.path_text())
                .message(format!(
                    "Checked against the API schema of Kubernetes {}.",
                    envc_k8s::KUBERNETES_VERSION
                ));
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
