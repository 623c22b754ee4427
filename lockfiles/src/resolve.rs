//! Resolution (pure): from what an environment asks for to pins, over an [`Archive`]'s
//! indices.
//!
//! - A named package becomes the newest version in the suite (by dpkg's order), or the
//!   version asked for, with the `.deb`'s pool path, size and sha256.
//! - An image becomes the whole package set that `mmdebstrap --variant=apt --include=…`
//!   installs: every `Essential: yes` package, `apt`, and the includes, closed over
//!   `Depends` and `Pre-Depends` (Recommends are not installed: mmdebstrap turns them off).
//!
//! The image set is computed the way apt would choose, as closely as a few lines allow, and
//! is compared with what a real build installed. Known divergences from apt:
//! - alternatives (`a | b`): the first alternative whose candidate satisfies the version
//!   constraint, unless one of them is already in the set (apt does the same, but in its
//!   own order of visiting, so a set where two alternatives are each pulled in by someone
//!   else may differ);
//! - a virtual package with several providers: the provider with the highest Priority,
//!   then by name (apt scores providers with more criteria);
//! - `Conflicts`/`Breaks` are not read (the apt variant of a stable suite has none that
//!   matter);
//! - mmdebstrap's merged-usr hook installs `usr-is-merged` before apt runs, which satisfies
//!   `init-system-helpers`' `usrmerge | usr-is-merged`: pass `usr-is-merged` as an include
//!   to get the same set, otherwise `usrmerge` (and perl) are chosen.
//!
//! Checked against a real build: for the image builder's base packages (plus
//! `usr-is-merged`) on bookworm, the set is identical, versions included, to the
//! `packages` fact of an image built from the same archive state (145 packages). Note that
//! `mmdebstrap --simulate` is no reference: it skips the hooks and simulates the second
//! apt run against an empty system, so it reports `usrmerge`, `perl` and `lsb-base`, which
//! a real build does not install.

use std::collections::{BTreeMap, VecDeque};
use std::fmt;

use crate::archive::{Alternatives, Archive, Dep, Stanza};
use crate::model::{PackagePin, PinKey};

/// A request that cannot be pinned: which pin, why, and what to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResolveError {
    /// The key of the pin (`package:hello`, `image:debian-12` when the caller sets it).
    pub pin: PinKey,
    pub message: String,
    pub hint: String,
}

impl fmt::Display for ResolveError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}\n  hint: {}", self.pin, self.message, self.hint)
    }
}

impl std::error::Error for ResolveError {}

/// Pins each requested package: `(name, None)` the newest version, `(name, Some(v))` that
/// version. All errors are reported, not only the first.
pub fn resolve_packages(
    archive: &Archive,
    requests: &[(&str, Option<&str>)],
) -> Result<Vec<PackagePin>, Vec<ResolveError>> {
    let mut pins = Vec::new();
    let mut errors = Vec::new();
    for (name, version) in requests {
        match find(archive, name, *version, &PinKey::Package(name.to_string())) {
            Ok(s) => pins.push(pin(archive, s)),
            Err(e) => errors.push(e),
        }
    }
    if errors.is_empty() {
        pins.sort_by(|a, b| a.name.cmp(&b.name));
        pins.dedup_by(|a, b| a.name == b.name);
        Ok(pins)
    } else {
        Err(errors)
    }
}

/// The pin of one stanza of an archive.
pub fn pin(archive: &Archive, s: &Stanza) -> PackagePin {
    PackagePin {
        name: s.package.clone(),
        archive: s.origin.clone().unwrap_or_else(|| archive.pin.name.clone()),
        version: s.version.clone(),
        architecture: s.architecture.clone(),
        filename: s.filename.clone(),
        size: s.size,
        sha256: s.sha256.clone(),
        closure: None,
    }
}

