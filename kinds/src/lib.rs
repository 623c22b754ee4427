//! The node kinds: one module each, holding everything the executor does for a node of
//! that kind (its remote operations beside it), behind the contract
//! (`envc_contract::node_type`). Adding a kind is its module and its line in [`of`].
//!
//! Above the contract and below the engine: Cargo keeps a kind from reaching into the
//! scheduler, plans or sessions, and the contract from naming a kind.

// The contract's and the store's modules under the names the kinds' modules use.
pub use envc_contract::node_type;
// (`crate::stack` is the stack kind; what it reads is `envc_contract::stack`.)
pub(crate) use envc_contract::{
    cache, connect, debs, error, future, kustomize, machines, script, spec, substitute, tools,
    transport,
};
pub(crate) use envc_store::{names, record, store};

pub mod exec;
pub mod file;
pub mod gitops;
pub mod host;
pub mod image;
pub mod manifest;
pub mod package;
pub mod resource;
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
        NodeKind::Resource => &resource::Resource,
    }
}

/// How the target of `record` is reached, by its kind (`connect::ReachRecord`).
pub fn reach_record(
    name: &str,
    record: &crate::record::RealizationRecord,
    cx: &crate::connect::Connections,
) -> Option<crate::transport::HostSpec> {
    let key = crate::spec::targetless(&record.node)?;
    of(key.kind).reach_record(name, record, cx)
}

/// Output `output` of `producer`, read by its kind (`substitute::ReadOutput`).
pub fn read_output(
    producer: &crate::spec::NodeSpec,
    output: &str,
    facts: &crate::record::Facts,
) -> Result<crate::spec::Val, crate::substitute::Resolution> {
    of(producer.kind).read_output(producer, output, facts)
}

/// The clouds whose machine images `envc lock` resolves and checks, as this process's
/// environment reaches them.
pub fn cloud_images() -> Box<dyn envc_lockfiles::CloudImages> {
    vm::ec2::images::clouds()
}

/// The objects the record of node `key` names, by its kind (none for a kind that builds
/// nothing a cache holds).
pub fn cached_objects(key: &str, facts: &crate::record::Facts) -> Vec<crate::store::ObjectId> {
    crate::spec::targetless(key)
        .and_then(|k| of(k.kind).cached())
        .map_or_else(Vec::new, |c| c.objects(facts))
}

/// Every kind's type.
pub fn all() -> impl Iterator<Item = &'static dyn node_type::NodeType> {
    NodeKind::ALL.into_iter().map(of)
}

/// The kinds removed from a target, each with how, in the order removals run (see
/// `Removable::removal_rank`).
pub fn by_removal_rank() -> Vec<(NodeKind, &'static dyn node_type::Removable)> {
    let mut ranked: Vec<_> = all()
        .filter_map(|t| Some((t.kind(), t.removable()?)))
        .collect();
    ranked.sort_by_key(|(_, r)| r.removal_rank());
    ranked
}

#[cfg(test)]
mod tests {
    /// The scheduler runs the kinds' operations as tasks on a multi-threaded runtime: this
    /// only has to compile.
    #[allow(dead_code)]
    fn operations_are_send(
        t: &crate::transport::Transport,
        store: &crate::store::Store,
        service: &super::service::remote::ServiceSpec,
    ) {
        fn send<T: Send>(_: T) {}
        send(super::file::remote::apply_files(t, &[]));
        send(super::package::remote::install_packages(
            t,
            store,
            &[],
            None,
        ));
        send(super::service::remote::apply_service(t, service));
    }
}
