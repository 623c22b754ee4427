//! Putting things on one target back as records had them, from the store alone: a locked
//! package's pinned `.deb`s (the set its record names, `debs::KeptDebs`, each `.deb` in the
//! store by its sha256), the file's bytes (the content object its record names), the
//! service's enabled/running. What the scheduler's automatic rollback (`run/rollback.rs`)
//! and `envc rollback --to` (`rollback_to.rs`) both do on a target, once they know which
//! records to go back to.
//!
//! A package goes back to exactly its recorded version, with the packages of its closure
//! that the update moved moved back (as Nix switches to the previous generation, with no
//! archive: the lock that pinned the set may have moved on). One the update installed is
//! purged, with what it brought in that nothing else needs. A package whose record names no
//! `.deb`s (not locked: the target's apt chose it; or recorded before envc kept them) is
//! left at the version the update installed, and the rollback says so.

use std::collections::BTreeMap;
use std::fmt;

use envc_ids::fact::content::SHA256;
use envc_ids::NodeKind;

use crate::debs::KeptDebs;
use crate::error::StepError;
use crate::kinds::file::remote::{apply_files, remove_files, FileRemoval, FileSpec, Removed};
use crate::kinds::package::remote::{purge_packages, reinstall_packages, PackageSpec};
use crate::kinds::service::remote::{apply_service, remove_service, ServiceSpec};
use crate::record::RealizationRecord;
use crate::store::Store;
use crate::transport::Transport;

/// One thing on a target to put back.
#[derive(Clone, Debug)]
pub struct Restore {
    /// `target/kind:name`.
    pub key: String,
    pub kind: NodeKind,
    /// The file's path, the service's or package's name.
    pub name: String,
    /// The record to go back to; `None`: the thing did not exist then (envc made it
    /// since), so it is removed.
    pub to: Option<RealizationRecord>,
    /// What envc made it since, from its record (or, for a removal, its intent): a file is
    /// removed only while it holds that; the packages of a package's closure that it moved
    /// are moved back.
    pub written: Option<RealizationRecord>,
}

/// The word for what was done to one item, or why it could not be.
pub type Restored = (String, Result<String, StepError>);

/// Puts `items` back on `t`: packages first (purged, then installed again in one
/// transaction), then files (one batch), so that a package's files do not overwrite them,
/// then services, each started again (restarted when it runs) so that it reads the files
/// as they were. In the order given within each kind; one result per item, in the order of
/// `items`.
pub async fn restore(t: &Transport, store: &Store, items: &[Restore]) -> Vec<Restored> {
    let mut results: Vec<Option<Result<String, StepError>>> = vec![None; items.len()];
    // Packages to install again, and those to purge.
    let mut install: Vec<(usize, PackageSpec)> = Vec::new();
    let mut undo: BTreeMap<String, String> = BTreeMap::new();
    let mut purge: Vec<usize> = Vec::new();
    // Files: those with content to write, and those to remove.
    let mut write: Vec<(usize, FileSpec)> = Vec::new();
    let mut remove: Vec<(usize, FileRemoval)> = Vec::new();
    for (i, item) in items.iter().enumerate() {
        match (item.kind, &item.to) {
            (NodeKind::File, Some(r)) => match file_spec(&item.name, r, store) {
                Ok(f) => write.push((i, f)),
                Err(e) => results[i] = Some(Err(e)),
            },
            (NodeKind::File, None) => remove.push((
                i,
                FileRemoval {
                    path: item.name.clone(),
                    written_sha256: item
                        .written
                        .as_ref()
                        .and_then(|w| w.facts.get(SHA256).cloned()),
                },
            )),
            (NodeKind::Package, Some(r)) => match package_spec(&item.name, r, store) {
                Ok((p, kept)) => {
                    undo.extend(moved_since(&kept, item.written.as_ref(), store));
                    install.push((i, p));
                }
                Err(e) => results[i] = Some(Err(e)),
            },
            (NodeKind::Package, None) => purge.push(i),
            (NodeKind::Service, _) => {}
            (kind, _) => {
                results[i] = Some(Err(StepError::new(format!(
                    "a `{kind}` is not rolled back"
                ))))
            }
        }
    }
    if !purge.is_empty() {
        let names: Vec<String> = purge.iter().map(|&i| items[i].name.clone()).collect();
        let done = purge_packages(t, &names).await;
        for &i in &purge {
            results[i] = Some(
                done.clone()
                    .map(|()| "purged (it was not installed before)".to_string()),
            );
        }
    }
    // From the store alone: a package one of whose `.deb`s it lacks is not put back.
    let mut installable = Vec::with_capacity(install.len());
    'packages: for (i, p) in install {
        for d in &p.debs {
            if let Err(e) = crate::debs::from_store(store, d).await {
                results[i] = Some(Err(StepError::new(format!(
                    "package `{}` is not rolled back: {e}",
                    p.name
                ))));
                continue 'packages;
            }
        }
        installable.push((i, p));
    }
    let install = installable;
    if !install.is_empty() {
        let specs: Vec<PackageSpec> = install.iter().map(|(_, p)| p.clone()).collect();
        let done = reinstall_packages(t, store, &specs, &undo).await;
        for (n, (i, p)) in install.iter().enumerate() {
            results[*i] = Some(match &done {
                Ok(applied) => Ok(match applied.get(n).and_then(|a| a.facts.get("version")) {
                    Some(v) => format!("reinstalled at {v} from the store"),
                    None => "reinstalled from the store".to_string(),
                }),
                Err(e) => Err(StepError::new(format!(
                    "package `{}` is not rolled back: {e}",
                    p.name
                ))),
            });
        }
    }
    if !write.is_empty() {
        let specs: Vec<FileSpec> = write.iter().map(|(_, f)| f.clone()).collect();
        for ((i, _), r) in write.iter().zip(apply_files(t, &specs).await) {
            results[*i] = Some(r.map(|_| "restored".to_string()));
        }
    }
    if !remove.is_empty() {
        let specs: Vec<FileRemoval> = remove.iter().map(|(_, f)| f.clone()).collect();
        for ((i, _), r) in remove.iter().zip(remove_files(t, &specs).await) {
            results[*i] = Some(r.map(|done| match done {
                Removed::Deleted => "removed (it did not exist before)".to_string(),
                Removed::Absent => "already absent".to_string(),
                Removed::Changed => {
                    "left in place: its content changed since envc wrote it".to_string()
                }
            }));
        }
    }
    for (i, item) in items.iter().enumerate() {
        if item.kind != NodeKind::Service {
            continue;
        }
        results[i] = Some(match &item.to {
            Some(r) => {
                let flag = |k: &str| r.attrs.get(k).is_none_or(|v| v == "true");
                let spec = ServiceSpec {
                    name: item.name.clone(),
                    enabled: flag("enabled"),
                    running: flag("running"),
                    restart: flag("running"),
                };
                apply_service(t, &spec).await.map(|_| {
                    if spec.running {
                        "restarted".to_string()
                    } else {
                        "stopped".to_string()
                    }
                })
            }
            None => remove_service(t, &item.name)
                .await
                .map(|()| "stopped and disabled (it did not exist before)".to_string()),
        });
    }
    items
        .iter()
        .zip(results)
        .map(|(item, r)| {
            (
                item.key.clone(),
                r.unwrap_or_else(|| Err(StepError::new("internal error: no result"))),
            )
        })
        .collect()
}