/// The stanza of a package at a version (the newest when `None`), or an error that says
/// what exists instead.
fn find<'a>(
    archive: &'a Archive,
    name: &str,
    version: Option<&str>,
    key: &PinKey,
) -> Result<&'a Stanza, ResolveError> {
    let a = &archive.pin;
    let versions = archive.versions(name);
    if versions.is_empty() {
        let providers = archive.providers(name);
        let (message, hint) = if !providers.is_empty() {
            let names: Vec<&str> = providers.iter().map(|(p, _)| p.as_str()).collect();
            (
                format!(
                    "`{name}` is a virtual package in {} (provided by {})",
                    a.name,
                    names.join(", ")
                ),
                "name one of the packages that provide it".to_string(),
            )
        } else {
            let hint = match did_you_mean(archive, name) {
                Some(close) => {
                    format!("did you mean `{close}`? Check the name in the environment file")
                }
                None => {
                    "check the name in the environment file (`apt-cache search` finds packages)"
                        .into()
                }
            };
            (
                format!(
                    "package `{name}` does not exist in {} ({} {} {}, {})",
                    a.name,
                    a.mirror,
                    a.suite,
                    a.components.join(" "),
                    a.architecture
                ),
                hint,
            )
        };
        return Err(ResolveError {
            pin: key.clone(),
            message,
            hint,
        });
    }
    match version {
        None => Ok(&versions[0]),
        Some(v) => versions.iter().find(|s| s.version == v).ok_or_else(|| {
            let available: Vec<&str> = versions.iter().map(|s| s.version.as_str()).collect();
            ResolveError {
                pin: key.clone(),
                message: format!(
                    "`{name}` version {v} is not in {} (available: {})",
                    a.name,
                    available.join(", ")
                ),
                hint: format!(
                    "a suite keeps only its current versions: ask for one of those, or pin an \
                     archive that has {v} (a snapshot mirror)"
                ),
            }
        }),
    }
}

/// The closest package name by edit distance, when it is close enough to be a typo.
fn did_you_mean(archive: &Archive, name: &str) -> Option<String> {
    let limit = (name.chars().count() / 3).clamp(1, 3);
    let mut best: Option<(usize, &str)> = None;
    for candidate in archive.names() {
        if candidate.len().abs_diff(name.len()) > limit {
            continue;
        }
        let d = edit_distance(name, candidate);
        if d <= limit && best.is_none_or(|(bd, _)| d < bd) {
            best = Some((d, candidate));
        }
    }
    best.map(|(_, n)| n.to_string())
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = if ca == *cb {
                prev
            } else {
                1 + prev.min(row[j]).min(cur)
            };
            prev = cur;
        }
    }
    row[b.len()]
}

/// The package set of an image built with `mmdebstrap --variant=apt --include=INCLUDES`,
/// sorted by name. An include may be `name=version`. Include `usr-is-merged` when the
/// build uses mmdebstrap's merged-usr hook (envc's image builder does). See the module's
/// notes for where this may differ from apt.
pub fn resolve_image(
    archive: &Archive,
    includes: &[&str],
) -> Result<Vec<PackagePin>, Vec<ResolveError>> {
    let mut errors = Vec::new();
    let mut seeds: Vec<&Stanza> = archive
        .names()
        .filter_map(|n| archive.candidate(n))
        .filter(|s| s.essential)
        .collect();
    match archive.candidate("apt") {
        Some(s) => seeds.push(s),
        None => errors.push(ResolveError {
            pin: archive.pin.key(),
            message: format!("`apt` is not in {}", archive.pin.name),
            hint: "an image is built with apt: pin a Debian suite that has it".into(),
        }),
    }
    for include in includes {
        let (name, version) = match include.split_once('=') {
            Some((n, v)) => (n, Some(v)),
            None => (*include, None),
        };
        match find(archive, name, version, &PinKey::Package(name.to_string())) {
            Ok(s) => seeds.push(s),
            Err(e) => errors.push(e),
        }
    }
    let none = BTreeMap::new();
    let set = close(archive, &none, seeds, &mut errors);
    if !errors.is_empty() {
        return Err(finish(set, errors).err().unwrap_or_default());
    }
    // Nothing to start from: every member is new, with its stanza.
    Ok(set
        .into_values()
        .filter_map(|m| match m {
            Member::New(s) => Some(pin(archive, s)),
            Member::Start(_) => None,
        })
        .collect())
}

