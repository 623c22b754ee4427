//! `envc verify`: is production what this source and lockfile give on clean targets?
//!
//! Two levels. **Rebuild** (`rebuild.rs`): every build derivation (an image) is built
//! again in a scratch store and compared bit for bit with production's record, the binary
//! cache, or a second build. **Lab** (`lab.rs`): the whole environment is deployed from
//! the lockfile onto clean stand-ins — fresh local VMs for `vm` targets (the lab's own
//! store, so its own machines and private network), the machines `--lab-hosts` names for
//! `host` targets — its checks run, production's targets are probed and its postconditions
//! run again, and `compare.rs` sets the two sides' facts against each other. The lab is
//! torn down afterwards unless kept.
//!
//! Production is only read: its records, what probes of its targets find, what its
//! postconditions say. Nothing of it is locked or changed.

pub mod compare;
mod lab;
pub mod rebuild;
pub mod stand_ins;
pub mod tree;

use envc_ids::ResolvedHash;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Instant;

use envc_compiler::SourceLoader;
use serde::Serialize;

use crate::kinds::image::build::ImageSpec;
use crate::kinds::node_type::payload_of;
use crate::plan::{plan, Action};
use crate::probe::local_drift;
use crate::record::{Facts, RunRecord, State};
use crate::repair::readable_history;
use crate::run::Reporter;
use crate::session::{Interrupts, Session, SessionError};
use crate::spec::{NodeSpec, Spec};
use crate::store::Store;
use crate::tools::missing_tools;

use compare::{NodeComparison, NodeStatus, Records};
use rebuild::{Rebuild, Reference, ReferenceBytes};

pub use lab::Lab;

/// What `envc verify` is asked to do.
pub struct VerifyRequest {
    pub rebuild: bool,
    pub lab: bool,
    /// Compare with the state a chosen production run left (a run id or its prefix), not
    /// the current one.
    pub against: Option<String>,
    /// Leave the lab standing (its store, VMs and what it deployed) for a look.
    pub keep: bool,
    pub jobs: usize,
    /// blake3 of the lockfile, for the lab's run record.
    pub lock_hash: Option<String>,
}

/// A part of `envc verify`, told as it begins.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VerifyPhase<'a> {
    /// Image `image` is built again: the `index`th (from 1) of `of`.
    Rebuild {
        image: &'a str,
        index: usize,
        of: usize,
    },
    /// The lab's machines boot, side by side.
    Boot { machines: usize },
    /// The rest of the environment is deployed in the lab.
    Deploy,
    /// Production's targets are probed, its postconditions run, and the two compared.
    Compare,
    /// The lab is torn down.
    Teardown,
}

impl std::fmt::Display for VerifyPhase<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            VerifyPhase::Rebuild { image, index, of } => {
                write!(f, "rebuild {image} ({index} of {of})")
            }
            VerifyPhase::Boot { machines: 1 } => write!(f, "boot the lab's machine"),
            VerifyPhase::Boot { machines } => write!(f, "boot the lab's {machines} machines"),
            VerifyPhase::Deploy => write!(f, "deploy in the lab"),
            VerifyPhase::Compare => write!(f, "compare with production"),
            VerifyPhase::Teardown => write!(f, "tear the lab down"),
        }
    }
}

/// Where `envc verify` tells what it does: the lab's deploy as a build's steps, and each
/// phase as it begins.
pub trait VerifyReporter: Reporter {
    fn phase(&self, _phase: VerifyPhase<'_>) {}
}

/// Seconds spent in each part.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Timings {
    pub rebuild: f64,
    /// The longest VM boot of the lab (VMs boot side by side).
    pub lab_boot: f64,
    /// The rest of the lab's deploy.
    pub deploy: f64,
    /// Probing production, running its postconditions, comparing.
    pub compare: f64,
    pub teardown: f64,
}

