//! The contract a `vm` provider meets: QEMU on this machine today (`qemu.rs`), a cloud
//! next. A provider makes a machine run from a [`VmSpec`] and reports its facts — at least
//! `address`, `port`, `ssh_address`, `user`, `host_key` and `fingerprint` (the target
//! identity), named by `envc_ids::fact::machine` — with an open transport to it; it says
//! whether a recorded machine still runs, destroys one, and sweeps what it made that no
//! record knows.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use crate::error::StepError;
use crate::future::BoxFuture;
use crate::record::Facts;
use crate::store::ObjectId;
use crate::tools::Tool;
use crate::transport::{HostKey, SshOptions, Transport};

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

    /// Makes the machine run. `previous` are the facts of the machine this node had: with
    /// `restart` (its spec is unchanged) it starts again from its disk where it can;
    /// otherwise it is destroyed and a new one made.
    fn realize<'a>(
        &'a self,
        spec: &'a VmSpec,
        previous: Option<&'a Facts>,
        restart: bool,
        ssh: &'a SshOptions,
    ) -> BoxFuture<'a, Result<Realized, StepError>>;

    /// Whether the machine these facts describe still runs.
    fn is_running(&self, facts: &Facts) -> bool;

    /// Stops the machine and deletes its disk.
    fn destroy<'a>(&'a self, facts: &'a Facts) -> BoxFuture<'a, Result<(), StepError>>;

    /// Destroys what it made for this environment that no record knows (a failed
    /// creation), keeping the machines named in `keep`.
    fn sweep<'a>(&'a self, keep: &'a BTreeSet<String>) -> BoxFuture<'a, Result<(), StepError>>;
}
