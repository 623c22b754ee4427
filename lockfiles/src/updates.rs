//! `envc lock --update=security`: the lockfile moved only where the security suites changed
//! (the usual weekly job), every other pin kept as it was.
//!
//! A full resolution (`fresh`) says what each pin would be today. A pin takes its fresh
//! value only where that comes from a security suite (`debian/bookworm-security`) at another
//! version than the lockfile pins: a package the environment names (with its closure, which
//! was resolved with it), a package of a closure alone, and, in an image's set, the packages
//! the security suite moved: the set becomes today's, every other package at its pinned
//! version (so a package only the moved ones need joins, one only the old ones needed, such
//! as the kernel a security update replaced, leaves). The security
//! suites' own pins move to the Releases those versions were verified against, and a suite
//! pinned alone by an older envc gains the suites beside it (its own Release kept).
//!
//! What this does not do: move a package that the point release (`-updates`, or the suite
//! itself) moved; `envc lock FILE --update` moves everything. An image whose patched
//! package needs a newer dependency from the point release fails its build naming what
//! differs (`image.sh` checks the installed set against the pinned one): lock it with
//! `--update=image:NAME` then.

use std::collections::BTreeSet;

use crate::model::{ArchivePin, ImagePin, Lockfile, PackagePin};

/// Whether a pin of `fresh` comes from a security suite.
fn from_security(lock: &Lockfile, p: &PackagePin) -> bool {
    lock.archive(&p.archive)
        .is_some_and(ArchivePin::is_security)
}

/// `old` with the pins the security suites moved taken from `fresh` (see the module's
/// docs). `fresh` is what a full resolution gives today.
pub fn update_security(old: &Lockfile, fresh: &Lockfile) -> Lockfile {
    let mut out = old.clone();
    let mut archives: BTreeSet<String> = BTreeSet::new();
    // Packages the environment names, and packages of closures.
    for f in &fresh.packages {
        let moved = from_security(fresh, f)
            && old
                .package(&f.name)
                .is_none_or(|o| (&o.version, &o.sha256) != (&f.version, &f.sha256));
        if !moved {
            continue;
        }
        // Not pinned: a member the new versions bring is pinned below; a package the
        // environment named since is not the security update's to add.
        let Some(p) = out.packages.iter_mut().find(|p| p.name == f.name) else {
            continue;
        };
        archives.insert(f.archive.clone());
        // The role stays the lockfile's: a named package keeps its closure list, extended
        // by what the new version brings; a package of a closure stays one.
        let closure = p.closure.clone();
        *p = f.clone();
        p.closure = closure.map(|mut c| {
            if let Some(fc) = &f.closure {
                c.packages.extend(fc.packages.iter().cloned());
                c.packages.sort();
                c.packages.dedup();
            }
            c
        });
    }
    // Members a moved package's closure now names, that the lockfile does not pin yet.
    let missing: Vec<PackagePin> = fresh
        .packages
        .iter()
        .filter(|f| out.package(&f.name).is_none() && out.in_a_closure(&f.name))
        .cloned()
        .collect();
    archives.extend(missing.iter().map(|m| m.archive.clone()));
    out.packages.extend(missing);
    // Images: today's set, every package the security suite did not move kept at its
    // pinned version (what the old set had and today's lacks, such as a kernel the
    // security update replaced, leaves with it).
    for image in &mut out.images {
        let Some(fi) = fresh.image(&image.name) else {
            continue;
        };
        if security_moves(fresh, image, fi).is_empty() {
            continue;
        }
        let set: Vec<PackagePin> = fi
            .packages
            .iter()
            .map(|f| {
                let kept = image.packages.iter().find(|o| o.name == f.name);
                match kept {
                    Some(o) if !from_security(fresh, f) => o.clone(),
                    _ => {
                        archives.insert(f.archive.clone());
                        f.clone()
                    }
                }
            })
            .collect();
        image.packages = set;
    }
    // The archives the moved pins were verified against, and the suites beside them.
    for name in &archives {
        let main = fresh.main_of(name).to_string();
        take_archive(&mut out, fresh, name);
        if let Some(f) = fresh.archive(&main) {
            if let Some(o) = out.archives.iter_mut().find(|a| a.name == main) {
                if o.with.is_empty() && !f.with.is_empty() {
                    // Pinned alone by an older envc: the suites beside it join, pinned now.
                    o.with = f.with.clone();
                }
            }
        }
    }
    // Every suite `with` names is pinned (an updates suite joins at today's Release).
    let named: Vec<String> = out.archives.iter().flat_map(|a| a.with.clone()).collect();
    for name in named {
        if out.archive(&name).is_none() {
            take_archive(&mut out, fresh, &name);
        }
    }
    out.normalize();
    out
}

