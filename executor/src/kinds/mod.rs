//! The node kinds: one module each, holding everything the executor does for a node of
//! that kind (its remote operations beside it), behind the contract in `node_type.rs`.
//! Adding a kind is its module and its line in [`of`].

pub mod exec;
pub mod file;
pub mod gitops;
pub mod host;
pub mod image;
pub mod manifest;
pub mod node_type;
pub mod package;
pub mod service;
pub mod stack;
pub mod vm;

use envc_ids::NodeKind;

/// What the executor does for nodes of `kind`.
pub fn of(kind: NodeKind) -> &'static dyn node_type::NodeType {
    match kind {
        NodeKind::Vm => &vm::Vm,
        NodeKind::Host => &host::Host,
        NodeKind::Package => &package::Package,
        NodeKind::File => &file::File,
        NodeKind::Service => &service::Service,
        NodeKind::Manifest => &manifest::Manifest,
        NodeKind::Image => &image::Image,
        NodeKind::Exec => &exec::Exec,
        NodeKind::Gitops => &gitops::Gitops,
        NodeKind::Stack => &stack::Stack,
    }
}

/// Every kind's type, in the order removals from a target run (see
/// `NodeType::removal_rank`).
pub fn by_removal_rank() -> Vec<&'static dyn node_type::NodeType> {
    let mut all: Vec<&'static dyn node_type::NodeType> = NodeKind::ALL
        .into_iter()
        .map(of)
        .filter(|t| t.removal_rank().is_some())
        .collect();
    all.sort_by_key(|t| t.removal_rank());
    all
}