/// Why a package's record cannot be rolled back to, when it cannot: it names no pinned
/// `.deb`s. `None` when it can (the `.deb`s themselves are looked for in the store when
/// the rollback installs them).
pub fn package_not_kept(name: &str, r: &RealizationRecord) -> Option<String> {
    r.content.is_none().then(|| {
        format!(
            "package `{name}` is not rolled back: its record names no pinned .debs (it is not \
             locked, so the target's apt chose what it installed, or it was recorded before \
             envc kept a package's .debs); it stays at the version installed now"
        )
    })
}

/// The package a record describes, to install again from the `.deb`s it kept, with that
/// set.
fn package_spec(
    name: &str,
    r: &RealizationRecord,
    store: &Store,
) -> Result<(PackageSpec, KeptDebs), StepError> {
    let Some(id) = r.content else {
        return Err(StepError::new(
            package_not_kept(name, r).unwrap_or_default(),
        ));
    };
    let kept: KeptDebs = store.get_json(&id).map_err(|e| {
        StepError::new(format!(
            "package `{name}` is not rolled back: the set of .debs its record names is not in \
             the store ({e})"
        ))
    })?;
    let version =
        (r.facts.get("version").cloned()).or_else(|| kept.debs.first().map(|d| d.version.clone()));
    let spec = PackageSpec {
        name: name.to_string(),
        version,
        debs: kept.sources(),
    };
    Ok((spec, kept))
}

/// The packages of `kept` (the set gone back to) that the record `since` (what the update
/// installed) pinned at another version: name → that version, which the rollback moves
/// back from.
fn moved_since(
    kept: &KeptDebs,
    since: Option<&RealizationRecord>,
    store: &Store,
) -> BTreeMap<String, String> {
    let Some(now) = since
        .and_then(|r| r.content)
        .and_then(|id| store.get_json::<KeptDebs>(&id).ok())
    else {
        return BTreeMap::new();
    };
    now.debs
        .into_iter()
        .filter(|n| {
            kept.debs
                .iter()
                .any(|d| d.name == n.name && d.version != n.version)
        })
        .map(|n| (n.name, n.version))
        .collect()
}

/// The file a record describes, its bytes from the store.
fn file_spec(path: &str, r: &RealizationRecord, store: &Store) -> Result<FileSpec, StepError> {
    let Some(id) = r.content else {
        return Err(StepError::new(format!(
            "file `{path}` is not rolled back: its record keeps no content (it holds a secret, or was written before envc kept file contents)"
        )));
    };
    let content = store.get(&id).map_err(|e| {
        StepError::new(format!(
            "file `{path}` is not rolled back: its content is not in the store ({e})"
        ))
    })?;
    let fact = |k: &str| r.facts.get(k).cloned().unwrap_or_default();
    let mode = u32::from_str_radix(&fact("mode"), 8).unwrap_or(0o644);
    Ok(FileSpec {
        path: path.to_string(),
        content,
        owner: fact("owner"),
        group: fact("group"),
        mode,
        written_sha256: None,
        sealed: None,
    })
}

