//! An object against its kind's JSON Schema: unknown fields (with "did you mean"), missing
//! required fields and values of the wrong type, each with the path to it. A value known
//! only at deploy time (`DEFERRED`) stands for any scalar.

use serde_json::Value as Json;

use crate::kinds::{find, kinds};

/// What the caller puts where a value is known only at deploy time (a VM's address).
pub const DEFERRED: &str = "\u{0}envc-deferred";

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Seg {
    Field(String),
    Index(usize),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProblemKind {
    /// `apiVersion`/`kind` name no kind this version has, though the group is known.
    UnknownKind,
    UnknownField,
    MissingField,
    WrongType,
    /// Fields that each pass the schema but disagree (a selector and the pod template it
    /// must select: `selector.rs`).
    Mismatch,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    pub kind: ProblemKind,
    /// Where in the object: the field that is wrong (for a missing field, the object that
    /// lacks it).
    pub path: Vec<Seg>,
    pub message: String,
    /// "did you mean `replicas`?"
    pub help: Option<String>,
}

impl Problem {
    /// `spec.template.spec.containers[0].image`.
    pub fn path_text(&self) -> String {
        let mut s = String::new();
        for seg in &self.path {
            match seg {
                Seg::Field(f) => {
                    if !s.is_empty() {
                        s.push('.');
                    }
                    s.push_str(f);
                }
                Seg::Index(i) => s.push_str(&format!("[{i}]")),
            }
        }
        s
    }
}

/// The problems of `object` (a whole Kubernetes object: `apiVersion`, `kind`, `metadata`, …)
/// against the schema of its kind (`crate::validate` adds what the API server checks
/// beyond it). An object of a kind envc does not know (a custom
/// resource) has none, unless its `apiVersion` is a built-in group's: then it is a typo.
pub fn validate(object: &Json) -> Vec<Problem> {
    let api_version = object
        .get("apiVersion")
        .and_then(Json::as_str)
        .unwrap_or("");
    let kind = object.get("kind").and_then(Json::as_str).unwrap_or("");
    let Some(k) = find(api_version, kind) else {
        return unknown_kind(api_version, kind);
    };
    let schema = k.schema();
    let mut v = Validator {
        defs: schema.get("$defs"),
        problems: Vec::new(),
        path: Vec::new(),
    };
    v.walk(object, &schema);
    v.problems
}

fn unknown_kind(api_version: &str, kind: &str) -> Vec<Problem> {
    let same_kind: Vec<&str> = kinds()
        .iter()
        .filter(|k| k.kind == kind)
        .map(|k| k.api_version)
        .collect();
    let in_group: Vec<&str> = kinds()
        .iter()
        .filter(|k| k.api_version == api_version)
        .map(|k| k.kind)
        .collect();
    let (path, message, help) = if let Some(right) = same_kind.first() {
        (
            "apiVersion",
            format!("`{kind}` is in `{right}`, not `{api_version}`"),
            Some(format!("apiVersion = \"{right}\"")),
        )
    } else if !in_group.is_empty() {
        (
            "kind",
            format!("`{api_version}` has no kind `{kind}`"),
            envc_lang::did_you_mean(kind, in_group.iter().copied())
                .or_else(|| Some(format!("its kinds are: {}", in_group.join(", ")))),
        )
    } else {
        // A custom resource: written as given.
        return Vec::new();
    };
    vec![Problem {
        kind: ProblemKind::UnknownKind,
        path: vec![Seg::Field(path.into())],
        message,
        help,
    }]
}

struct Validator<'s> {
    defs: Option<&'s Json>,
    problems: Vec<Problem>,
    path: Vec<Seg>,
}