/// What every Debian system has: the `Priority: required` and `Essential: yes` packages
/// and their closure (debootstrap's minbase). The start of a host envc knows nothing of.
pub fn required_set(archive: &Archive) -> Result<Vec<(String, String)>, Vec<ResolveError>> {
    let seeds: Vec<&Stanza> = archive
        .names()
        .filter_map(|n| archive.candidate(n))
        .filter(|s| s.essential || s.priority.as_deref() == Some("required"))
        .collect();
    let mut errors = Vec::new();
    let none = BTreeMap::new();
    let set = close(archive, &none, seeds, &mut errors);
    finish(set, errors)
}

/// The closure of a package installed onto a system that has `start` (name → version): the
/// packages it depends on, directly or not (Depends and Pre-Depends), that `start` does not
/// satisfy, sorted by name, without the package itself. `version` as for
/// [`resolve_packages`].
pub fn resolve_closure(
    archive: &Archive,
    start: &BTreeMap<String, String>,
    name: &str,
    version: Option<&str>,
) -> Result<Vec<PackagePin>, Vec<ResolveError>> {
    let root =
        find(archive, name, version, &PinKey::Package(name.to_string())).map_err(|e| vec![e])?;
    let mut errors = Vec::new();
    let set = close(archive, start, vec![root], &mut errors);
    if !errors.is_empty() {
        return Err(finish(set, errors).err().unwrap_or_default());
    }
    Ok(set
        .into_values()
        .filter_map(|m| match m {
            Member::New(s) if s.package != name => Some(pin(archive, s)),
            _ => None,
        })
        .collect())
}

/// A package of a set being closed: one the system starts with (at its version), or one
/// the closure adds.
#[derive(Clone, Copy)]
enum Member<'a> {
    Start(&'a str),
    New(&'a Stanza),
}

impl Member<'_> {
    fn version(&self) -> &str {
        match self {
            Member::Start(v) => v,
            Member::New(s) => &s.version,
        }
    }
}

/// `start` and `seeds`, closed over Depends and Pre-Depends: apt's choices, as closely as
/// the module's notes say.
fn close<'a>(
    archive: &'a Archive,
    start: &'a BTreeMap<String, String>,
    seeds: Vec<&'a Stanza>,
    errors: &mut Vec<ResolveError>,
) -> BTreeMap<String, Member<'a>> {
    let mut set: BTreeMap<String, Member<'a>> = start
        .iter()
        .map(|(n, v)| (n.clone(), Member::Start(v)))
        .collect();
    let mut queue: VecDeque<&Stanza> = VecDeque::new();
    // Or-groups (and virtual names with several providers) wait until every hard
    // dependency is in, so that a choice already made elsewhere satisfies them.
    let mut deferred: VecDeque<(&Alternatives, &str)> = VecDeque::new();
    for s in seeds {
        add(&mut set, &mut queue, s);
    }
    loop {
        while let Some(s) = queue.pop_front() {
            for group in s.pre_depends.iter().chain(&s.depends) {
                if satisfied(archive, &set, group) {
                    continue;
                }
                let choices = choices(archive, group);
                match choices.as_slice() {
                    [] => errors.push(unsatisfiable(archive, s, group)),
                    [only] if group.len() == 1 => add(&mut set, &mut queue, only),
                    _ => deferred.push_back((group, &s.package)),
                }
            }
        }
        let Some((group, _)) = deferred.pop_front() else {
            break;
        };
        if !satisfied(archive, &set, group) {
            if let Some(first) = choices(archive, group).first() {
                add(&mut set, &mut queue, first);
            }
        }
    }
    set
}

/// The set as `name=version`, or every error, sorted and once each.
fn finish(
    set: BTreeMap<String, Member<'_>>,
    mut errors: Vec<ResolveError>,
) -> Result<Vec<(String, String)>, Vec<ResolveError>> {
    if errors.is_empty() {
        Ok(set
            .into_iter()
            .map(|(n, m)| (n, m.version().to_string()))
            .collect())
    } else {
        errors.sort_by(|a, b| a.pin.cmp(&b.pin).then_with(|| a.message.cmp(&b.message)));
        errors.dedup();
        Err(errors)
    }
}