#[derive(Debug, Serialize)]
pub struct LabReport {
    /// Every node of the graph, compared.
    pub nodes: Vec<NodeComparison>,
    /// The lab's run (in its store: kept with `--keep`).
    pub run: Option<String>,
    /// Where the lab's store is, when it was kept.
    pub kept: Option<PathBuf>,
    /// Why the lab could not be torn down completely, if it could not.
    pub teardown_error: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct VerifyReport {
    /// The production records compared with: the current state, or `--against`'s; `None`
    /// when production was never built (`--rebuild-only` then compares two builds).
    pub production_run: Option<String>,
    /// Production nodes whose records are not what this source gives (so nothing can be
    /// said of them): key and why, as a plan says it.
    pub not_at_source: Vec<(String, Vec<String>)>,
    pub rebuilds: Vec<Rebuild>,
    pub lab: Option<LabReport>,
    pub timings: Timings,
}

impl VerifyReport {
    /// Whether anything differs (exit 3).
    pub fn differs(&self) -> bool {
        !self.not_at_source.is_empty()
            || self.rebuilds.iter().any(Rebuild::differs)
            || self.lab.as_ref().is_some_and(|l| {
                l.nodes
                    .iter()
                    .any(|n| matches!(n.status, NodeStatus::Differs))
            })
    }

    /// Nodes that could not be compared (a production target was unreachable), and why.
    pub fn unchecked(&self) -> impl Iterator<Item = (&str, &str)> {
        self.lab.iter().flat_map(|l| {
            l.nodes.iter().filter_map(|n| match &n.status {
                NodeStatus::Unchecked(why) => Some((n.node.as_str(), why.as_str())),
                _ => None,
            })
        })
    }
}

impl Session {
    /// `envc verify`. `spec` is the environment as production has it; `lab_spec` the same
    /// source compiled with the lab's stand-ins for its hosts (the same as `spec` when it
    /// has none).
    pub fn verify(
        &self,
        spec: &Spec,
        lab_spec: &Spec,
        files: &dyn SourceLoader,
        request: &VerifyRequest,
        reporter: &dyn VerifyReporter,
        interrupts: &'static dyn Interrupts,
    ) -> Result<VerifyReport, SessionError> {
        let production = match self.production(request.against.as_deref()) {
            // The rebuild level alone needs no production: with nothing recorded, each
            // image is compared with the binary cache's entry or a second build
            // (reproducible-builds.org's two builds), so CI can ask whether a source
            // rebuilds bit for bit before anything is deployed.
            Err(SessionError::NeverBuilt { .. }) if !request.lab && request.against.is_none() => {
                None
            }
            other => Some(other?),
        };
        let deployed = production.is_some();
        let (production_run, records) = production.unwrap_or_default();
        let machines = self.machines();
        let p = plan(
            spec,
            &records,
            &BTreeMap::new(),
            &local_drift(&records, &self.store, &machines),
            files,
        );
        let not_at_source: Vec<(String, Vec<String>)> = p
            .nodes
            .iter()
            .filter(|_| deployed)
            .filter(|n| !matches!(n.assessment.action, Action::Unchanged | Action::Check))
            .map(|n| {
                let key = spec.nodes[n.index].key.clone();
                (key, n.assessment.reasons.clone())
            })
            .collect();
        let (rebuilt, images): (Vec<&NodeSpec>, Vec<(String, ResolvedHash, ImageSpec)>) = p
            .nodes
            .iter()
            .filter_map(|n| {
                let r = n.assessment.resolved.as_ref().ok()?;
                let img = payload_of::<ImageSpec>(&r.payload)?;
                let node = &spec.nodes[n.index];
                Some((node, (node.key.clone(), r.hash.clone(), img.clone())))
            })
            .unzip();
        if request.rebuild && !images.is_empty() {
            let missing = missing_tools(
                rebuilt
                    .iter()
                    .map(|n| (n.kind, crate::kinds::of(n.kind).tools_for(n))),
            );
            if !missing.is_empty() {
                return Err(SessionError::MissingTools(missing));
            }
        }
        let mut timings = Timings::default();
        let mut lab = Lab::create(self)?;
        let mut rebuilds = Vec::new();
        if request.rebuild {
            let started = Instant::now();
            let rt = crate::session::runtime()?;
            let cache = match &self.shared.cache {
                Some(_) => Some(self.cache()?),
                None => None,
            };
            // Pinned .debs from production's store, else the binary cache (never pushed
            // to from here), else their mirror.
            let debs = self.store.clone().with_deb_cache(
                cache
                    .clone()
                    .map(|cache| crate::cache::CacheUse::new(cache, false)),
            );
            let builds = lab.store().clone().with_debs_of(&debs);
            let second = Store::open(&lab.dir().join("second-build"))
                .map_err(|e| SessionError::Io(format!("cannot open a scratch store: {e}")))?
                .with_debs_of(&debs);
            let transfers = reporter.transfers();
            for (i, (key, hash, img)) in images.iter().enumerate() {
                reporter.phase(VerifyPhase::Rebuild {
                    image: key,
                    index: i + 1,
                    of: images.len(),
                });
                let reference = rt.block_on(self.reference(&records, cache.as_ref(), key, hash));
                let r = rt.block_on(rebuild::rebuild(
                    &builds,
                    &second,
                    key,
                    hash,
                    img,
                    reference,
                    &*transfers,
                ));
                rebuilds.push(r);
            }
            timings.rebuild = started.elapsed().as_secs_f64();
        } else {
            // The lab deploys production's own image bytes, when they are here.
            for (key, hash, _) in &images {
                if let Some(rec) = records.get(key).filter(|r| r.resolved_hash == *hash) {
                    lab.seed(&self.store, key, hash, &rec.facts)?;
                }
            }
        }
        let lab_report = match request.lab {
            false => None,
            true => Some(self.lab(
                &mut lab,
                spec,
                lab_spec,
                files,
                &records,
                request,
                reporter,
                interrupts,
                &mut timings,
            )?),
        };
        Ok(VerifyReport {
            production_run,
            not_at_source,
            rebuilds,
            lab: lab_report,
            timings,
        })
    }

