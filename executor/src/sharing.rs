//! The team commands' side of the application layer: what `envc cache`, `envc unlock` and
//! `envc state migrate` do with a session, apart from printing it.

use envc_ids::ResolvedHash;
use std::collections::BTreeSet;

use envc_compiler::SourceLoader;

use crate::cache::{BinaryCache, CacheEntry, CacheError, Output, Progress, Transfer};
use crate::config::StateSettings;
use crate::envlock::{EnvLock, Holder};
use crate::kinds;
use crate::kinds::cached_objects;
use crate::record::State;
use crate::session::{Session, SessionError};
use crate::shared_state::LockObject;
use crate::spec::Spec;
use crate::store::ObjectId;

/// A build derivation of the graph: its node key and resolved hash (what the cache is
/// keyed by).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BuildOutput {
    pub node: String,
    pub resolved_hash: ResolvedHash,
}

/// What `cache push` sends, and the recorded images it leaves out, each with why.
#[derive(Clone, Debug, Default)]
pub struct Pushable {
    pub outputs: Vec<Output>,
    /// Node key → why a build would never take it from the cache.
    pub left_out: Vec<(String, &'static str)>,
}

impl Session {
    /// The graph's build derivations a build looks up in the binary cache (locked images),
    /// with the hashes it looks them up by.
    pub fn build_outputs(
        &self,
        spec: &Spec,
        files: &dyn SourceLoader,
    ) -> Result<Vec<BuildOutput>, SessionError> {
        let report = self.plan(spec, files, false)?;
        Ok(report
            .plan
            .nodes
            .iter()
            .filter(|n| {
                let node = &spec.nodes[n.index];
                (kinds::of(node.kind).cached()).is_some_and(|c| c.looked_up(node))
            })
            .filter_map(|n| {
                let r = n.assessment.resolved.as_ref().ok()?;
                Some(BuildOutput {
                    node: spec.nodes[n.index].key.clone(),
                    resolved_hash: r.hash.clone(),
                })
            })
            .collect())
    }

    /// Fetches build output `out` from `cache` into this store, if the cache has it: the
    /// entry and what moved. The objects an image's facts name must all come.
    pub fn pull_output(
        &self,
        cache: &BinaryCache,
        out: &BuildOutput,
        progress: &dyn Progress,
    ) -> Result<Option<(CacheEntry, Transfer)>, CacheError> {
        let key = out.node.clone();
        cache.remote().block(cache.pull(
            &self.store,
            &out.resolved_hash,
            move |facts| cached_objects(&key, facts),
            progress,
        ))
    }

    /// Sends recorded output `out` to `cache`, with the chunks it lacks; with `repair`, the
    /// chunks it has are read back and replaced if damaged (what `cache push` does).
    pub fn push_output(
        &self,
        cache: &BinaryCache,
        out: &Output,
        repair: bool,
        progress: &dyn Progress,
    ) -> Result<Transfer, CacheError> {
        cache
            .remote()
            .block(cache.push(&self.store, out, repair, progress))
    }

