//! `vm` nodes: a machine made by a provider (`provider.rs`), which other nodes are
//! deployed onto: QEMU's (`qemu.rs`) from an image node's disk and kernel, or a cloud's
//! (`ec2/`) when the node says `cloud`.

pub mod ec2;
pub mod lock;
pub mod login;
pub mod machines;
pub mod provider;
pub mod qemu;
pub mod qemu_adopt;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use envc_ids::fact::image as image_fact;
use envc_ids::NodeKind;
use serde_json::json;

use crate::connect::{vm_host, Connections};
use crate::error::StepError;
use crate::machines::Machines;
use crate::node_type::{
    Adopted, Adopting, BoxFuture, Launch, Launching, Local, LockNeeds, NodeType, Payload, Realize,
    Unit, UnitCx,
};
use crate::record::{Applied, DriftFacts, Facts, RealizationRecord};
use crate::spec::{AdoptSpec, NodeSpec, Val};
use crate::store::ObjectId;
use crate::substitute::{Resolution, Resolving};
use crate::tools::Tool;
use crate::transport::HostSpec;
use provider::{Realized, VmSpec};

/// The provider of type `P` among an environment's machines (`machines::machines` gives
/// every environment each of them).
pub fn provider<P: provider::VmProvider + 'static>(machines: &Machines) -> Result<&P, StepError> {
    machines.provider::<P>().ok_or_else(|| {
        StepError::new(format!(
            "internal error: this environment has no {} provider",
            std::any::type_name::<P>()
        ))
    })
}

pub struct Vm;

impl NodeType for Vm {
    fn kind(&self) -> NodeKind {
        NodeKind::Vm
    }

    fn boots(&self) -> bool {
        true
    }

    fn lock_needs(&self, node: &NodeSpec, cx: &mut LockNeeds<'_>) {
        lock::lock_needs(node, cx)
    }

    fn reach_record(
        &self,
        name: &str,
        record: &RealizationRecord,
        cx: &Connections,
    ) -> Option<HostSpec> {
        vm_host(name, &record.facts, cx.vm_identity.clone()?)
    }