fn add<'a>(
    set: &mut BTreeMap<String, Member<'a>>,
    queue: &mut VecDeque<&'a Stanza>,
    s: &'a Stanza,
) {
    // A package the system starts with at another version is upgraded: nothing reaches
    // here unless the start's version fails a dependency.
    let present = match set.get(&s.package) {
        Some(Member::New(_)) => true,
        Some(Member::Start(v)) => *v == s.version,
        None => false,
    };
    if !present {
        set.insert(s.package.clone(), Member::New(s));
        queue.push_back(s);
    }
}

/// Whether a package of the set satisfies one of the alternatives (by name and version, or
/// by providing it).
fn satisfied(archive: &Archive, set: &BTreeMap<String, Member<'_>>, group: &Alternatives) -> bool {
    group.iter().any(|dep| {
        set.get(&dep.name)
            .is_some_and(|m| version_ok(dep, m.version()))
            || archive
                .providers(&dep.name)
                .iter()
                .any(|(p, v)| set.contains_key(p) && provided_ok(dep, v.as_deref()))
    })
}

/// The packages that could satisfy a group, best first: for each alternative in order, the
/// real package if its candidate satisfies the constraint, then its providers (by Priority,
/// then name). When nothing satisfies the constraints, the packages that exist by name are
/// offered anyway: apt would fail there, and the build will say so; the lock still shows
/// the set.
fn choices<'a>(archive: &'a Archive, group: &Alternatives) -> Vec<&'a Stanza> {
    let mut strict = Vec::new();
    let mut loose = Vec::new();
    for dep in group {
        if let Some(s) = archive.candidate(&dep.name) {
            if version_ok(dep, &s.version) {
                strict.push(s);
            }
            loose.push(s);
        }
        let mut providers: Vec<(&Stanza, bool)> = archive
            .providers(&dep.name)
            .iter()
            .filter_map(|(p, v)| Some((archive.candidate(p)?, provided_ok(dep, v.as_deref()))))
            .collect();
        providers.sort_by_key(|(s, _)| (priority_rank(s.priority.as_deref()), s.package.clone()));
        for (s, ok) in providers {
            if ok {
                strict.push(s);
            }
            loose.push(s);
        }
    }
    if strict.is_empty() {
        loose
    } else {
        strict
    }
}

pub(crate) fn version_ok(dep: &Dep, version: &str) -> bool {
    dep.constraint
        .as_ref()
        .is_none_or(|(rel, v)| rel.holds(version, v))
}

/// A provided name satisfies a versioned dependency only when it is provided with a version.
pub(crate) fn provided_ok(dep: &Dep, provided: Option<&str>) -> bool {
    match (&dep.constraint, provided) {
        (None, _) => true,
        (Some((rel, v)), Some(p)) => rel.holds(p, v),
        (Some(_), None) => false,
    }
}

fn priority_rank(p: Option<&str>) -> u8 {
    match p {
        Some("required") => 0,
        Some("important") => 1,
        Some("standard") => 2,
        Some("optional") => 3,
        _ => 4,
    }
}

fn unsatisfiable(archive: &Archive, by: &Stanza, group: &Alternatives) -> ResolveError {
    let names: Vec<String> = group
        .iter()
        .map(|d| match &d.constraint {
            Some((r, v)) => format!("{} ({} {v})", d.name, r.as_str()),
            None => d.name.clone(),
        })
        .collect();
    ResolveError {
        pin: PinKey::Package(by.package.clone()),
        message: format!(
            "`{}` {} depends on `{}`, which is not in {}",
            by.package,
            by.version,
            names.join(" | "),
            archive.pin.name
        ),
        hint: format!(
            "the suite cannot install `{}`: add the component or suite that has its dependency",
            by.package
        ),
    }
}