fn take_archive(out: &mut Lockfile, fresh: &Lockfile, name: &str) {
    let Some(f) = fresh.archive(name) else {
        return;
    };
    match out.archives.iter_mut().find(|a| a.name == name) {
        Some(o) => {
            let with = o.with.clone();
            *o = f.clone();
            // A main suite's own Release is not the security update's to move.
            o.with = if with.is_empty() {
                f.with.clone()
            } else {
                with
            };
        }
        None => out.archives.push(f.clone()),
    }
}

/// The packages of `fresh`'s set of an image that the security suite moved against the
/// lockfile's set `old`.
fn security_moves<'a>(fresh: &Lockfile, old: &ImagePin, new: &'a ImagePin) -> Vec<&'a PackagePin> {
    new.packages
        .iter()
        .filter(|f| from_security(fresh, f))
        .filter(|f| {
            old.packages
                .iter()
                .find(|o| o.name == f.name)
                .is_none_or(|o| (&o.version, &o.sha256) != (&f.version, &f.sha256))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testdata::sample;

    fn security_pin(lock: &Lockfile) -> ArchivePin {
        ArchivePin {
            name: "debian/bookworm-security".into(),
            mirror: "http://deb.debian.org/debian-security".into(),
            suite: "bookworm-security".into(),
            with: Vec::new(),
            ..lock.archives[0].clone()
        }
    }

    /// `fresh`: the sample a week later: hello and libc6 patched by the security suite
    /// (libc6 in the image too), libgreet1 and the image's apt moved by the point release,
    /// the suite's own Release moved.
    fn fresh() -> Lockfile {
        let mut fresh = sample();
        fresh.archives[0].release_sha256 = "9".repeat(64);
        fresh.archives[0].with = vec!["debian/bookworm-security".into()];
        fresh.archives.push(security_pin(&fresh));
        let patch = |p: &mut PackagePin, version: String, sha: char| {
            let (dir, _) = p.filename.rsplit_once('/').unwrap_or_default();
            let dir = dir.replacen("pool/", "pool/updates/", 1);
            p.archive = "debian/bookworm-security".into();
            p.filename = format!("{dir}/{}_{version}_{}.deb", p.name, p.architecture);
            p.version = version;
            p.sha256 = sha.to_string().repeat(64);
        };
        for p in fresh.packages.iter_mut() {
            match p.name.as_str() {
                "hello" | "libc6" => patch(p, format!("{}+deb12u1", p.version), '7'),
                // The point release moved it: not the security update's to take.
                _ => p.sha256 = "8".repeat(64),
            }
        }
        for p in fresh.images[0].packages.iter_mut() {
            if p.name == "libc6" {
                patch(p, "2.36-9+deb12u14".into(), '6');
            } else {
                p.sha256 = "8".repeat(64);
            }
        }
        fresh.normalize();
        fresh
    }

    #[test]
    fn only_what_the_security_suite_moved_moves() {
        let old = sample();
        let fresh = fresh();
        let new = update_security(&old, &fresh);
        let d = crate::diff(&old, &new).to_string();
        assert!(
            d.contains("`package:hello`: 2.10-3 → 2.10-3+deb12u1"),
            "{d}"
        );
        assert!(d.contains("`package:libc6`"), "{d}");
        assert!(!d.contains("libgreet1"), "{d}");
        assert!(
            d.contains("`libc6` 2.36-9+deb12u13 → 2.36-9+deb12u14 (debian/bookworm-security)"),
            "{d}"
        );
        assert!(!d.contains("`apt`"), "{d}");
        assert!(d.contains("`archive:debian/bookworm-security`"), "{d}");
        // The suite keeps its Release, and now holds the security suite beside it.
        let main = new.archive("debian/bookworm").unwrap();
        assert_eq!(main.release_sha256, old.archives[0].release_sha256);
        assert_eq!(main.with, ["debian/bookworm-security"]);
        assert_eq!(crate::consistency::inconsistencies(&new), []);
        // Nothing moved: nothing changes.
        assert_eq!(update_security(&new, &fresh), new);
    }
}
