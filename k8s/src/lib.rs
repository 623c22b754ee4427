//! Kubernetes objects for envc, pure: which kinds envc knows (`kinds`), the check of an
//! object against the API schema of the Kubernetes version this envc embeds (`validate`),
//! and the canonical YAML an object is written as (`yaml`).
//!
//! The schema is k8s-openapi's typed API for one Kubernetes version, turned into JSON
//! Schema by schemars: the same definitions `kubectl` validates against, without a cluster.

mod kinds;
pub mod selector;
mod validate;
pub mod yaml;

pub use kinds::{find, kinds, Kind};
pub use validate::{Problem, ProblemKind, Seg, DEFERRED};

/// The Kubernetes version whose API objects are validated against (k8s-openapi's
/// `v1_37`), as the lockfile pins it.
pub use envc_ids::KUBERNETES_VERSION;

use serde_json::{json, Map, Value as Json};

/// The problems of `object` against the API schema of its kind, then, once each field is
/// of its type (a selector of the wrong type is one problem, not two), what the API server
/// checks beyond the schema (`selector`: a workload must select its own pods).
pub fn validate(object: &Json) -> Vec<Problem> {
    let problems = validate::validate(object);
    match problems.is_empty() {
        true => selector::problems(object),
        false => problems,
    }
}

/// A size as Kubernetes writes a quantity: in the largest binary unit that divides it
/// (`512Mi`, `2Gi`), else in bytes.
pub fn quantity(bytes: u64) -> Json {
    for (unit, factor) in [
        ("Ei", 1u64 << 60),
        ("Pi", 1 << 50),
        ("Ti", 1 << 40),
        ("Gi", 1 << 30),
        ("Mi", 1 << 20),
        ("Ki", 1 << 10),
    ] {
        if bytes >= factor && bytes.is_multiple_of(factor) {
            return json!(format!("{}{unit}", bytes / factor));
        }
    }
    json!(bytes.to_string())
}

/// The whole object a `manifest` node stands for: `apiVersion`, `kind`, `metadata` (name,
/// namespace unless empty, labels and annotations unless empty), then the body's fields.
/// The body cannot set those three (the caller says so first: see `reserved`).
pub fn object(
    api_version: &str,
    kind: &str,
    name: &str,
    namespace: &str,
    labels: Json,
    annotations: Json,
    body: Json,
) -> Json {
    let mut metadata = Map::new();
    metadata.insert("name".into(), json!(name));
    if !namespace.is_empty() {
        metadata.insert("namespace".into(), json!(namespace));
    }
    for (k, v) in [("labels", labels), ("annotations", annotations)] {
        if v.as_object().is_some_and(|m| !m.is_empty()) {
            metadata.insert(k.into(), v);
        }
    }
    let mut out = Map::new();
    if let Json::Object(fields) = body {
        out.extend(fields);
    }
    out.insert("apiVersion".into(), json!(api_version));
    out.insert("kind".into(), json!(kind));
    out.insert("metadata".into(), Json::Object(metadata));
    Json::Object(out)
}

/// Fields a manifest's body may not hold: they are its own attributes.
pub const RESERVED: &[(&str, &str)] = &[
    ("apiVersion", "api_version"),
    ("kind", "kind"),
    ("metadata", "name, namespace, labels and annotations"),
];

/// A `manifest` node's name: `NAMESPACE/KIND/NAME`, or `KIND/NAME` for a cluster-wide
/// object, so that a Service and a Deployment may share a name.
pub fn node_name(kind: &str, name: &str, namespace: &str) -> String {
    if namespace.is_empty() {
        format!("{kind}/{name}")
    } else {
        format!("{namespace}/{kind}/{name}")
    }
}

/// The object's own name in a `manifest` node's name (no Kubernetes name holds a `/`).
pub fn object_name(node_name: &str) -> &str {
    node_name.rsplit('/').next().unwrap_or(node_name)
}

/// [`file_name`] of the object a `manifest` node named `node_name` ([`node_name`]) holds.
pub fn file_of_node(node_name: &str) -> String {
    let mut parts = node_name.rsplitn(3, '/');
    let name = parts.next().unwrap_or_default();
    let kind = parts.next().unwrap_or_default();
    file_name(kind, name, parts.next().unwrap_or_default())
}

/// The file an object is written to, in a rendered directory or a GitOps repository:
/// `NAMESPACE/kind-NAME.yaml` (the kind in lower case: `shop/deployment-web.yaml`), or
/// `_cluster/kind-NAME.yaml` for a cluster-wide object.
pub fn file_name(kind: &str, name: &str, namespace: &str) -> String {
    let dir = if namespace.is_empty() {
        "_cluster"
    } else {
        namespace
    };
    format!("{dir}/{}-{name}.yaml", kind.to_ascii_lowercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_nodes_file_is_its_objects() {
        for (kind, name, ns) in [("Deployment", "web", "shop"), ("Namespace", "shop", "")] {
            assert_eq!(
                file_of_node(&node_name(kind, name, ns)),
                file_name(kind, name, ns)
            );
        }
        assert_eq!(
            file_of_node("shop/Deployment/web"),
            "shop/deployment-web.yaml"
        );
        assert_eq!(
            file_of_node("ClusterRole/view"),
            "_cluster/clusterrole-view.yaml"
        );
    }
}