impl<'s> Validator<'s> {
    /// Follows `$ref`s to the schema they name.
    fn resolve(&self, mut schema: &'s Json) -> &'s Json {
        for _ in 0..64 {
            let Some(r) = schema.get("$ref").and_then(Json::as_str) else {
                break;
            };
            let Some(def) = r
                .strip_prefix("#/$defs/")
                .and_then(|name| self.defs?.get(name))
            else {
                break;
            };
            schema = def;
        }
        schema
    }

    fn problem(&mut self, kind: ProblemKind, message: String, help: Option<String>) {
        self.problems.push(Problem {
            kind,
            path: self.path.clone(),
            message,
            help,
        });
    }

    fn walk(&mut self, value: &Json, schema: &'s Json) {
        let schema = self.resolve(schema);
        let deferred = value.as_str() == Some(DEFERRED);
        if schema.get("x-kubernetes-int-or-string").is_some() {
            if !(value.is_string() || value.is_i64() || value.is_u64()) {
                self.wrong_type("an int or a string", value);
            }
            return;
        }
        match schema.get("type").and_then(Json::as_str) {
            Some("object") => self.object(value, schema),
            Some("array") => match value.as_array() {
                Some(items) => {
                    if let Some(item) = schema.get("items") {
                        for (i, x) in items.iter().enumerate() {
                            self.path.push(Seg::Index(i));
                            self.walk(x, item);
                            self.path.pop();
                        }
                    }
                }
                None if deferred => {}
                None => self.wrong_type("a list", value),
            },
            Some("string") if !value.is_string() => self.wrong_type("a string", value),
            Some("integer") if !(value.is_i64() || value.is_u64() || deferred) => {
                self.wrong_type("an int", value)
            }
            Some("number") if !(value.is_number() || deferred) => {
                self.wrong_type("a number", value)
            }
            Some("boolean") if !(value.is_boolean() || deferred) => {
                self.wrong_type("a bool", value)
            }
            // No type: free-form (`RawExtension`, a CRD's embedded schema).
            _ => {}
        }
    }

    fn object(&mut self, value: &Json, schema: &'s Json) {
        let Some(fields) = value.as_object() else {
            if value.as_str() != Some(DEFERRED) {
                self.wrong_type("a record", value);
            }
            return;
        };
        let properties = schema.get("properties").and_then(Json::as_object);
        let additional = schema.get("additionalProperties");
        for (name, x) in fields {
            self.path.push(Seg::Field(name.clone()));
            match (properties.and_then(|p| p.get(name)), additional) {
                (Some(s), _) => self.walk(x, s),
                (None, Some(s)) if s.is_object() => self.walk(x, s),
                // Free-form: no properties and nothing said about others.
                (None, None) if properties.is_none() => {}
                (None, _) => {
                    let names = properties
                        .into_iter()
                        .flat_map(|p| p.keys().map(String::as_str));
                    let help = envc_lang::did_you_mean(name, names).or_else(|| {
                        properties.map(|p| {
                            let all: Vec<&str> = p.keys().map(String::as_str).collect();
                            format!("its fields are: {}", all.join(", "))
                        })
                    });
                    self.problem(
                        ProblemKind::UnknownField,
                        format!("unknown field `{name}`"),
                        help,
                    );
                }
            }
            self.path.pop();
        }
        for required in schema
            .get("required")
            .and_then(Json::as_array)
            .into_iter()
            .flatten()
            .filter_map(Json::as_str)
        {
            if !fields.contains_key(required) {
                let what = match self.path.last() {
                    Some(Seg::Field(f)) => format!("`{f}`"),
                    Some(Seg::Index(i)) => format!("item {i}"),
                    None => "the object".to_string(),
                };
                self.problem(
                    ProblemKind::MissingField,
                    format!("{what} needs `{required}`"),
                    Some(format!("add `{required} = …`")),
                );
            }
        }
    }

    fn wrong_type(&mut self, expected: &str, value: &Json) {
        let found = match value {
            Json::Null => "nothing",
            Json::Bool(_) => "a bool",
            Json::Number(n) if n.is_i64() || n.is_u64() => "an int",
            Json::Number(_) => "a number",
            Json::String(_) => "a string",
            Json::Array(_) => "a list",
            Json::Object(_) => "a record",
        };
        self.problem(
            ProblemKind::WrongType,
            format!("expected {expected}, found {found}"),
            None,
        );
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// Each problem as `path: message (help)`.
    fn check(object: Json, expected: &[&str]) {
        let got: Vec<String> = validate(&object)
            .iter()
            .map(|p| {
                let at = match p.path_text() {
                    t if t.is_empty() => String::new(),
                    t => format!("{t}: "),
                };
                match &p.help {
                    Some(h) => format!("{at}{} ({h})", p.message),
                    None => format!("{at}{}", p.message),
                }
            })
            .collect();
        assert_eq!(got, expected, "{object}");
    }

    fn deployment(spec: Json) -> Json {
        json!({ "apiVersion": "apps/v1", "kind": "Deployment", "metadata": { "name": "web" }, "spec": spec })
    }

    #[test]
    fn a_valid_deployment_has_no_problems() {
        check(
            deployment(json!({
                "replicas": 2,
                "selector": { "matchLabels": { "app": "web" } },
                "template": {
                    "metadata": { "labels": { "app": "web" } },
                    "spec": { "containers": [{ "name": "web", "image": "nginx:1.27", "ports": [{ "containerPort": 80 }] }] },
                },
            })),
            &[],
        );
    }

    #[test]
    fn problems_name_the_field() {
        check(
            deployment(json!({
                "replica": 2,
                "selector": { "matchLabels": { "app": 3 } },
                "template": { "spec": { "containers": [{ "image": "nginx", "ports": [{ "containerPort": "80" }] }] } },
            })),
            &[
                "spec.replica: unknown field `replica` (did you mean `replicas`?)",
                "spec.selector.matchLabels.app: expected a string, found an int",
                "spec.template.spec.containers[0].ports[0].containerPort: expected an int, found a string",
                "spec.template.spec.containers[0]: item 0 needs `name` (add `name = …`)",
            ],
        );
        check(deployment(json!({ "selector": {}, "template": {} })), &[]);
        check(
            json!({ "apiVersion": "apps/v1", "kind": "Deployment", "metadata": { "name": "web" } }),
            &["the object needs `spec` (add `spec = …`)"],
        );
    }

    #[test]
    fn int_or_string_and_deferred_values() {
        let svc = |port: Json, target: Json| {
            json!({ "apiVersion": "v1", "kind": "Service", "metadata": { "name": "web" },
                    "spec": { "ports": [{ "port": port, "targetPort": target }] } })
        };
        check(svc(json!(80), json!("http")), &[]);
        check(svc(json!(80), json!(8080)), &[]);
        check(
            svc(json!(DEFERRED), json!(true)),
            &["spec.ports[0].targetPort: expected an int or a string, found a bool"],
        );
        check(
            json!({ "apiVersion": "v1", "kind": "ConfigMap", "metadata": { "name": "c" }, "data": { "db": DEFERRED } }),
            &[],
        );
    }

    #[test]
    fn kinds_and_custom_resources() {
        check(
            json!({ "apiVersion": "apps/v1", "kind": "Deploymnet", "metadata": { "name": "web" } }),
            &["kind: `apps/v1` has no kind `Deploymnet` (did you mean `Deployment`?)"],
        );
        check(
            json!({ "apiVersion": "v1", "kind": "Deployment", "metadata": { "name": "web" } }),
            &["apiVersion: `Deployment` is in `apps/v1`, not `v1` (apiVersion = \"apps/v1\")"],
        );
        check(
            json!({ "apiVersion": "cert-manager.io/v1", "kind": "Certificate", "metadata": { "name": "web" }, "spec": { "anything": 1 } }),
            &[],
        );
        let ns = find("v1", "Namespace").unwrap();
        assert!(!ns.namespaced);
        assert!(find("apps/v1", "Deployment").unwrap().namespaced);
    }
}
