//! The machine providers of one environment, and the store they make machines from.
//! Adding a provider is its module and its line in [`Machines::providers`].

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use crate::error::StepError;
use crate::kinds::vm::provider::{VmProvider, PROVIDER};
use crate::kinds::vm::qemu::Qemu;
use crate::record::Facts;
use crate::store::Store;

pub struct Machines {
    store: Store,
    qemu: Qemu,
}

impl Machines {
    pub fn new(store: &Store, env: &str, boot_timeout: Duration) -> Machines {
        Machines {
            store: store.clone(),
            qemu: Qemu::new(store, env, boot_timeout),
        }
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    /// The private key envc logs in to its machines with.
    pub fn login_key(&self) -> &Path {
        &self.qemu.key
    }

    /// Every provider.
    pub fn providers(&self) -> [&dyn VmProvider; 1] {
        [&self.qemu]
    }

    /// The provider a `vm` node asks for (today every one is QEMU's).
    pub fn for_node(&self) -> &dyn VmProvider {
        &self.qemu
    }

    /// The provider that made the machine these facts describe.
    pub fn of(&self, facts: &Facts) -> Option<&dyn VmProvider> {
        let name = facts.get(PROVIDER).map_or("qemu", String::as_str);
        self.providers().into_iter().find(|p| p.name() == name)
    }

    /// Each provider's sweep: machines no record knows are destroyed, those in `keep` stay.
    pub async fn sweep(&self, keep: &BTreeSet<String>) -> Result<(), StepError> {
        for p in self.providers() {
            p.sweep(keep).await?;
        }
        Ok(())
    }
}
