//! The contract a machine provider meets, and the providers of one environment: QEMU on
//! this machine (`kinds/vm/qemu.rs`), EC2 (`kinds/vm/ec2/`), any other cloud. A provider
//! makes a machine run from its own resolved payload (what a machine is differs by
//! provider, so each has its type and its `Realize`) and reports its facts — at least
//! `address`, `public_address`, `instance_id`, `port`, `ssh_address`, `user`, `host_key`
//! and `fingerprint` (the target identity), named by `envc_ids::fact::machine` — with an
//! open transport to it. Through [`VmProvider`], given only a record's facts, it says
//! whether the machine still runs (locally, for free), what its cloud says differs
//! (`look`, for drift and `--refresh`), destroys it, and sweeps what it made that no
//! record knows.
//!
//! Part of the contract, below the kinds: the engine carries [`Machines`] to the kinds'
//! hooks and never names a provider; the registry (`kinds::vm::machines`) says which
//! providers an environment has, so a new provider is its module and its line there.

use std::any::Any;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use crate::error::StepError;
use crate::future::BoxFuture;
use crate::record::{DriftFacts, Facts};
use crate::store::Store;
use crate::tools::Tool;
use crate::transport::{HostKey, Transport};

/// The fact that names the provider of a machine; a record without it is QEMU's (every
/// record made before there was a choice).
pub const PROVIDER: &str = "provider";

/// The provider a record without a [`PROVIDER`] fact was made by.
const FIRST_PROVIDER: &str = "qemu";

/// A machine made, what it reports, and a transport open to it.
pub type Realized = (Facts, Transport, HostKey);

pub trait VmProvider: ProviderValue + Send + Sync {
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

/// What every provider is as a value (given to each by the blanket implementation): a
/// kind that needs its own provider's methods (adoption) finds it by its type.
pub trait ProviderValue {
    fn as_any(&self) -> &dyn Any;
}

impl<T: VmProvider + 'static> ProviderValue for T {
    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// The machine providers of one environment, the store they make machines from, and the key
/// envc logs in to all of them with.
pub struct Machines {
    store: Store,
    login_key: PathBuf,
    providers: Vec<Box<dyn VmProvider>>,
    terraform: crate::terraform::TerraformProviders,
}

impl Machines {
    pub fn new(store: &Store, login_key: PathBuf, providers: Vec<Box<dyn VmProvider>>) -> Machines {
        Machines {
            store: store.clone(),
            login_key,
            providers,
            terraform: Default::default(),
        }
    }

    /// The same, its resources' providers taken from `source` (`Err`: why the project's
    /// setting cannot be used).
    pub fn with_provider_source(
        mut self,
        source: Result<envc_lockfiles::provider::ProviderSource, String>,
    ) -> Machines {
        self.terraform = crate::terraform::TerraformProviders::from(source);
        self
    }

    /// The Terraform/OpenTofu providers running for this environment's resources.
    pub fn terraform(&self) -> &crate::terraform::TerraformProviders {
        &self.terraform
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    /// The private key envc logs in to its machines with.
    pub fn login_key(&self) -> &Path {
        &self.login_key
    }

    /// Every provider.
    pub fn providers(&self) -> impl Iterator<Item = &dyn VmProvider> {
        self.providers.iter().map(|p| &**p)
    }

    /// The provider of type `P`, for what only it does (finding a machine to adopt).
    pub fn provider<P: VmProvider + 'static>(&self) -> Option<&P> {
        self.providers()
            .find_map(|p| p.as_any().downcast_ref::<P>())
    }

    /// The provider that made the machine these facts describe.
    pub fn of(&self, facts: &Facts) -> Option<&dyn VmProvider> {
        let name = facts.get(PROVIDER).map_or(FIRST_PROVIDER, String::as_str);
        self.providers().find(|p| p.name() == name)
    }

    /// Each provider's sweep: machines no record knows are destroyed, those in `keep` stay.
    pub async fn sweep(&self, keep: &BTreeSet<String>) -> Result<(), StepError> {
        for p in self.providers() {
            p.sweep(keep).await?;
        }
        Ok(())
    }
}
