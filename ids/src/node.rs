//! Node kinds, and the key a node is known by in the state: `target/kind:name`.

use std::fmt;
use std::str::FromStr;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum NodeKind {
    Vm,
    Host,
    Package,
    File,
    Service,
    Manifest,
    Image,
    Exec,
    Gitops,
    /// Another environment's recorded outputs (`stack("core.env")`): read, never changed.
    Stack,
    /// A resource of a Terraform/OpenTofu provider (`resource(type = "local_file", …)`).
    Resource,
}

impl NodeKind {
    pub const ALL: [NodeKind; 11] = [
        NodeKind::Vm,
        NodeKind::Host,
        NodeKind::Package,
        NodeKind::File,
        NodeKind::Service,
        NodeKind::Manifest,
        NodeKind::Image,
        NodeKind::Exec,
        NodeKind::Gitops,
        NodeKind::Stack,
        NodeKind::Resource,
    ];

    pub fn name(self) -> &'static str {
        match self {
            NodeKind::Vm => "vm",
            NodeKind::Host => "host",
            NodeKind::Package => "package",
            NodeKind::File => "file",
            NodeKind::Service => "service",
            NodeKind::Manifest => "manifest",
            NodeKind::Image => "image",
            NodeKind::Exec => "exec",
            NodeKind::Gitops => "gitops",
            NodeKind::Stack => "stack",
            NodeKind::Resource => "resource",
        }
    }

    pub fn from_name(s: &str) -> Option<NodeKind> {
        NodeKind::ALL.into_iter().find(|k| k.name() == s)
    }

    /// Machines that other nodes are deployed onto.
    pub fn is_target(self) -> bool {
        matches!(self, NodeKind::Vm | NodeKind::Host)
    }
}

impl fmt::Display for NodeKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A node's key in the state and in every record: `kind:name`, or `target/kind:name` for a
/// node deployed onto a machine or a repository. Target names (machines, repositories)
/// hold no `/` or `:` (the compiler checks them), and kind names neither, so the first `:`
/// ends the kind whatever the name holds (`fleet/manifest:shop/ConfigMap/web`).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NodeKey {
    pub target: Option<String>,
    pub kind: NodeKind,
    pub name: String,
}

impl NodeKey {
    pub fn new(kind: NodeKind, name: &str, target: Option<&str>) -> NodeKey {
        NodeKey {
            target: target.map(str::to_string),
            kind,
            name: name.to_string(),
        }
    }
}

impl fmt::Display for NodeKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(t) = &self.target {
            write!(f, "{t}/")?;
        }
        write!(f, "{}:{}", self.kind.name(), self.name)
    }
}

/// A string that is not a node key, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BadNodeKey(pub String);

impl fmt::Display for BadNodeKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "`{}` is not a node key (`kind:name` or `target/kind:name`)",
            self.0
        )
    }
}

impl std::error::Error for BadNodeKey {}

impl FromStr for NodeKey {
    type Err = BadNodeKey;

    fn from_str(s: &str) -> Result<NodeKey, BadNodeKey> {
        let bad = || BadNodeKey(s.to_string());
        let (head, name) = s.split_once(':').ok_or_else(bad)?;
        let (target, kind) = match head.split_once('/') {
            Some((t, k)) if !t.is_empty() => (Some(t), k),
            Some(_) => return Err(bad()),
            None => (None, head),
        };
        let kind = NodeKind::from_name(kind).ok_or_else(bad)?;
        if name.is_empty() {
            return Err(bad());
        }
        Ok(NodeKey::new(kind, name, target))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn check(text: &str, expected: Option<(Option<&str>, NodeKind, &str)>) {
        let parsed = text.parse::<NodeKey>().ok();
        assert_eq!(
            parsed,
            expected.map(|(t, k, n)| NodeKey::new(k, n, t)),
            "{text}"
        );
        if let Some(key) = parsed {
            assert_eq!(key.to_string(), text, "round trip");
        }
    }

    #[test]
    fn keys_parse_and_print_alike() {
        check("host:web", Some((None, NodeKind::Host, "web")));
        check(
            "db-0/file:/etc/db/peers",
            Some((Some("db-0"), NodeKind::File, "/etc/db/peers")),
        );
        check(
            "fleet/manifest:shop/ConfigMap/web",
            Some((Some("fleet"), NodeKind::Manifest, "shop/ConfigMap/web")),
        );
        check(
            "manifest:shop/ConfigMap/web",
            Some((None, NodeKind::Manifest, "shop/ConfigMap/web")),
        );
        check("h/exec:a:b", Some((Some("h"), NodeKind::Exec, "a:b")));
        check("web", None);
        check("h/nokind:x", None);
        check("/file:x", None);
        check("file:", None);
        for kind in NodeKind::ALL {
            assert_eq!(NodeKind::from_name(&kind.to_string()), Some(kind));
        }
    }
}
