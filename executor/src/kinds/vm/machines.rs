//! The machine providers of one environment, the store they make machines from, and the key
//! envc logs in to all of them with. Adding a provider is its module and its line in
//! [`Machines::providers`].

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use crate::error::StepError;
use crate::kinds::vm::ec2::Ec2;
use crate::kinds::vm::login::LoginKey;
use crate::kinds::vm::provider::{VmProvider, PROVIDER};
use crate::kinds::vm::qemu::Qemu;
use crate::record::Facts;
use crate::store::Store;

pub struct Machines {
    store: Store,
    key: Arc<LoginKey>,
    qemu: Qemu,
    ec2: Ec2,
}

impl Machines {
    pub fn new(store: &Store, env: &str, boot_timeout: Duration) -> Machines {
        let dir = store.root().join("machines");
        let key = Arc::new(LoginKey::new(&dir));
        Machines {
            store: store.clone(),
            qemu: Qemu::new(store, env, key.clone(), boot_timeout),
            ec2: Ec2::new(&dir, env, key.clone(), boot_timeout),
            key,
        }
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    /// The private key envc logs in to its machines with.
    pub fn login_key(&self) -> &Path {
        &self.key.path
    }

    /// Every provider.
    pub fn providers(&self) -> [&dyn VmProvider; 2] {
        [&self.qemu, &self.ec2]
    }

    pub fn qemu(&self) -> &Qemu {
        &self.qemu
    }

    pub fn ec2(&self) -> &Ec2 {
        &self.ec2
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