    /// The objects of recorded output `out` that this store does not hold (it was built
    /// elsewhere, or its objects left the store).
    pub fn missing_objects<'a>(&self, out: &'a Output) -> Vec<&'a ObjectId> {
        out.objects
            .iter()
            .filter(|id| !self.store.contains(id))
            .collect()
    }

    /// `envc store verify`: every object re-hashed, every environment's state checked
    /// against the store (`repair::verify`).
    pub fn verify_store(&self) -> Result<crate::repair::StoreReport, crate::store::StoreError> {
        crate::repair::verify(&self.store)
    }

    /// `envc store verify --repair`: what verify finds, removed or rewritten so that every
    /// state reads again, under every environment's lock (`repair::repair`).
    pub fn repair_store(
        &self,
        holder: &Holder,
    ) -> Result<crate::repair::StoreReport, crate::repair::RepairError> {
        crate::repair::repair(&self.store, holder)
    }

    /// What `cache push` sends: the images the environment's state records that a build
    /// of this source and lockfile would take from the cache (locked, at the resolved hash
    /// the graph has now). An unlocked image is whatever this machine's mirror served, and
    /// one the graph no longer builds is not looked up: pushing them fills the cache with
    /// entries no build takes.
    pub fn pushable_outputs(
        &self,
        spec: &Spec,
        files: &dyn SourceLoader,
    ) -> Result<Pushable, SessionError> {
        let wanted: BTreeSet<(String, ResolvedHash)> = (self.build_outputs(spec, files)?)
            .into_iter()
            .map(|o| (o.node, o.resolved_hash))
            .collect();
        let (records, _) = self.live()?;
        let mut pushable = Pushable::default();
        let built = records.into_values().filter_map(|r| {
            let cached = kinds::of(crate::spec::targetless(&r.node)?.kind).cached()?;
            Some((r, cached))
        });
        for (r, cached) in built {
            if wanted.contains(&(r.node.clone(), r.resolved_hash.clone())) {
                pushable.outputs.push(Output {
                    objects: cached.objects(&r.facts),
                    node: r.node,
                    resolved_hash: r.resolved_hash,
                    facts: r.facts,
                });
                continue;
            }
            let in_graph = spec.nodes.iter().find(|n| n.key == r.node);
            let why = match in_graph {
                Some(n) if !cached.looked_up(n) => {
                    "no lockfile pins it, so it is whatever the mirror served, and no build takes it from the cache: run `envc lock FILE`, build, then push"
                }
                Some(_) => {
                    "built from another source or lockfile than this one: build it, then push"
                }
                None => "no longer in this environment's source",
            };
            pushable.left_out.push((r.node, why));
        }
        Ok(pushable)
    }

    /// `envc unlock --force`: deletes the shared lock whoever holds it. `Ok(None)`: it
    /// was not held. A local store's lock is the kernel's and cannot be forced: it is
    /// released when its holder exits, so a held one is reported as held.
    pub fn force_unlock(&self) -> Result<Option<LockObject>, SessionError> {
        match self.store.shared() {
            Some(shared) => shared.force_unlock(&self.env).map_err(SessionError::Remote),
            None => {
                match EnvLock::acquire(
                    &self.store,
                    &self.env,
                    false,
                    &Holder::current("envc unlock"),
                ) {
                    Ok(_) => Ok(None),
                    Err(e) => Err(self.lock_error(e)),
                }
            }
        }
    }

    /// `envc state migrate --to URL`: copies the environment's whole history (states,
    /// records, intents, run records) to another state, under both locks, and points its
    /// head at the current state. The source is left as it was; a destination that has
    /// this environment already is refused, so nothing there is overwritten.
    pub fn migrate_state(&self, to: &StateSettings) -> Result<Migrated, SessionError> {
        let me = Holder::current("envc state migrate");
        let locked = |e| self.lock_error(e);
        let source_lock = EnvLock::acquire(&self.store, &self.env, false, &me).map_err(locked)?;
        let dest = crate::session::state_store(self.store.root(), to)?;
        let dest_lock = EnvLock::acquire(&dest, &self.env, false, &me).map_err(locked)?;
        let store_error = |error| SessionError::Store {
            root: self.store.root().to_path_buf(),
            error,
        };
        if let Some(existing) = dest.read_ref(&self.env).map_err(store_error)? {
            return Err(SessionError::State {
                env: self.env.clone(),
                error: format!(
                    "{} already holds a state of `{}` ({existing:?}); nothing was copied\n  hint: migrate to an empty location, or remove that state first",
                    to.url, self.env
                ),
            });
        }
        let head = self.store.read_ref(&self.env).map_err(store_error)?;
        let Some(head) = head else {
            return Err(SessionError::NeverBuilt {
                env: self.env.clone(),
                file: self.env_file.clone(),
            });
        };
        // The key the records' hashes of secrets were made with goes along: without it every
        // node that uses a secret would look changed, and no secret-bearing file removable.
        if let Some(key) = self.store.secret_key(false).map_err(store_error)? {
            if dest.secret_key_with(Some(key)).map_err(store_error)? != Some(key) {
                return Err(SessionError::State {
                    env: self.env.clone(),
                    error: format!(
                        "{} already has another key for the hashes of secrets; nothing was copied\n  hint: migrate to a state of its own, or one whose environments were built from this store",
                        to.url
                    ),
                });
            }
        }
        let mut copied = BTreeSet::new();
        let mut states = 0;
        for (id, state) in State::history(&self.store, &self.env).map_err(store_error)? {
            states += 1;
            let named = state
                .records
                .values()
                .chain(state.intents.values())
                .chain(state.run.iter())
                .chain(std::iter::once(&id));
            for object in named {
                if copied.insert(*object) {
                    let bytes = self.store.get(object).map_err(store_error)?;
                    dest.put(&bytes).map_err(store_error)?;
                }
            }
        }
        match dest
            .update_ref(&dest_lock, None, head)
            .map_err(store_error)?
        {
            Ok(()) => {}
            Err(conflict) => {
                return Err(SessionError::State {
                    env: self.env.clone(),
                    error: format!(
                        "another run created a state of `{}` at {} during the migration (found {:?}); nothing was overwritten",
                        self.env, to.url, conflict.found
                    ),
                })
            }
        }
        drop(source_lock);
        Ok(Migrated {
            states,
            objects: copied.len(),
            head,
        })
    }
}

/// What a migration copied.
#[derive(Clone, Debug)]
pub struct Migrated {
    pub states: usize,
    pub objects: usize,
    pub head: ObjectId,
}