    fn identity_facts(&self) -> &'static [&'static str] {
        use envc_ids::fact::machine::{
            DIR, FINGERPRINT, HOST_KEY, INSTANCE_ID, PORT, PUBLIC_ADDRESS, SSH_ADDRESS,
        };
        &[
            SSH_ADDRESS,
            PORT,
            HOST_KEY,
            FINGERPRINT,
            DIR,
            INSTANCE_ID,
            PUBLIC_ADDRESS,
        ]
    }

    fn resolve(&self, r: &mut Resolving<'_>) -> Result<Payload, Resolution> {
        let node = r.node;
        if let Some(Val::Record(cloud)) = r.attrs.get("cloud") {
            let cloud = cloud.clone();
            return ec2::resolve::resolve(r, &cloud);
        }
        let Some(Val::Node(image)) = r.attrs.get("image") else {
            return Err(r.fail("`image` is not an image node"));
        };
        let image_facts = &r.known(*image)?.facts;
        let object = |fact: &str| {
            image_facts
                .get(fact)
                .and_then(|h| ObjectId::parse(h))
                .ok_or_else(|| r.fail(&format!("its image reported no `{fact}`")))
        };
        let int = |k: &str| match r.attrs.get(k) {
            Some(Val::Int(n)) => u64::try_from(*n).unwrap_or(1),
            Some(Val::Size(n)) => *n,
            _ => 0,
        };
        if r.text("user") != "root" {
            return Err(r.fail(
                "the qemu provider logs in as root only (its key is given to root at boot); drop `user` or set it to \"root\"",
            ));
        }
        let vm = VmSpec {
            name: node.name.clone(),
            cpus: u32::try_from(int("cpus")).unwrap_or(1),
            memory_mib: int("memory") >> 20,
            disk_bytes: int("disk"),
            user: r.text("user"),
            disk_image: object(image_fact::DISK)?,
            kernel: object(image_fact::KERNEL)?,
            lan_rank: {
                // The lab's stand-ins for hosts after the environment's own VMs: those
                // keep production's addresses.
                let mut names: Vec<(bool, &str)> = (r.spec.nodes.iter())
                    .filter(|n| n.kind == NodeKind::Vm && n.attr("cloud").is_none())
                    .map(|n| (n.stands_in, n.name.as_str()))
                    .collect();
                names.sort_unstable();
                let rank = names.iter().position(|(_, n)| *n == node.name).unwrap_or(0);
                u8::try_from(rank).unwrap_or(u8::MAX)
            },
        };
        let memory = int("memory");
        r.put_given("image");
        r.put("cpus", json!(vm.cpus));
        r.put("memory", json!({ "size": memory }));
        r.put("disk", json!({ "size": vm.disk_bytes }));
        r.put("user", json!(vm.user));
        Ok(Arc::new(vm))
    }

    fn tools(&self) -> &'static [Tool] {
        qemu::TOOLS
    }

    fn tools_for(&self, node: &NodeSpec) -> &'static [Tool] {
        match node.attr("cloud") {
            Some(_) => ec2::TOOLS,
            None => qemu::TOOLS,
        }
    }

    /// A new machine, unless only what its provider changes in place changed (a cloud
    /// machine's type: stopped, resized, started, the same machine).
    fn replaced_by(
        &self,
        old: &BTreeMap<String, String>,
        new: Option<&BTreeMap<String, String>>,
    ) -> bool {
        let Some(new) = new else { return true };
        if !new.get("provider").is_some_and(|p| p.contains(ec2::NAME)) {
            return true;
        }
        let mut changed = (old.keys().chain(new.keys())).filter(|k| old.get(*k) != new.get(*k));
        let first = changed.next();
        first.is_none()
            || !first
                .into_iter()
                .chain(changed)
                .all(|k| k == "instance_type")
    }

    fn update_note(
        &self,
        old: &BTreeMap<String, String>,
        new: &BTreeMap<String, String>,
    ) -> Option<&'static str> {
        (old.get("instance_type") != new.get("instance_type")).then_some(
            "the machine restarts: stopped, resized and started (the same machine: nothing on it runs again)",
        )
    }

    fn takes_along(&self) -> Option<&'static str> {
        Some("removed with its VM")
    }

    fn local_drift(&self, record: &RealizationRecord, cx: &Local<'_>) -> Option<DriftFacts> {
        let running = cx.machines.of(&record.facts)?.is_running(&record.facts);
        (!running).then(|| vec![("running".into(), "yes".into(), "no".into())])
    }

    fn remote_drift<'a>(
        &'a self,
        record: &'a RealizationRecord,
        machines: &'a Machines,
    ) -> Option<BoxFuture<'a, Result<DriftFacts, StepError>>> {
        machines.of(&record.facts)?.look(&record.facts)
    }

    /// The provider that made it follows the rename (`VmProvider::moved`).
    fn moved(
        &self,
        machines: &Machines,
        record: &RealizationRecord,
        name: &str,
    ) -> Result<Facts, StepError> {
        match machines.of(&record.facts) {
            Some(p) => p.moved(&record.facts, name),
            None => Ok(record.facts.clone()),
        }
    }

    fn retire<'a>(
        &'a self,
        machines: &'a Machines,
        record: &'a RealizationRecord,
    ) -> Option<BoxFuture<'a, Result<String, StepError>>> {
        Some(Box::pin(async move {
            let provider = machines.of(&record.facts).ok_or_else(|| {
                StepError::new(format!(
                    "`{}` was made by provider `{}`, which this envc does not know",
                    record.node,
                    record
                        .facts
                        .get(provider::PROVIDER)
                        .map_or("", String::as_str)
                ))
            })?;
            provider
                .destroy(&record.facts)
                .await
                .map(|()| provider.destroyed().to_string())
        }))
    }

    fn release<'a>(
        &'a self,
        machines: &'a Machines,
        record: &'a RealizationRecord,
    ) -> Option<BoxFuture<'a, Result<String, StepError>>> {
        // Adopted: it stays as it was found, running; only envc's hold on it goes.
        Some(Box::pin(async move {
            match machines.of(&record.facts) {
                Some(p) => p.release(&record.facts).await,
                None => Ok("left as it was found: adopted".into()),
            }
        }))
    }

    fn sweep<'a>(
        &'a self,
        machines: &'a Machines,
        recorded: &'a BTreeSet<String>,
    ) -> Option<BoxFuture<'a, Result<(), StepError>>> {
        Some(Box::pin(machines.sweep(recorded)))
    }
}

impl Realize for VmSpec {
    fn reach(&self, name: &str, facts: Option<&Facts>, cx: &Connections) -> Option<HostSpec> {
        vm_host(name, facts?, cx.vm_identity.clone()?)
    }

