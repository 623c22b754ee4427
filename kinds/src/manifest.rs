//! `manifest` nodes: a Kubernetes object, whole, deferred values substituted, committed to
//! the `gitops` repository that is its target (the scheduler gathers a repository's objects
//! into one commit) or written by `envc render`.

use std::sync::Arc;

use envc_ids::NodeKind;
use serde_json::{json, Value as Json};

use crate::node_type::{Launch, Launching, LockNeeds, NodeType, Payload, Realize};
use crate::spec::{NodeSpec, Val};
use crate::substitute::{content_display, k8s_json, Resolution, Resolving};
use crate::tools::{tool, Tool};

pub struct Manifest;

/// What delivering to a repository needs on this machine.
pub const GIT: &[Tool] = &[tool("git", Some("--version"), "git")];

impl NodeType for Manifest {
    fn kind(&self) -> NodeKind {
        NodeKind::Manifest
    }

    fn previewed(&self) -> bool {
        true
    }

    fn lock_needs(&self, _node: &NodeSpec, cx: &mut LockNeeds<'_>) {
        cx.tool(envc_lockfiles::probe::KUBERNETES);
    }

    fn resolve(&self, r: &mut Resolving<'_>) -> Result<Payload, Resolution> {
        let attrs = &r.attrs;
        let text = |k: &str| match attrs.get(k) {
            Some(Val::Str(s)) => s.clone(),
            _ => String::new(),
        };
        let json = |k: &str| attrs.get(k).map(k8s_json).unwrap_or(Json::Null);
        let name = envc_k8s::object_name(&r.node.name).to_string();
        let spec = ManifestSpec {
            api_version: text("api_version"),
            kind: text("kind"),
            namespace: text("namespace"),
            object: envc_k8s::object(
                &text("api_version"),
                &text("kind"),
                &name,
                &text("namespace"),
                json("labels"),
                json("annotations"),
                json("body"),
            ),
            name,
        };
        // The object is what is hashed and shown: its YAML, as it is written.
        let yaml = spec.yaml();
        r.hash_only(
            "object",
            json!(blake3::hash(yaml.as_bytes()).to_hex().as_str()),
        );
        r.show("object", content_display(yaml.as_bytes()));
        Ok(Arc::new(spec))
    }

    fn tools(&self) -> &'static [Tool] {
        GIT
    }
}

impl Realize for ManifestSpec {
    fn rendered(&self) -> Option<(String, String)> {
        Some((self.file_name(), self.yaml()))
    }

    fn not_run(&self, node: &NodeSpec) -> Option<String> {
        node.target.is_none().then(|| {
            "not delivered: it has no `target` (a `gitops` repository); `envc render FILE --out DIR` writes it".to_string()
        })
    }

    fn launch(&self, _cx: &Launching<'_>) -> Launch {
        Launch::Deliver {
            file: self.file_name(),
            yaml: self.yaml(),
        }
    }
}

#[derive(Clone, Debug)]
pub struct ManifestSpec {
    pub api_version: String,
    pub kind: String,
    pub name: String,
    /// Empty for a cluster-wide object.
    pub namespace: String,
    pub object: Json,
}

impl ManifestSpec {
    /// Its canonical YAML (`envc_k8s::yaml`).
    pub fn yaml(&self) -> String {
        envc_k8s::yaml::to_yaml(&self.object)
    }

    /// The file it is written to in a rendered directory or a GitOps repository.
    pub fn file_name(&self) -> String {
        envc_k8s::file_name(&self.kind, &self.name, &self.namespace)
    }
}

/// The file name and canonical YAML of a resolved node that is a manifest (`envc render`
/// writes them), `None` for any other kind.
pub fn rendered(payload: &Payload) -> Option<(String, String)> {
    payload.rendered()
}
