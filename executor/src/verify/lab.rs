//! The lab: a scratch store under production's (`labs/ENV-PID-TIME/`), so its VMs live
//! there and get a private network of their own (the network is derived from where VMs
//! live), an environment deployed into it from the lockfile, and its teardown.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use envc_compiler::SourceLoader;

use crate::config::Shared;
use crate::record::{Facts, Outcome};
use crate::run::{Event, Reporter};
use crate::session::{BuildRequest, Interrupts, Session, SessionError};
use crate::spec::Spec;
use crate::store::Store;

use super::compare::{compare, Records, Sides};
use super::{LabReport, Timings, VerifyPhase, VerifyReporter, VerifyRequest};

/// Removed when dropped, unless [`Lab::keep`] was called: an error anywhere in `verify`
/// leaves nothing behind.
pub struct Lab {
    dir: PathBuf,
    store: Store,
    keep: bool,
}

impl Lab {
    pub fn create(production: &Session) -> Result<Lab, SessionError> {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let dir = production.store.root().join("labs").join(format!(
            "{}-{}-{now}",
            crate::names::safe_name(&production.env),
            std::process::id()
        ));
        let store = Store::open(&dir)
            .map_err(|error| SessionError::Store {
                root: dir.clone(),
                error,
            })?
            .with_debs_of(&production.store);
        Ok(Lab {
            dir,
            store,
            keep: false,
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Gives the lab production's build of an image (its objects linked, not copied), so
    /// that a lab without the rebuild level deploys the very bytes production runs.
    /// Production's objects that are gone leave the lab to build the image itself.
    pub fn seed(
        &self,
        production: &Store,
        key: &str,
        hash: &envc_ids::ResolvedHash,
        facts: &Facts,
    ) -> Result<(), SessionError> {
        let objects = crate::kinds::cached_objects(key, facts);
        if !objects.iter().all(|id| production.contains(id)) {
            return Ok(());
        }
        let error = |error| SessionError::Store {
            root: self.dir.clone(),
            error,
        };
        for id in &objects {
            self.store.link_object(production, id).map_err(error)?;
        }
        self.store.put_substitute(hash, facts).map_err(error)
    }

    /// Leaves the lab's store in place (`--keep`, or what could not be torn down).
    pub fn keep(&mut self) {
        self.keep = true;
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        if !self.keep {
            // Read-only objects in writable directories: removable by their owner.
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

impl Session {
    /// The lab's session: its own store, production's ways of reaching targets, the binary
    /// cache read but never pushed to, no shared state.
    fn lab_session(&self, lab: &Lab) -> Session {
        let cache = self.shared.cache.clone().map(|mut c| {
            c.push = false;
            c
        });
        Session {
            store: lab.store.clone(),
            env: self.env.clone(),
            env_file: self.env_file.clone(),
            target: self.target.clone(),
            shared: Shared {
                cache,
                state: None,
                secrets: self.shared.secrets.clone(),
            },
        }
    }

    /// Deploys `lab_spec` in the lab, compares with production, tears the lab down.
    #[allow(clippy::too_many_arguments)] // one call site; a struct would only rename them
    pub(super) fn lab(
        &self,
        lab: &mut Lab,
        spec: &Spec,
        lab_spec: &Spec,
        files: &dyn SourceLoader,
        production: &Records,
        request: &VerifyRequest,
        reporter: &dyn VerifyReporter,
        interrupts: &'static dyn Interrupts,
        timings: &mut Timings,
    ) -> Result<LabReport, SessionError> {
        let session = self.lab_session(lab);
        let build = |spec: &Spec, command: &str, reporter: &dyn Reporter| {
            let r = BuildRequest {
                jobs: request.jobs,
                keep_going: true,
                refresh: false,
                wait: false,
                command: command.into(),
                lock_hash: request.lock_hash.clone(),
                push: false,
                source: None,
                remove_adopted: false,
                // The lab shows what a build does to a clean machine, failures as they are.
                no_rollback: true,
            };
            session.build(spec, files, &r, reporter, interrupts)
        };
        let started = Instant::now();
        let deployed = build(lab_spec, "verify", &BootThenDeploy::new(lab_spec, reporter));
        let elapsed = started.elapsed().as_secs_f64();
        let compared = deployed.and_then(|report| {
            let boot = report
                .outcomes
                .iter()
                .filter(|o| boots(&o.node))
                .map(|o| o.duration_ms)
                .max()
                .unwrap_or(0) as f64
                / 1000.0;
            timings.lab_boot = boot;
            timings.deploy = (elapsed - boot).max(0.0);
            reporter.phase(VerifyPhase::Compare);
            let started = Instant::now();
            // A host stood in for by a fresh VM: the lab's `vm:NAME` is compared as the
            // production's `host:NAME` (what is on it has the same keys on both sides).
            let vm_stand_ins: BTreeMap<String, String> = (lab_spec.nodes.iter())
                .filter(|n| n.stands_in)
                .filter_map(|n| {
                    let machine = spec
                        .nodes
                        .iter()
                        .find(|m| m.name == n.name && m.kind.is_target() && m.kind != n.kind)?;
                    Some((n.key.clone(), machine.key.clone()))
                })
                .collect();
            let key = |k: &String| vm_stand_ins.get(k).unwrap_or(k).clone();
            let mut lab_failures = BTreeMap::new();
            let mut lab_checks = BTreeMap::new();
            for o in &report.outcomes {
                if matches!(o.outcome, Outcome::Failed(_) | Outcome::Skipped(_)) {
                    lab_failures.insert(key(&o.node), o.outcome.to_string());
                }
                if !o.checks.is_empty() {
                    lab_checks.insert(key(&o.node), o.checks.clone());
                }
            }
            let (lab_records, _) = session.live()?;
            let lab_records: Records = lab_records.into_iter().map(|(k, r)| (key(&k), r)).collect();
            let probed = self.plan(spec, files, true)?;
            let production_checks: BTreeMap<_, _> =
                self.run_checks(spec, files)?.results.into_iter().collect();
            let keys: Vec<String> = spec.nodes.iter().map(|n| n.key.clone()).collect();
            let nodes = compare(&Sides {
                keys: &keys,
                production,
                drift: &probed.drift,
                unreachable: &probed.unreachable,
                production_checks: &production_checks,
                lab: &lab_records,
                lab_failures: &lab_failures,
                lab_checks: &lab_checks,
                vm_stand_ins: &vm_stand_ins.into_values().collect(),
            });
            timings.compare = started.elapsed().as_secs_f64();
            Ok((nodes, report.run.map(|r| r.hex())))
        });
        // Torn down whatever the deploy or the comparison did, unless asked to keep it.
        let started = Instant::now();
        let teardown = || {
            reporter.phase(VerifyPhase::Teardown);
            match build(&Spec::default(), "verify teardown", reporter) {
                Ok(r) if r.failed == 0 && r.error.is_none() => None,
                Ok(r) => Some(
                    r.outcomes
                        .iter()
                        .filter_map(|o| Some(format!("{}: {}", o.node, o.outcome.failure()?)))
                        .chain(r.error)
                        .collect::<Vec<_>>()
                        .join("; "),
                ),
                Err(e) => Some(e.to_string()),
            }
        };
        let teardown_error = match request.keep {
            true => None,
            false => teardown(),
        };
        timings.teardown = started.elapsed().as_secs_f64();
        // What could not be torn down stays where it can be found (and destroyed).
        let kept = (request.keep || teardown_error.is_some()).then(|| {
            lab.keep();
            lab.dir.clone()
        });
        let (nodes, run) = compared?;
        Ok(LabReport {
            nodes,
            run,
            kept,
            teardown_error,
        })
    }
}

/// The lab's deploy as its phases: the machines boot, then the rest is deployed; said as
/// the last machine's node finishes. Everything else goes to the verify's reporter as is.
struct BootThenDeploy<'a> {
    inner: &'a dyn VerifyReporter,
    booting: AtomicUsize,
}

impl<'a> BootThenDeploy<'a> {
    fn new(lab_spec: &Spec, inner: &'a dyn VerifyReporter) -> BootThenDeploy<'a> {
        let machines = (lab_spec.nodes.iter())
            .filter(|n| crate::kinds::of(n.kind).boots())
            .count();
        inner.phase(match machines {
            0 => VerifyPhase::Deploy,
            machines => VerifyPhase::Boot { machines },
        });
        BootThenDeploy {
            inner,
            booting: AtomicUsize::new(machines),
        }
    }
}

impl Reporter for BootThenDeploy<'_> {
    fn event(&self, e: Event<'_>) {
        let machine = match &e {
            Event::Finished { key, .. } => boots(key),
            Event::Started { .. } => false,
        };
        self.inner.event(e);
        let left = |n: usize| n.checked_sub(1);
        if machine
            && self
                .booting
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, left)
                == Ok(1)
        {
            self.inner.phase(VerifyPhase::Deploy);
        }
    }

    fn probed(
        &self,
        drift: &BTreeMap<String, crate::record::DriftFacts>,
        unreachable: &BTreeMap<String, String>,
    ) {
        self.inner.probed(drift, unreachable);
    }

    fn took_over(&self, what: &crate::shared_state::TakenOver) {
        self.inner.took_over(what);
    }

    fn rolled_back(&self, key: &str, target: &str, note: &str) {
        self.inner.rolled_back(key, target, note);
    }

    fn transfers(&self) -> Arc<dyn crate::cache::Transfers> {
        self.inner.transfers()
    }
}

/// Whether the node of `key` is a machine the lab boots.
fn boots(key: &str) -> bool {
    crate::spec::targetless(key).is_some_and(|k| crate::kinds::of(k.kind).boots())
}