    /// Production's records: the current state's, or those of the state `against` (a run
    /// id, or the start of one) left.
    fn production(&self, against: Option<&str>) -> Result<(Option<String>, Records), SessionError> {
        let store_error = |e| self.store_error(e);
        let state: State = match against {
            None => {
                State::current(&self.store, &self.env)
                    .map_err(store_error)?
                    .1
            }
            Some(run) => {
                let history = readable_history(&self.store, &self.env).map_err(store_error)?;
                let found = history.states.into_iter().find(|(_, st)| {
                    st.run.is_some_and(|id| {
                        id.hex().starts_with(run)
                            || self
                                .store
                                .get_json::<RunRecord>(&id)
                                .is_ok_and(|r| r.run.starts_with(run))
                    })
                });
                match found {
                    Some((_, st)) => st,
                    None => {
                        return Err(SessionError::State {
                            env: self.env.clone(),
                            error: format!(
                            "no run `{run}` in its history\n  hint: `envc log {}` lists its runs",
                            self.env_file.display()
                        ),
                        })
                    }
                }
            }
        };
        let run = state
            .run
            .map(|id| match self.store.get_json::<RunRecord>(&id) {
                Ok(r) => r.run,
                Err(_) => id.hex(),
            });
        if state.run.is_none() {
            return Err(SessionError::NeverBuilt {
                env: self.env.clone(),
                file: self.env_file.clone(),
            });
        }
        let records = state.load_records(&self.store).map_err(store_error)?;
        Ok((run, records))
    }

    /// What a rebuild of image `key` is compared with: production's record of the same
    /// derivation, else the binary cache's entry, else nothing (a second build).
    async fn reference<'a>(
        &'a self,
        records: &Records,
        cache: Option<&'a crate::cache::BinaryCache>,
        key: &str,
        hash: &ResolvedHash,
    ) -> Option<(Reference, Facts, ReferenceBytes<'a>)> {
        if let Some(rec) = records.get(key).filter(|r| r.resolved_hash == *hash) {
            let reference = Reference::Record {
                run: rec.run.clone(),
            };
            return Some((
                reference,
                rec.facts.clone(),
                ReferenceBytes::Store(&self.store),
            ));
        }
        let cache = cache?;
        let (c, h) = (cache.clone(), hash.clone());
        let entry = cache
            .remote()
            .run(async move { c.lookup(&h).await })
            .await
            .ok()
            .flatten()?;
        let reference = Reference::Cache {
            url: cache.url().to_string(),
        };
        Some((reference, entry.body.facts, ReferenceBytes::Cache(cache)))
    }
}
