//! The contract a `vm` provider meets: QEMU on this machine (`qemu.rs`), EC2 (`ec2/`).
//! A provider makes a machine run from its own resolved payload (QEMU's [`VmSpec`], EC2's
//! `Ec2Machine`: what a machine is differs by provider, so each has its type and its
//! `Realize`) and reports its facts — at least `address`, `public_address`, `instance_id`,
//! `port`, `ssh_address`, `user`, `host_key` and `fingerprint` (the target identity), named
//! by `envc_ids::fact::machine` — with an open transport to it. Through this trait, given
//! only a record's facts, it says whether the machine still runs (locally, for free), what
//! its cloud says differs (`look`, for drift and `--refresh`), destroys it, and sweeps what
//! it made that no record knows. A new provider is its module, its payload (chosen in
//! `vm/mod.rs`'s `resolve` by the node's `cloud.provider`) and its line in
//! `Machines::providers`.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use crate::error::StepError;
use crate::future::BoxFuture;
use crate::record::{DriftFacts, Facts};
use crate::store::ObjectId;
use crate::tools::Tool;
use crate::transport::{HostKey, Transport};

/// The fact that names the provider of a machine; a record without it is QEMU's (every
/// record made before there was a choice).
pub const PROVIDER: &str = "provider";

/// What a VM is made from. Its size and image enter its resolved hash, and a change of
/// them replaces the VM; `lan_rank` only picks its address.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct VmSpec {
    pub name: String,
    pub cpus: u32,
    pub memory_mib: u64,
    pub disk_bytes: u64,
    pub user: String,
    /// The image's disk and kernel: objects of the store.
    pub disk_image: ObjectId,
    pub kernel: ObjectId,
    /// The VM's place among the environment's VMs (by name): it gets the private address
    /// `10.89.0.(10 + lan_rank)` when that is free, so that the same environment gets the
    /// same addresses, and so the same files, however its VMs race to boot.
    pub lan_rank: u8,
}

/// A machine made, what it reports, and a transport open to it.
pub type Realized = (Facts, Transport, HostKey);

pub trait VmProvider: Send + Sync {
    /// Its name, as a machine's `provider` fact holds it.
    fn name(&self) -> &'static str;

    /// The programs this machine runs for it.
    fn tools(&self) -> &'static [Tool];

    /// Whether the machine these facts describe still runs, as far as this machine can
    /// tell without asking anyone (a cloud's cannot: true).
    fn is_running(&self, facts: &Facts) -> bool;

    /// What the provider's API says differs from the record (`None`: nothing to ask
    /// beyond `is_running`).
    fn look<'a>(
        &'a self,
        _facts: &'a Facts,
    ) -> Option<BoxFuture<'a, Result<DriftFacts, StepError>>> {
        None
    }

    /// The machine's node was renamed to `name` (a `moved` declaration): what the provider
    /// keeps of it by name follows, and the machine goes on running untouched. The facts
    /// to record under the new name.
    fn moved(&self, facts: &Facts, _name: &str) -> Result<Facts, StepError> {
        Ok(facts.clone())
    }

    /// An adopted machine leaves envc (its node left the source, or `destroy` without
    /// `--adopted`): what envc keeps of it goes, the machine stays as it was found. What is
    /// said of it.
    fn release<'a>(&'a self, _facts: &'a Facts) -> BoxFuture<'a, Result<String, StepError>> {
        Box::pin(async {
            Ok("left as it was found: adopted (`destroy --adopted` removes it)".to_string())
        })
    }

    /// Stops the machine and deletes its disk.
    fn destroy<'a>(&'a self, facts: &'a Facts) -> BoxFuture<'a, Result<(), StepError>>;

    /// What is said of a machine once destroyed.
    fn destroyed(&self) -> &'static str;

    /// Destroys what it made for this environment that no record knows (a failed
    /// creation), keeping the machines named in `keep`.
    fn sweep<'a>(&'a self, keep: &'a BTreeSet<String>) -> BoxFuture<'a, Result<(), StepError>>;
}