    fn find_adopted<'a>(
        &'a self,
        from: &'a BTreeMap<String, String>,
        cx: Adopting<'a>,
    ) -> Option<BoxFuture<'a, Result<Adopted, StepError>>> {
        Some(Box::pin(async move {
            let found = provider::<qemu::Qemu>(cx.machines)?
                .find_adopted(self, from, cx.ssh, cx.take)
                .await?;
            let (facts, transport, host_key) = found.realized;
            Ok(Adopted {
                how: format!(
                    "QEMU pid {}, ssh on 127.0.0.1:{}, host key {}",
                    found.pid,
                    facts.get(qemu::fact::PORT).map_or("", String::as_str),
                    host_key.fingerprint
                ),
                facts,
                transport,
                host_key,
                differences: found.differences,
            })
        }))
    }

    fn launch(&self, cx: &Launching<'_>) -> Launch {
        if let Some(line) = cx.adopt {
            return Launch::Alone(Box::new(TakeOver {
                key: cx.spec.key.clone(),
                payload: Arc::new(self.clone()),
                line: line.clone(),
                tags: cx.spec.tags.clone(),
            }));
        }
        Launch::Alone(Box::new(Make {
            key: cx.spec.key.clone(),
            spec: self.clone(),
            // The same VM found stopped starts again from its disk; a changed one is
            // replaced.
            restart: cx.record.is_some_and(|p| &p.resolved_hash == cx.hash),
            previous: cx.record.map(|p| p.facts.clone()),
        }))
    }
}

/// Make a VM run: create it, start it again from its disk (`previous` and `restart`), or
/// replace it (`previous`, not `restart`); then connect to it.
struct Make {
    key: String,
    spec: VmSpec,
    previous: Option<Facts>,
    restart: bool,
}

impl Unit for Make {
    fn run<'a>(self: Box<Self>, cx: UnitCx<'a>) -> BoxFuture<'a, Result<Applied, StepError>> {
        Box::pin(async move {
            let (facts, transport, host_key) = provider::<qemu::Qemu>(cx.machines)?
                .realize(
                    &self.spec,
                    self.previous.as_ref(),
                    self.restart,
                    &cx.conns.ssh,
                )
                .await?;
            Ok(made(&cx, &self.key, (facts, transport, host_key)))
        })
    }
}

/// Take over machine `key`, made outside envc, where its `adopt` line says: nothing on it
/// changes, it is not rebooted; its connection is kept for what is deployed onto it.
pub struct TakeOver {
    pub key: String,
    pub payload: Payload,
    pub line: AdoptSpec,
    pub tags: BTreeMap<String, String>,
}

impl Unit for TakeOver {
    fn run<'a>(self: Box<Self>, cx: UnitCx<'a>) -> BoxFuture<'a, Result<Applied, StepError>> {
        Box::pin(async move {
            let adopting = Adopting {
                machines: cx.machines,
                ssh: &cx.conns.ssh,
                tags: &self.tags,
                take: true,
            };
            let found = self
                .payload
                .find_adopted(&self.line.from, adopting)
                .ok_or_else(|| StepError::new(format!("`{}` cannot be adopted", self.key)))?
                .await
                .map_err(|e| StepError {
                    cause: format!(
                        "`{}` is adopted (line {}), but it was not found: {}",
                        self.key, self.line.location, e.cause
                    ),
                    hint: e.hint,
                })?;
            let mut note = format!("adopted as found running ({}): nothing rebooted", found.how);
            if !found.differences.is_empty() {
                let d: Vec<String> = (found.differences.iter())
                    .map(|(what, want, seen)| format!("{what} {seen} (the source says {want})"))
                    .collect();
                note.push_str(&format!(
                    "; kept as it is, unlike the source: {}",
                    d.join(", ")
                ));
            }
            let mut applied = made(
                &cx,
                &self.key,
                (found.facts, found.transport, found.host_key),
            );
            applied.created = false;
            applied.note = Some(note);
            Ok(applied)
        })
    }
}

/// What making machine `key` did, whichever provider made it: the connection opened while
/// waiting for it kept for what is deployed onto it, and its facts recorded.
pub fn made(cx: &UnitCx<'_>, key: &str, (facts, transport, host_key): Realized) -> Applied {
    cx.conns.adopt(key, transport, host_key);
    Applied {
        facts,
        created: true,
        note: None,
        log: None,
    }
}