/// Checks pins against an archive's current indices: each must still be there with the same
/// version, file, size and hash. Errors name the pin and say whether the lock is stale (the
/// suite moved on) or does not verify (same version, other bytes).
pub fn verify_packages(archive: &Archive, pins: &[PackagePin]) -> Vec<ResolveError> {
    let mut errors = Vec::new();
    for p in pins.iter().filter(|p| p.archive == archive.pin.name) {
        let key = p.key();
        let versions = archive.versions(&p.name);
        let Some(s) = versions.iter().find(|s| s.version == p.version) else {
            let now = versions
                .first()
                .map_or("no version at all".to_string(), |s| {
                    format!("now {}", s.version)
                });
            errors.push(ResolveError {
                pin: key.clone(),
                message: format!(
                    "`{}` {} is no longer in {} ({now})",
                    p.name, p.version, archive.pin.name
                ),
                hint: format!("the suite moved on: run `envc lock FILE --update={key}`"),
            });
            continue;
        };
        let ours = (&p.filename, p.size, &p.sha256);
        let theirs = (&s.filename, s.size, &s.sha256);
        if ours != theirs {
            errors.push(ResolveError {
                pin: key.clone(),
                message: format!(
                    "`{}` {} does not verify: the lock says {} ({} bytes, sha256 {}), {} lists {} \
                     ({} bytes, sha256 {})",
                    p.name,
                    p.version,
                    p.filename,
                    p.size,
                    p.sha256,
                    archive.pin.name,
                    s.filename,
                    s.size,
                    s.sha256
                ),
                hint: format!(
                    "the lockfile was edited, or the archive rebuilt the package under the same \
                     version: check the change, then run `envc lock FILE --update={key}`"
                ),
            });
        }
    }
    errors
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::archive::{parse_packages, Release};
    use crate::model::ArchivePin;
    use std::collections::BTreeSet;

    /// What every image of this archive has: essential packages, apt, their closure.
    fn base_set(archive: &Archive) -> BTreeSet<String> {
        resolve_image(archive, &[])
            .unwrap()
            .into_iter()
            .map(|p| p.name)
            .collect()
    }

    /// Builds an archive from a compact description: one package per line,
    /// `name version [essential] [depends: …] [pre: …] [provides: …] [priority: …]`.
    pub(crate) fn archive(spec: &str) -> Archive {
        let mut text = String::new();
        for line in spec.lines().map(str::trim).filter(|l| !l.is_empty()) {
            let (head, fields) = match line.split_once(';') {
                Some((h, f)) => (h, f),
                None => (line, ""),
            };
            let mut words = head.split_whitespace();
            let name = words.next().unwrap();
            let version = words.next().unwrap();
            text.push_str(&format!(
                "Package: {name}\nVersion: {version}\nArchitecture: amd64\n\
                 Filename: pool/main/{name}_{version}_amd64.deb\nSize: {}\nSHA256: {:064x}\n",
                name.len() * 100,
                name.len() + version.len()
            ));
            if words.next() == Some("essential") {
                text.push_str("Essential: yes\n");
            }
            for field in fields.split(';').map(str::trim).filter(|f| !f.is_empty()) {
                let (k, v) = field.split_once(':').unwrap();
                let k = match k.trim() {
                    "depends" => "Depends",
                    "pre" => "Pre-Depends",
                    "provides" => "Provides",
                    "priority" => "Priority",
                    other => panic!("unknown field {other}"),
                };
                text.push_str(&format!("{k}: {}\n", v.trim()));
            }
            text.push('\n');
        }
        let pin = ArchivePin {
            name: "debian/test".into(),
            mirror: "http://mirror.test/debian".into(),
            suite: "test".into(),
            architecture: "amd64".into(),
            components: vec!["main".into()],
            release_sha256: "0".repeat(64),
            date: String::new(),
            signed_by: None,
            with: Vec::new(),
        };
        let release = Release {
            origin: String::new(),
            suite: "test".into(),
            codename: "test".into(),
            date: String::new(),
            architectures: vec!["amd64".into()],
            components: vec!["main".into()],
            acquire_by_hash: false,
            sha256: BTreeMap::new(),
        };
        Archive::new(pin, release, Vec::new(), parse_packages(&text).unwrap())
    }

    const SUITE: &str = "
        base-files 12.4 essential
        dpkg 1.21.22 essential ; pre: libc6 (>= 2.34), tar
        tar 1.34 essential ; pre: libc6
        libc6 2.36-9 ; depends: libgcc-s1
        libc6 2.36-9+deb12u4 ; depends: libgcc-s1
        libgcc-s1 12.2.0
        apt 2.6.1 ; depends: libapt-pkg6.0, debconf (>= 0.5) | debconf-2.0
        libapt-pkg6.0 2.6.1
        debconf 1.5.82 ; priority: required
        cdebconf 0.270 ; provides: debconf-2.0 ; priority: optional
        hello 2.10-3 ; depends: libc6
        hello 2.10-2 ; depends: libc6
        init-system-helpers 1.65 essential ; depends: usrmerge | usr-is-merged
        usrmerge 35 ; depends: perl
        usr-is-merged 35
        perl 5.36
        mailer 1 ; depends: mail-transport-agent
        postfix 3.7 ; provides: mail-transport-agent ; priority: optional
        exim4 4.96 ; provides: mail-transport-agent ; priority: standard
        awkward 1 ; depends: nosuch (>= 1) | alsonot
        picky 1 ; depends: libc6 (>= 3)
        fancy 1 ; depends: virt (>= 2) | fallback
        provider 1 ; provides: virt (= 2)
        fallback 1
    ";

    /// Pins as `name=version`, space-separated, or the errors, one per line.
    fn rendered(result: Result<Vec<PackagePin>, Vec<ResolveError>>) -> String {
        match result {
            Ok(pins) => pins
                .iter()
                .map(|p| format!("{}={}", p.name, p.version))
                .collect::<Vec<_>>()
                .join(" "),
            Err(errors) => errors
                .iter()
                .map(|e| e.to_string())
                .collect::<Vec<_>>()
                .join("\n"),
        }
    }

    /// Resolves `requests` (space-separated `name` or `name=version`) and renders the pins
    /// as `name=version` or the errors.
    fn check(requests: &str, expected: &str) {
        let archive = archive(SUITE);
        let reqs: Vec<(&str, Option<&str>)> = requests
            .split_whitespace()
            .map(|r| match r.split_once('=') {
                Some((n, v)) => (n, Some(v)),
                None => (r, None),
            })
            .collect();
        let got = rendered(resolve_packages(&archive, &reqs));
        assert_eq!(got, expected, "{requests}");
    }

    #[test]
    fn packages_resolve_to_the_newest_or_the_requested_version() {
        check("hello", "hello=2.10-3");
        check("hello=2.10-2 libc6", "hello=2.10-2 libc6=2.36-9+deb12u4");
        check("libc6 hello libc6", "hello=2.10-3 libc6=2.36-9+deb12u4");
        check(
            "hello=2.9",
            "package:hello: `hello` version 2.9 is not in debian/test (available: 2.10-3, 2.10-2)\n  \
             hint: a suite keeps only its current versions: ask for one of those, or pin an archive that has 2.9 (a snapshot mirror)",
        );
        check(
            "helo",
            "package:helo: package `helo` does not exist in debian/test (http://mirror.test/debian test main, amd64)\n  \
             hint: did you mean `hello`? Check the name in the environment file",
        );
        check(
            "zzzzzzzzzz",
            "package:zzzzzzzzzz: package `zzzzzzzzzz` does not exist in debian/test (http://mirror.test/debian test main, amd64)\n  \
             hint: check the name in the environment file (`apt-cache search` finds packages)",
        );
        check(
            "mail-transport-agent hello",
            "package:mail-transport-agent: `mail-transport-agent` is a virtual package in debian/test (provided by exim4, postfix)\n  \
             hint: name one of the packages that provide it",
        );
    }

    #[test]
    fn pins_carry_the_deb_s_path_size_and_hash() {
        let archive = archive(SUITE);
        let pins = resolve_packages(&archive, &[("hello", None)]).unwrap();
        assert_eq!(
            pins,
            [PackagePin {
                name: "hello".into(),
                archive: "debian/test".into(),
                version: "2.10-3".into(),
                architecture: "amd64".into(),
                filename: "pool/main/hello_2.10-3_amd64.deb".into(),
                size: 500,
                sha256: format!("{:064x}", 11),
                closure: None,
            }]
        );
    }

    /// Resolves an image with `includes` and renders the set beyond the base set (essential
    /// packages, apt and their closure), or the errors.
    fn check_image(includes: &[&str], expected: &str) {
        let archive = archive(SUITE);
        let base = base_set(&archive);
        let got = match resolve_image(&archive, includes) {
            Ok(set) => set
                .iter()
                .filter(|p| !base.contains(&p.name))
                .map(|p| format!("{}={}", p.name, p.version))
                .collect::<Vec<_>>()
                .join(" "),
            Err(errors) => errors
                .iter()
                .map(|e| e.to_string())
                .collect::<Vec<_>>()
                .join("\n"),
        };
        assert_eq!(got, expected, "{includes:?}");
    }

    #[test]
    fn the_base_set_is_essential_apt_and_their_closure() {
        let archive = archive(SUITE);
        let set: Vec<String> = resolve_image(&archive, &[])
            .unwrap()
            .into_iter()
            .map(|p| format!("{}={}", p.name, p.version))
            .collect();
        assert_eq!(
            set.join(" "),
            // debconf, not cdebconf: the first alternative; usrmerge (and perl) because no
            // usr-is-merged was included.
            "apt=2.6.1 base-files=12.4 debconf=1.5.82 dpkg=1.21.22 init-system-helpers=1.65 \
             libapt-pkg6.0=2.6.1 libc6=2.36-9+deb12u4 libgcc-s1=12.2.0 perl=5.36 tar=1.34 \
             usrmerge=35"
        );
    }

    #[test]
    fn images_close_over_dependencies() {
        check_image(&[], "");
        check_image(&["hello"], "hello=2.10-3");
        check_image(&["hello=2.10-2"], "hello=2.10-2");
        // An alternative already chosen satisfies the group: usr-is-merged, included, keeps
        // usrmerge and perl out (as mmdebstrap's merged-usr hook does).
        let archive = archive(SUITE);
        let set = resolve_image(&archive, &["usr-is-merged"]).unwrap();
        let names: Vec<&str> = set.iter().map(|p| p.name.as_str()).collect();
        assert!(
            names.contains(&"usr-is-merged") && !names.contains(&"usrmerge"),
            "{names:?}"
        );
        assert!(!names.contains(&"perl"), "{names:?}");
        // A virtual package with several providers: the higher Priority.
        check_image(&["mailer"], "exim4=4.96 mailer=1");
        // ... unless one is already there.
        check_image(&["postfix", "mailer"], "mailer=1 postfix=3.7");
        // A versioned dependency on a virtual name needs a versioned Provides.
        check_image(&["fancy"], "fancy=1 provider=1");
        check_image(
            &["awkward"],
            "package:awkward: `awkward` 1 depends on `nosuch (>= 1) | alsonot`, which is not in debian/test\n  \
             hint: the suite cannot install `awkward`: add the component or suite that has its dependency",
        );
        // An unsatisfiable version constraint still picks the package (apt would fail; the
        // build will say so).
        check_image(&["picky"], "picky=1");
        check_image(
            &["helo", "hello=1"],
            "package:hello: `hello` version 1 is not in debian/test (available: 2.10-3, 2.10-2)\n  \
             hint: a suite keeps only its current versions: ask for one of those, or pin an archive that has 1 (a snapshot mirror)\n\
             package:helo: package `helo` does not exist in debian/test (http://mirror.test/debian test main, amd64)\n  \
             hint: did you mean `hello`? Check the name in the environment file",
        );
    }

    /// The closure of `package` (`name` or `name=version`) onto `start` (space-separated
    /// `name=version`, or `base` for the image base set), rendered as `name=version`.
    fn check_closure(start: &str, package: &str, expected: &str) {
        let archive = archive(SUITE);
        let start: BTreeMap<String, String> = if start == "base" {
            resolve_image(&archive, &[])
                .unwrap()
                .into_iter()
                .map(|p| (p.name, p.version))
                .collect()
        } else {
            start
                .split_whitespace()
                .map(|w| {
                    let (n, v) = w.split_once('=').unwrap();
                    (n.to_string(), v.to_string())
                })
                .collect()
        };
        let (name, version) = match package.split_once('=') {
            Some((n, v)) => (n, Some(v)),
            None => (package, None),
        };
        let got = rendered(resolve_closure(&archive, &start, name, version));
        assert_eq!(got, expected, "{package} onto {start:?}");
    }

    #[test]
    fn a_closure_is_what_the_start_lacks() {
        // Onto nothing: every dependency, down to the bottom.
        check_closure("", "hello", "libc6=2.36-9+deb12u4 libgcc-s1=12.2.0");
        // Onto a system that has them: nothing more.
        check_closure("base", "hello", "");
        // A start that has a dependency at a version that no longer satisfies it.
        check_closure(
            "libc6=2.36-9 libgcc-s1=12.2.0",
            "picky",
            "libc6=2.36-9+deb12u4",
        );
        check_closure("libc6=2.36-9 libgcc-s1=12.2.0", "hello", "");
        // Alternatives and virtual names: what the start provides is taken.
        check_closure("", "mailer", "exim4=4.96");
        check_closure("postfix=3.7", "mailer", "");
        // A package the start already has brings nothing.
        check_closure("hello=2.10-3", "hello", "");
        check_closure(
            "",
            "awkward",
            "package:awkward: `awkward` 1 depends on `nosuch (>= 1) | alsonot`, which is not in debian/test\n  \
             hint: the suite cannot install `awkward`: add the component or suite that has its dependency",
        );
        check_closure(
            "",
            "helo",
            "package:helo: package `helo` does not exist in debian/test (http://mirror.test/debian test main, amd64)\n  \
             hint: did you mean `hello`? Check the name in the environment file",
        );
    }

    #[test]
    fn the_required_set_is_required_and_essential_packages_closed() {
        let archive = archive(SUITE);
        let set: Vec<String> = required_set(&archive)
            .unwrap()
            .into_iter()
            .map(|(n, v)| format!("{n}={v}"))
            .collect();
        // debconf is Priority: required; apt is not in it (an image adds it).
        assert_eq!(
            set.join(" "),
            "base-files=12.4 debconf=1.5.82 dpkg=1.21.22 init-system-helpers=1.65 \
             libc6=2.36-9+deb12u4 libgcc-s1=12.2.0 perl=5.36 tar=1.34 usrmerge=35"
        );
    }

    #[test]
    fn verification_tells_stale_from_tampered() {
        let archive = archive(SUITE);
        let mut pins =
            resolve_packages(&archive, &[("hello", None), ("libc6", Some("2.36-9"))]).unwrap();
        assert_eq!(verify_packages(&archive, &pins), []);
        pins[0].version = "2.10-1".into();
        pins[1].sha256 = "f".repeat(64);
        let errors: Vec<String> = verify_packages(&archive, &pins)
            .iter()
            .map(|e| e.to_string())
            .collect();
        assert_eq!(
            errors,
            [
                "package:hello: `hello` 2.10-1 is no longer in debian/test (now 2.10-3)\n  \
                 hint: the suite moved on: run `envc lock FILE --update=package:hello`",
                &format!(
                    "package:libc6: `libc6` 2.36-9 does not verify: the lock says \
                     pool/main/libc6_2.36-9_amd64.deb (500 bytes, sha256 {}), debian/test lists \
                     pool/main/libc6_2.36-9_amd64.deb (500 bytes, sha256 {:064x})\n  \
                     hint: the lockfile was edited, or the archive rebuilt the package under the \
                     same version: check the change, then run `envc lock FILE --update=package:libc6`",
                    "f".repeat(64),
                    11
                ),
            ]
        );
    }

    #[test]
    fn edit_distance_is_levenshtein() {
        for (a, b, d) in [
            ("", "", 0),
            ("a", "", 1),
            ("helo", "hello", 1),
            ("kitten", "sitting", 3),
        ] {
            assert_eq!(edit_distance(a, b), d, "{a} {b}");
            assert_eq!(edit_distance(b, a), d, "{b} {a}");
        }
    }
}
