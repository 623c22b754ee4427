//! A package put back as its record had it, from the store alone: exactly its recorded
//! version, from the pinned `.deb`s its record names (`debs::KeptDebs`, each in the store
//! by its sha256), with the packages of its closure that the update moved moved back (as
//! Nix switches to the previous generation, with no archive: the lock that pinned the set
//! may have moved on). One the update installed is purged, with what it brought in that
//! nothing else needs. A package whose record names no `.deb`s (not locked: the target's
//! apt chose it; or recorded before envc kept them) is left at the version the update
//! installed, and the rollback says so.

use std::collections::BTreeMap;

use super::remote::{purge_packages, reinstall_packages, PackageSpec};
use super::Package;
use crate::debs::{DebSource, KeptDebs};
use crate::error::unusable;
use crate::error::StepError;
use crate::node_type::{BoxFuture, Restore, Restores};
use crate::record::RealizationRecord;
use crate::store::Store;
use crate::transport::Transport;

impl Restores for Package {
    fn restore_rank(&self) -> u8 {
        0
    }

    fn not_restorable(&self, name: &str, record: &RealizationRecord) -> Option<String> {
        package_not_kept(name, record)
    }

    fn kept(
        &self,
        _: &str,
        r: &RealizationRecord,
        store: &Store,
    ) -> Result<Vec<DebSource>, StepError> {
        // A record that names no set is not restorable, and says so (`not_restorable`).
        let Some(id) = &r.content else {
            return Ok(Vec::new());
        };
        let kept: KeptDebs = (store.get_json(id))
            .map_err(|e| unusable("the set of .debs its record names", id, e))?;
        Ok(kept.sources())
    }

    fn restore<'a>(
        &'a self,
        t: &'a Transport,
        store: &'a Store,
        items: &'a [&'a Restore],
    ) -> BoxFuture<'a, Vec<Result<String, StepError>>> {
        Box::pin(restore_packages(t, store, items))
    }
}

/// Purges those that did not exist then, then installs the others again in one
/// transaction.
async fn restore_packages(
    t: &Transport,
    store: &Store,
    items: &[&Restore],
) -> Vec<Result<String, StepError>> {
    let mut results: Vec<Option<Result<String, StepError>>> = vec![None; items.len()];
    let mut install: Vec<(usize, PackageSpec)> = Vec::new();
    let mut undo: BTreeMap<String, String> = BTreeMap::new();
    let mut purge: Vec<usize> = Vec::new();
    for (i, item) in items.iter().enumerate() {
        match &item.to {
            Some(r) => match package_spec(&item.name, r, store) {
                Ok((p, kept)) => {
                    undo.extend(moved_since(&kept, item.written.as_ref(), store));
                    install.push((i, p));
                }
                Err(e) => results[i] = Some(Err(e)),
            },
            None => purge.push(i),
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
    results
        .into_iter()
        .map(|r| r.unwrap_or_else(|| Err(StepError::new("internal error: no result"))))
        .collect()
}

/// Why a package's record cannot be rolled back to, when it cannot: it names no pinned
/// `.deb`s. `None` when it can (the `.deb`s themselves are looked for in the store when
/// the rollback installs them).
fn package_not_kept(name: &str, r: &RealizationRecord) -> Option<String> {
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::debs::KeptDeb;
    use crate::record::RealizationRecord;

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
