//! QEMU's payload, and the provider contract as the VM kind's modules name it (it is the
//! contract's: `crate::machines`).

use serde::{Deserialize, Serialize};

pub use crate::machines::{Realized, VmProvider, PROVIDER};
use crate::store::ObjectId;

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