/// The kinds a rollback puts back (or reports on).
pub fn rolls_back(kind: NodeKind) -> bool {
    matches!(kind, NodeKind::File | NodeKind::Service | NodeKind::Package)
}

/// One line for what a rollback did: `restored /etc/x; restarted nginx`, failures after.
pub fn summary(done: &[Restored]) -> String {
    let (ok, failed): (Vec<_>, Vec<_>) = done.iter().partition(|(_, r)| r.is_ok());
    let mut parts: Vec<String> = ok
        .iter()
        .map(|(k, r)| format!("{} `{k}`", r.as_ref().map_or("", String::as_str)))
        .collect();
    parts.extend(
        failed
            .iter()
            .filter_map(|(_, r)| r.as_ref().err().map(ToString::to_string)),
    );
    parts.join("; ")
}

/// Why `envc rollback --to` cannot go back to a run.
#[derive(Debug)]
pub enum RollbackError {
    /// No run of that id (or unique prefix) in the environment's history.
    UnknownRun {
        env: String,
        given: String,
        closest: Option<String>,
    },
    /// The run is in the history, but the records of its state are not in the store.
    Gone { run: String, error: String },
}

impl fmt::Display for RollbackError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RollbackError::UnknownRun {
                env,
                given,
                closest,
            } => {
                write!(f, "no run `{given}` in the history of `{env}`")?;
                match closest {
                    Some(c) => write!(f, "\n  hint: did you mean `{c}`? (`envc log` lists the runs)"),
                    None => write!(f, "\n  hint: `envc log` lists the runs"),
                }
            }
            RollbackError::Gone { run, error } => write!(
                f,
                "the records of run `{run}` are no longer in the store ({error}); it cannot be rolled back to"
            ),
        }
    }
}

impl std::error::Error for RollbackError {}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::debs::KeptDeb;

    fn deb(name: &str, version: &str) -> KeptDeb {
        KeptDeb {
            name: name.into(),
            version: version.into(),
            architecture: "amd64".into(),
            archive: "debian/bookworm".into(),
            filename: format!("pool/main/{name}_{version}_amd64.deb"),
            size: 1,
            sha256: format!("{name}{version}"),
        }
    }

    fn record(store: &Store, version: &str, debs: Option<Vec<KeptDeb>>) -> RealizationRecord {
        let content = debs.map(|debs| store.put_json(&KeptDebs { debs }).unwrap());
        let mut r = crate::record::Intent {
            node: "h/package:nginx".into(),
            target_identity: Default::default(),
            facts: [("version".to_string(), version.to_string())].into(),
            run: "r".into(),
            at_unix: 0,
        }
        .as_record();
        r.content = content;
        r
    }

    /// A package record that names no `.deb`s (unlocked, or from before envc kept them)
    /// says why it cannot be rolled back; one that names them is installed again from them,
    /// at its version, with the closure's packages the update moved moved back.
    #[test]
    fn a_package_goes_back_to_the_debs_its_record_names_or_says_why_not() {
        let d = tempfile::tempdir().unwrap();
        let store = Store::open(d.path()).unwrap();
        let old = record(&store, "1.22", None);
        let why = package_not_kept("nginx", &old).unwrap();
        assert!(
            why.contains("package `nginx` is not rolled back")
                && why.contains("not locked")
                && why.contains("recorded before envc kept"),
            "{why}"
        );
        assert_eq!(
            package_spec("nginx", &old, &store).unwrap_err().to_string(),
            why
        );

        let then = vec![
            deb("nginx", "1.22"),
            deb("libssl3", "3.0.1"),
            deb("zlib1g", "1.2"),
        ];
        let to = record(&store, "1.22", Some(then));
        assert_eq!(package_not_kept("nginx", &to), None);
        let (spec, kept) = package_spec("nginx", &to, &store).unwrap();
        assert_eq!(spec.version.as_deref(), Some("1.22"));
        let names: Vec<&str> = spec.debs.iter().map(|d| d.pin.name.as_str()).collect();
        assert_eq!(names, ["nginx", "libssl3", "zlib1g"]);
        assert_eq!(spec.debs[1].pin.sha256, "libssl33.0.1");
        // The update moved nginx and libssl3, added libpcre2, and left zlib1g.
        let now = vec![
            deb("nginx", "1.24"),
            deb("libssl3", "3.0.9"),
            deb("libpcre2", "10"),
            deb("zlib1g", "1.2"),
        ];
        let since = record(&store, "1.24", Some(now));
        let moved = moved_since(&kept, Some(&since), &store);
        assert_eq!(
            moved,
            BTreeMap::from([
                ("libssl3".to_string(), "3.0.9".to_string()),
                ("nginx".to_string(), "1.24".to_string()),
            ])
        );
        assert!(moved_since(&kept, Some(&old), &store).is_empty());
        assert!(moved_since(&kept, None, &store).is_empty());
    }
}
