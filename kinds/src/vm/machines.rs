//! The machine providers an environment has: the registry's line per provider. Adding a
//! provider is its module and its line in [`machines`].

use std::sync::Arc;
use std::time::Duration;

use crate::machines::Machines;
use crate::store::Store;
use crate::vm::ec2::Ec2;
use crate::vm::login::LoginKey;
use crate::vm::qemu::Qemu;

/// The providers of environment `env`, making machines from `store`, each given
/// `boot_timeout` for a machine to answer ssh; one login key for all of them.
pub fn machines(store: &Store, env: &str, boot_timeout: Duration) -> Machines {
    let dir = store.root().join("machines");
    let key = Arc::new(LoginKey::new(&dir));
    Machines::new(
        store,
        key.path.clone(),
        vec![
            Box::new(Qemu::new(store, env, key.clone(), boot_timeout)),
            Box::new(Ec2::new(&dir, env, key, boot_timeout)),
        ],
    )
}
