//! Resolving one node: its attributes with deferred values substituted (`substitute.rs`),
//! its kind's typed payload (`kinds/`), its pins and checks, and the hash of all that: the
//! *resolved hash*, which with the target's identity decides whether the node has to run.

use std::collections::BTreeMap;

use envc_compiler::derivation::ENCODING_VERSION;
use envc_compiler::SourceLoader;
use envc_ids::ResolvedHash;
use serde_json::{json, Value as Json};

use crate::checks::{checks_hash, CheckSpec, Phase};
use crate::kinds;
use crate::kinds::node_type::Payload;
use crate::record::Facts;
use crate::spec::{CheckDecl, Spec};
use crate::substitute::{
    describe_decl, display, resolve_checks, Known, Resolution, Resolver, Resolving,
};
use crate::transport::HostSpec;

#[derive(Clone, Debug)]
pub struct Resolved {
    pub hash: ResolvedHash,
    /// The resolved attributes as people read them (see `RealizationRecord::attrs`).
    pub display: BTreeMap<String, String>,
    pub payload: Payload,
    /// Its checks with deferred values substituted, preconditions first; `Pending` while a
    /// node they read is not known yet (they are not part of `hash`).
    pub checks: Result<Vec<CheckSpec>, Resolution>,
}

impl Resolved {
    /// The hash of its postconditions, when they are resolved and it has any.
    pub fn checks_hash(&self) -> Option<String> {
        self.checks.as_ref().ok().and_then(|c| checks_hash(c))
    }

    /// Its resolved checks (none while they are pending).
    pub fn check_specs(&self) -> &[CheckSpec] {
        self.checks.as_deref().unwrap_or(&[])
    }

    /// How to reach the host, when this is a host node.
    pub fn host(&self) -> Option<&HostSpec> {
        self.payload.address()
    }

    /// The facts a successful realization will observe, when they can be known beforehand.
    pub fn predicted_facts(&self) -> Option<Facts> {
        self.payload.predicted_facts()
    }
}

/// Resolves node `i` of `spec`, given what is known of other nodes.
pub fn resolve<'a>(
    spec: &'a Spec,
    i: usize,
    known: &'a dyn Fn(usize) -> Option<&'a Known>,
    files: &'a dyn SourceLoader,
) -> Result<Resolved, Resolution> {
    resolve_with(
        Resolver::new(spec, known, crate::kinds::read_output),
        i,
        files,
    )
}

/// [`resolve`] for a preview: each deferred value not known yet is its placeholder
/// (`substitute::placeholder`), so the node resolves before its inputs are built. What it
/// gives is for people to read, never to realize.
pub fn preview<'a>(
    spec: &'a Spec,
    i: usize,
    known: &'a dyn Fn(usize) -> Option<&'a Known>,
    files: &'a dyn SourceLoader,
) -> Result<Resolved, Resolution> {
    resolve_with(
        Resolver::previewing(spec, known, crate::kinds::read_output),
        i,
        files,
    )
}

/// [`resolve`] as before the `moved` declarations: the moved nodes under their old names
/// and keys, so that a renamed node that is otherwise what its record describes hashes as
/// its record does (`plan::assess`).
pub fn resolve_as_before<'a>(
    spec: &'a Spec,
    i: usize,
    known: &'a dyn Fn(usize) -> Option<&'a Known>,
    files: &'a dyn SourceLoader,
) -> Result<Resolved, Resolution> {
    let mut resolver = Resolver::new(spec, known, crate::kinds::read_output);
    resolver.as_before = true;
    resolve_with(resolver, i, files)
}

fn resolve_with<'a>(
    resolver: Resolver<'a>,
    i: usize,
    files: &'a dyn SourceLoader,
) -> Result<Resolved, Resolution> {
    let spec = resolver.spec();
    let node = &spec.nodes[i];
    let hashed_name = match spec.moved.get(&i) {
        Some(m) if resolver.as_before => m.name.as_str(),
        _ => node.name.as_str(),
    };
    let mut attrs: BTreeMap<String, crate::spec::Val> = BTreeMap::new();
    for (k, v) in &node.attrs {
        attrs.insert(k.clone(), resolver.substitute(v)?);
    }
    let mut r = Resolving::new(resolver, node, attrs, files);
    r.put_given("after");
    let payload = kinds::of(node.kind).resolve(&mut r)?;
    if !node.pins.is_empty() {
        // Pins are inputs: a moved pin is a change, shown per pin.
        for (k, v) in &node.pins {
            r.put(&format!("pin {k}"), json!(v));
        }
    }
    // Checks are shown (a plan says when they changed) but not hashed: they do not change
    // what is on the target.
    let checks = resolve_checks(node, r.resolver());
    if let Err(Resolution::Failed(m)) = checks {
        return Err(Resolution::Failed(m));
    }
    for phase in [Phase::Require, Phase::Expect] {
        let of_phase: Vec<&CheckDecl> = node.checks.iter().filter(|c| c.phase == phase).collect();
        if !of_phase.is_empty() {
            let described: Vec<String> = match &checks {
                Ok(cs) => cs
                    .iter()
                    .filter(|c| c.phase == phase)
                    .map(CheckSpec::describe)
                    .collect(),
                Err(_) => of_phase.iter().map(|c| describe_decl(spec, c)).collect(),
            };
            r.show(phase.name(), display(&json!(described)));
        }
    }
    let canonical = Json::Object(std::mem::take(&mut r.hashed).into_iter().collect());
    let mut h = blake3::Hasher::new();
    h.update(b"envc-resolved\0");
    h.update(&ENCODING_VERSION.to_le_bytes());
    h.update(node.kind.name().as_bytes());
    h.update(b"\0");
    h.update(hashed_name.as_bytes());
    h.update(b"\0");
    h.update(canonical.to_string().as_bytes());
    Ok(Resolved {
        hash: ResolvedHash(h.finalize().to_hex().to_string()),
        display: std::mem::take(&mut r.shown),
        payload,
        checks,
    })
}
