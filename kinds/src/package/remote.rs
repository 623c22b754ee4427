//! Debian packages, one transaction per batch. A locked package installs exactly its pinned
//! `.deb`s, shipped from the controller's store (`crate::debs`) and handed to dpkg, with no
//! apt, index or mirror on the target: the controller first checks, as apt would, that they
//! install onto what the target has (`envc_lockfiles::installable`), from the `.deb`s' own
//! control paragraphs and dpkg's list of the target's packages, so that a dependency the
//! target lacks stops the step before anything is unpacked. An unlocked package is installed
//! by the target's apt from its own sources (`name=version` when the source asks for a
//! version). `dpkg --configure -a` runs first so that a run killed in the middle of dpkg
//! converges; both wait for dpkg's lock (up to 10 minutes) instead of failing when another
//! apt or dpkg runs.

use std::collections::BTreeMap;

use envc_lockfiles::installable::{self, Installed, Package, Relations};

use crate::debs::{control_of, hold, path_of, DebSource};
use crate::error::StepError;
use crate::record::{Applied, Facts};
use crate::script::{indexed, no_record, records, run_script, run_script_streamed, tail};
use crate::store::Store;
use crate::transport::{CommandOutput, Input, Transport, TransportError};

const INSTALL: &str = concat!(
    include_str!("apt_common.sh"),
    include_str!("install_packages.sh")
);
const INSTALL_DEBS: &str = concat!(
    include_str!("apt_common.sh"),
    include_str!("install_debs.sh")
);
const PROBE: &str = concat!(
    include_str!("apt_common.sh"),
    include_str!("probe_packages.sh")
);
const LIST: &str = concat!(
    include_str!("apt_common.sh"),
    include_str!("list_packages.sh")
);
const PURGE: &str = concat!(
    include_str!("apt_common.sh"),
    include_str!("purge_packages.sh")
);

/// A package to install: pinned `.deb`s (itself first, then its closure), or, unlocked, a
/// name and optionally a version for the target's apt.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PackageSpec {
    pub name: String,
    pub version: Option<String>,
    /// Empty when the package is not locked.
    pub debs: Vec<DebSource>,
}

/// Installs `packages`: the locked ones from their pinned `.deb`s with dpkg, the others from
/// the target's apt sources in one apt transaction. `listing` is what the target had when
/// the step's probe asked (else it is asked now). On success, per package (in order): the
/// installed `version` as a fact, and whether it was not installed before. On failure, one
/// message for the batch naming the packages, with the end of apt's or dpkg's output.
pub async fn install_packages(
    t: &Transport,
    store: &Store,
    packages: &[PackageSpec],
    mut listing: Option<Listing>,
) -> Result<Vec<Applied>, StepError> {
    let (pinned, unpinned): (Vec<usize>, Vec<usize>) =
        (0..packages.len()).partition(|&i| !packages[i].debs.is_empty());
    let mut applied: Vec<Option<Applied>> = vec![None; packages.len()];
    for (part, locked) in [(pinned, true), (unpinned, false)] {
        if part.is_empty() {
            continue;
        }
        let these: Vec<PackageSpec> = part.iter().map(|&i| packages[i].clone()).collect();
        let done = if locked {
            install_pinned(t, store, &these, listing.take(), &BTreeMap::new()).await?
        } else {
            install_from_sources(t, &these).await?
        };
        for (i, a) in part.into_iter().zip(done) {
            applied[i] = Some(a);
        }
    }
    Ok(applied.into_iter().flatten().collect())
}

/// The target's apt resolves and downloads: `name` or `name=version`.
async fn install_from_sources(
    t: &Transport,
    packages: &[PackageSpec],
) -> Result<Vec<Applied>, StepError> {
    let mut args = Vec::with_capacity(packages.len());
    for p in packages {
        check_name(&p.name)?;
        match &p.version {
            Some(v) => {
                check_version(&p.name, v)?;
                args.push(format!("{}={v}", p.name));
            }
            None => args.push(p.name.clone()),
        }
    }
    let arg_refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = run_script(t, INSTALL, &arg_refs, b"").await?;
    outcome(t, packages, &out, None)
}

/// Installs `packages` again as their records had them, in one transaction: each from the
/// pinned `.deb`s its record kept (`crate::debs::KeptDebs`), which have no mirror: the
/// caller has made sure that the store holds each one (`crate::debs::from_store`). A
/// package goes back to exactly its version; a package of its closure is moved back to its
/// pin where the target has it at the version `undo` names (what the update being rolled
/// back installed), and is otherwise treated as an install treats it (never downgraded).
/// What `install_packages` returns.
pub async fn reinstall_packages(
    t: &Transport,
    store: &Store,
    packages: &[PackageSpec],
    undo: &BTreeMap<String, String>,
) -> Result<Vec<Applied>, StepError> {
    install_pinned(t, store, packages, None, undo).await
}

/// Exactly the pinned `.deb`s: those the target does not have at their pinned version are
/// fetched into the store (or taken from it), checked against their pins and against what
/// the target has, and shipped in one tar. `undo`: see [`reinstall_packages`].
async fn install_pinned(
    t: &Transport,
    store: &Store,
    packages: &[PackageSpec],
    mut listing: Option<Listing>,
    undo: &BTreeMap<String, String>,
) -> Result<Vec<Applied>, StepError> {
    let mut debs: BTreeMap<&str, &DebSource> = BTreeMap::new();
    for p in packages {
        check_name(&p.name)?;
        for d in &p.debs {
            check_name(&d.pin.name)?;
            check_version(&d.pin.name, &d.pin.version)?;
            if let Some(other) = debs.insert(&d.pin.name, d) {
                if other.pin.sha256 != d.pin.sha256 {
                    return Err(StepError::new(format!(
                        "two packages of host `{}` need `{}` as different files ({} and {})",
                        t.host(),
                        d.pin.name,
                        other.pin.filename,
                        d.pin.filename
                    )));
                }
            }
        }
    }
    // A listing older than the host's packages is taken again: what to ship, and whether
    // it installs, are decided on what the host has.
    for _ in 0..3 {
        let listed = match listing.take() {
            Some(l) => l,
            None => list_packages(t).await?,
        };
        if let Some(applied) = ship_pinned(t, store, packages, &debs, &listed, undo).await? {
            return Ok(applied);
        }
    }
    Err(StepError::with_hint(
        format!(
            "the packages of host `{}` changed each time envc was about to install {}; \
             nothing was installed",
            t.host(),
            list(packages.iter().map(|p| p.name.as_str()))
        ),
        "another apt or dpkg is at work on the host: run the build again once it is done",
    ))
}

/// [`install_pinned`] against `listing`: `None` when the host's packages are no longer
/// what it lists (nothing was shipped or installed then).
async fn ship_pinned(
    t: &Transport,
    store: &Store,
    packages: &[PackageSpec],
    debs: &BTreeMap<&str, &DebSource>,
    listing: &Listing,
    undo: &BTreeMap<String, String>,
) -> Result<Option<Vec<Applied>>, StepError> {
    let roots: Vec<&str> = packages.iter().map(|p| p.name.as_str()).collect();
    let (needed, kept): (Vec<&DebSource>, Vec<&DebSource>) =
        debs.values().copied().partition(|d| {
            needs_shipping(
                &d.pin.version,
                listing.version_of(&d.pin.name),
                roots.contains(&&*d.pin.name),
                undo.get(&d.pin.name).map(String::as_str),
            )
        });
    // A pinned version the host already has is still held to its bytes: the lockfile says
    // which .deb a version is, and a sha256 edited by hand must not pass because nothing
    // ships. (A newer version the host keeps instead of a closure's pin is not that pin.)
    for d in kept {
        if listing.version_of(&d.pin.name) == Some(d.pin.version.as_str()) {
            hold(store, d, &d.pin.key()).await?;
        }
    }
    // Checked one at a time (each is read whole to hash it), then streamed from the store:
    // a step holds no more than one `.deb` in memory, however many it ships.
    let mut paths = Vec::with_capacity(needed.len());
    let mut shipping: Vec<Package> = Vec::with_capacity(needed.len());
    for d in &needed {
        paths.push(path_of(store, d, &d.pin.key()).await?);
        shipping.push(Package::clone(&*control_of(store, d).await?));
    }
    let problems = installable::check(&listing.packages, &shipping);
    if !problems.is_empty() {
        let problems: Vec<String> = problems.iter().map(|p| format!("\n  {p}")).collect();
        return Err(StepError::with_hint(
            format!(
                "the pinned .debs for {} do not install onto host `{}` as it is; nothing was \
                 installed:{}",
                list(roots.iter().copied()),
                t.host(),
                problems.concat()
            ),
            UNMET_HINT,
        ));
    }
    let tar = tar_of(&needed, &paths, &installable::unpack_batches(&shipping))?;
    let input: Vec<Input<'_>> = tar.iter().map(Segment::input).collect();
    // The closure's packages the host does not have come as dependencies (apt-mark auto).
    let fresh = debs
        .keys()
        .filter(|n| !roots.contains(n) && listing.version_of(n).is_none());
    let mut args: Vec<&str> = vec![&listing.fingerprint];
    args.extend(&roots);
    args.push("--");
    args.extend(fresh);
    let out = run_script_streamed(t, INSTALL_DEBS, &args, &input).await?;
    if !records(&out, "C").is_empty() {
        return Ok(None);
    }
    let damaged: Vec<String> = records(&out, "H").iter().map(|r| r.join(" ")).collect();
    if !damaged.is_empty() {
        return Err(StepError::with_hint(
            format!(
                "the .debs for {} arrived on host `{}` other than sent ({}); nothing was \
                 installed",
                list(roots.iter().copied()),
                t.host(),
                damaged.join("; ")
            ),
            "the connection or the host's disk damaged them: run the build again",
        ));
    }
    outcome(t, packages, &out, Some(listing)).map(Some)
}

/// Whether a pinned `.deb` goes to a target that has `installed` of it: a package the
/// environment names is exactly its pin (upgraded or downgraded to it); a package of its
/// closure is there to satisfy a dependency, so a newer one the target already has (a
/// security update) is kept, never downgraded, unless it is the version `undone` names:
/// a rollback moves back what the update it undoes installed.
fn needs_shipping(
    pinned: &str,
    installed: Option<&str>,
    named: bool,
    undone: Option<&str>,
) -> bool {
    match installed {
        None => true,
        Some(have) if named || undone == Some(have) => have != pinned,
        Some(have) => envc_lockfiles::version::compare(have, pinned).is_lt(),
    }
}

/// A piece of the tar a package step sends: headers and padding made here, the `.deb`s
/// read from the store as they are sent.
#[derive(Debug)]
enum Segment {
    Bytes(Vec<u8>),
    File(std::path::PathBuf),
}

impl Segment {
    fn input(&self) -> Input<'_> {
        match self {
            Segment::Bytes(b) => Input::Bytes(b),
            Segment::File(p) => Input::File(p),
        }
    }
}

const BLOCK: u64 = 512;

/// A tar of the `.deb`s at `paths` (each of its pinned size: the store checked it; named as
/// in the pool, or by its sha256 where that name does not fit a tar header, in the
/// directory of its unpack batch) and `SHA256SUMS`, for `install_debs.sh`.
fn tar_of(
    debs: &[&DebSource],
    paths: &[std::path::PathBuf],
    batches: &[usize],
) -> Result<Vec<Segment>, StepError> {
    let header = |name: &str, size: u64| -> std::io::Result<Vec<u8>> {
        let mut h = tar::Header::new_gnu();
        h.set_path(name)?;
        h.set_size(size);
        h.set_mode(0o644);
        h.set_mtime(0);
        h.set_entry_type(tar::EntryType::Regular);
        h.set_cksum();
        Ok(h.as_bytes().to_vec())
    };
    let padding = |size: u64| vec![0u8; ((BLOCK - size % BLOCK) % BLOCK) as usize];
    let mut out = Vec::with_capacity(debs.len() * 3 + 3);
    let mut sums = String::new();
    for ((d, path), batch) in debs.iter().zip(paths).zip(batches) {
        let pool = d.pin.filename.rsplit('/').next().unwrap_or(&d.pin.filename);
        let pool = format!("{batch:02}/{pool}");
        let (name, head) = match header(&pool, d.pin.size) {
            Ok(h) => (pool, h),
            Err(_) => {
                let name = format!("{batch:02}/{}.deb", d.pin.sha256);
                let h = header(&name, d.pin.size)
                    .map_err(|e| StepError::new(format!("packing {pool}: {e}")))?;
                (name, h)
            }
        };
        sums.push_str(&format!("{}  {name}\n", d.pin.sha256));
        out.push(Segment::Bytes(head));
        out.push(Segment::File(path.clone()));
        out.push(Segment::Bytes(padding(d.pin.size)));
    }
    let sums = sums.into_bytes();
    let head = header("SHA256SUMS", sums.len() as u64)
        .map_err(|e| StepError::new(format!("packing SHA256SUMS: {e}")))?;
    let pad = padding(sums.len() as u64);
    out.push(Segment::Bytes(head));
    out.push(Segment::Bytes(sums));
    // The end of the archive: two zero blocks.
    out.push(Segment::Bytes([pad, vec![0; 2 * BLOCK as usize]].concat()));
    Ok(out)
}

/// What the install scripts report, per package: `B`/`A` records (status and version
/// before and after; what was there before is `listing`'s when the script checked that the
/// host still has it), `N` (no apt or dpkg), `F`/`L` (apt or dpkg failed, and its last
/// lines).
fn outcome(
    t: &Transport,
    packages: &[PackageSpec],
    out: &CommandOutput,
    listing: Option<&Listing>,
) -> Result<Vec<Applied>, StepError> {
    let names = list(packages.iter().map(|p| p.name.as_str()));
    if let Some(e) = missing_tool(t, out) {
        return Err(StepError::new(e));
    }
    if let Some(e) = tool_failure(out) {
        return Err(StepError::new(format!(
            "installing {names} on host `{}` failed: {e}",
            t.host()
        )));
    }
    let before = indexed(records(out, "B"), packages.len());
    let after = indexed(records(out, "A"), packages.len());
    let mut applied = Vec::with_capacity(packages.len());
    for (i, p) in packages.iter().enumerate() {
        let had = match listing {
            Some(l) => Some(l.version_of(&p.name).is_some()),
            None => before[i].as_ref().map(|b| b.first() == Some(&"installed")),
        };
        let (Some(had), Some(after)) = (had, &after[i]) else {
            return Err(StepError::new(format!(
                "installing {names} on host `{}`: {}",
                t.host(),
                no_record(out)
            )));
        };
        let version = match after.as_slice() {
            ["installed", version] => version.to_string(),
            [status, ..] => {
                return Err(StepError::new(format!(
                    "package `{}` on host `{}` is `{status}` after the install, not \
                     installed",
                    p.name,
                    t.host()
                )))
            }
            [] => String::new(),
        };
        if let Some(want) = &p.version {
            if *want != version {
                return Err(StepError::new(format!(
                    "package `{}` on host `{}` is at version {version} after the install, \
                     not the pinned {want}",
                    p.name,
                    t.host()
                )));
            }
        }
        applied.push(Applied {
            facts: Facts::from([("version".to_string(), version)]),
            created: !had,
            note: None,
            log: None,
        });
    }
    Ok(applied)
}

/// The installed version of each package (`version` fact), `None` where it is not installed.
/// Names that are not valid Debian package names are reported not installed.
pub async fn probe_packages(
    t: &Transport,
    names: &[String],
) -> Result<Vec<Option<Facts>>, TransportError> {
    let valid: Vec<usize> = (0..names.len())
        .filter(|&i| check_name(&names[i]).is_ok())
        .collect();
    let mut results = vec![None; names.len()];
    if valid.is_empty() {
        return Ok(results);
    }
    let args: Vec<&str> = valid.iter().map(|&i| names[i].as_str()).collect();
    let out = run_script(t, PROBE, &args, b"").await?;
    for (j, rec) in indexed(records(&out, "R"), valid.len())
        .into_iter()
        .enumerate()
    {
        results[valid[j]] = match rec.as_deref() {
            Some(["installed", version]) => {
                Some(Facts::from([("version".to_string(), version.to_string())]))
            }
            Some([_, ..]) => None,
            _ => {
                return Err(TransportError::Io {
                    host: t.host().to_string(),
                    detail: format!("probing package `{}`: {}", names[valid[j]], no_record(&out)),
                })
            }
        };
    }
    Ok(results)
}

/// Every package dpkg knows on a target, with its status and relations, and a fingerprint
/// of dpkg's database as it was listed.
#[derive(Clone, Debug)]
pub struct Listing {
    pub packages: Vec<Installed>,
    /// Changes whenever dpkg's database does: an install refuses a listing that no longer
    /// has the host's one.
    pub fingerprint: String,
}

impl Listing {
    /// The version of `name` (`name:arch` for one architecture) if it is installed.
    pub fn version_of(&self, name: &str) -> Option<&str> {
        let (name, arch) = match name.split_once(':') {
            Some((n, a)) => (n, Some(a)),
            None => (name, None),
        };
        self.packages
            .iter()
            .find(|i| {
                i.status == "installed"
                    && i.package.name == name
                    && arch.is_none_or(|a| i.package.architecture == a)
            })
            .map(|i| i.package.version.as_str())
    }
}

/// What the target's dpkg knows: what the pinned `.deb`s are checked against before they are
/// shipped, and what a package step's probe finds.
pub async fn list_packages(t: &Transport) -> Result<Listing, StepError> {
    let out = run_script(t, LIST, &[], b"").await?;
    if let Some(e) = missing_tool(t, &out) {
        return Err(StepError::new(e));
    }
    let fingerprint = records(&out, "S").first().map(|r| r.join(" "));
    let (Some(fingerprint), true) = (fingerprint, out.success()) else {
        return Err(StepError::new(format!(
            "listing the packages of host `{}`: {}",
            t.host(),
            no_record(&out)
        )));
    };
    let packages = records(&out, "P")
        .into_iter()
        .map(|r| {
            installed(&r)
                .map_err(|e| StepError::new(format!("host `{}`: dpkg lists {e}", t.host())))
        })
        .collect::<Result<_, _>>()?;
    Ok(Listing {
        packages,
        fingerprint,
    })
}

/// A `P` record of `list_packages.sh` envc cannot read.
#[derive(Debug)]
enum UnreadRecord {
    /// Not the record's nine tab-separated fields (the record, as one line).
    Malformed(String),
    BadField {
        package: String,
        error: envc_lockfiles::installable::FieldError,
    },
}

impl std::fmt::Display for UnreadRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            UnreadRecord::Malformed(line) => write!(f, "a malformed record {line:?}"),
            UnreadRecord::BadField { package, error } => {
                write!(
                    f,
                    "package `{package}` with a field envc cannot read: {error}"
                )
            }
        }
    }
}

/// One `P` record of `list_packages.sh`.
fn installed(record: &[&str]) -> Result<Installed, UnreadRecord> {
    let [name, architecture, status, version, provides, pre_depends, depends, conflicts, breaks] =
        record
    else {
        return Err(UnreadRecord::Malformed(record.join("\t")));
    };
    let relations = Relations::read(|field| match field {
        "Provides" => provides,
        "Pre-Depends" => pre_depends,
        "Depends" => depends,
        "Conflicts" => conflicts,
        "Breaks" => breaks,
        _ => "",
    })
    .map_err(|error| UnreadRecord::BadField {
        package: name.to_string(),
        error,
    })?;
    Ok(Installed {
        package: Package {
            name: name.to_string(),
            version: version.to_string(),
            architecture: architecture.to_string(),
            relations,
        },
        status: status.to_string(),
    })
}

/// Purges (removes with their configuration) those of `names` that are installed, in one apt
/// transaction. Packages that are not installed are fine.
pub async fn purge_packages(t: &Transport, names: &[String]) -> Result<(), StepError> {
    if names.is_empty() {
        return Ok(());
    }
    for name in names {
        check_name(name)?;
    }
    let args: Vec<&str> = names.iter().map(String::as_str).collect();
    let out = run_script(t, PURGE, &args, b"").await?;
    if let Some(e) = missing_tool(t, &out) {
        return Err(StepError::new(e));
    }
    if let Some(e) = tool_failure(&out) {
        return Err(StepError::new(format!(
            "purging {} on host `{}` failed: {e}",
            list(args.iter().copied()),
            t.host()
        )));
    }
    if !out.success() {
        return Err(StepError::new(format!(
            "purging {} on host `{}`: {}",
            list(args.iter().copied()),
            t.host(),
            no_record(&out)
        )));
    }
    Ok(())
}

fn list<'a>(names: impl Iterator<Item = &'a str>) -> String {
    let names: Vec<String> = names.map(|n| format!("`{n}`")).collect();
    let s = if names.len() == 1 { "" } else { "s" };
    format!("package{s} {}", names.join(", "))
}

/// The tool a script needs and the host lacks (`N TOOL`): apt-get, dpkg, dpkg-query.
fn missing_tool(t: &Transport, out: &CommandOutput) -> Option<String> {
    let record = records(out, "N").into_iter().next()?;
    let tool = record.first().copied().unwrap_or("apt-get");
    Some(format!(
        "host `{}` has no {tool}: envc manages packages only on Debian-like systems",
        t.host()
    ))
}

const UNMET_HINT: &str = "the host lacks packages the pinned .debs depend on, or has them at \
    versions that do not satisfy them. The lock resolved each package's closure onto what its \
    hosts start from (a host's `base` image, else Debian's required packages): declare the \
    host's `base`, or bring the host up to it, then run `envc lock FILE`";

/// A failure as the scripts report it (`F EXIT_CODE TOOL`, then `L LINE`…): the tool's exit
/// status and the end of its output, with a hint for the common causes.
fn tool_failure(out: &CommandOutput) -> Option<String> {
    let record = records(out, "F").into_iter().next()?;
    let status = record.first()?.to_string();
    let tool = record.get(1).copied().unwrap_or("apt-get");
    let log: Vec<String> = records(out, "L").iter().map(|r| r.join("\t")).collect();
    let log = tail(&log.join("\n"), 20);
    let mut msg = format!("{tool} exited with status {status}:\n{log}");
    if log.contains("Unable to locate package") || log.contains("has no installation candidate") {
        msg += "\n  hint: check the package name, and that the host's apt sources offer it \
                (run `apt-get update` there if its lists are old)";
    } else if log.contains("nmet dependencies") || log.contains("dependency problems") {
        msg += &format!("\n  hint: {UNMET_HINT}");
    } else if log.contains("was not found") && log.contains("Version") {
        msg += "\n  hint: the pinned version is not offered by the host's apt sources; \
                `apt-cache policy NAME` on the host lists the versions it can install";
    }
    Some(msg)
}

/// Debian policy: lower-case letters, digits, `+`, `-`, `.`; at least two characters, starting
/// with a letter or digit. An architecture qualifier (`:amd64`) is allowed.
fn check_name(name: &str) -> Result<(), StepError> {
    let (base, arch) = match name.split_once(':') {
        Some((b, a)) => (b, Some(a)),
        None => (name, None),
    };
    let ok = base.len() >= 2
        && base.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
        && base
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "+-.".contains(c))
        && arch.is_none_or(|a| {
            !a.is_empty()
                && a.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        });
    if ok {
        Ok(())
    } else {
        Err(StepError::new(format!(
            "`{name}` is not a Debian package name (lower-case letters, digits, `+`, `-`, `.`, \
             starting with a letter or digit)"
        )))
    }
}

/// Debian versions: `[epoch:]upstream[-revision]` of letters, digits and `.+~-:`.
fn check_version(name: &str, version: &str) -> Result<(), StepError> {
    let ok = version.starts_with(|c: char| c.is_ascii_digit())
        && version
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || ".+~-:".contains(c));
    if ok {
        Ok(())
    } else {
        Err(StepError::new(format!(
            "`{version}` (pinned for package `{name}`) is not a Debian version"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_versions() {
        for ok in ["jq", "libc6", "g++", "libstdc++6:amd64", "0ad"] {
            assert!(check_name(ok).is_ok(), "{ok}");
        }
        for bad in ["", "a", "-f", "Jq", "a b", "x;y", "jq=1", "$(id)", "jq:"] {
            assert!(check_name(bad).is_err(), "{bad}");
        }
        for ok in ["1.6-2.1+deb12u2", "1:2.3~rc1-1", "2.0"] {
            assert!(check_version("x", ok).is_ok(), "{ok}");
        }
        for bad in ["", "latest", "1 2", "1;2", "-1"] {
            assert!(check_version("x", bad).is_err(), "{bad}");
        }
    }

    /// The tar streamed to `install_debs.sh`, put together, is a tar of the `.deb`s in their
    /// batches' directories (a pool name too long for a header is replaced by the sha256)
    /// and `SHA256SUMS`.
    #[test]
    fn the_streamed_tar_holds_every_deb_and_its_sum() {
        use std::io::Read as _;
        let dir = tempfile::tempdir().unwrap();
        let long = format!("pool/main/x/x/{}_1.0_amd64.deb", "x".repeat(120));
        let files = [
            ("pool/main/j/jq/jq_1.6_amd64.deb", 700usize),
            (long.as_str(), 512),
        ];
        let mut debs = Vec::new();
        let mut paths = Vec::new();
        for (i, (pool, size)) in files.iter().enumerate() {
            let data = vec![b'a' + i as u8; *size];
            let path = dir.path().join(format!("{i}.deb"));
            std::fs::write(&path, &data).unwrap();
            let pin = envc_lockfiles::model::PackagePin {
                name: format!("p{i}"),
                archive: "debian".into(),
                version: "1.0".into(),
                architecture: "amd64".into(),
                filename: pool.to_string(),
                size: *size as u64,
                sha256: envc_lockfiles::fetch::sha256_hex(&data),
                closure: None,
            };
            debs.push(DebSource {
                pin,
                mirror: "http://deb.debian.org/debian".into(),
            });
            paths.push(path);
        }
        let refs: Vec<&DebSource> = debs.iter().collect();
        let mut bytes = Vec::new();
        for s in tar_of(&refs, &paths, &[1, 0]).unwrap() {
            match s {
                Segment::Bytes(b) => bytes.extend(b),
                Segment::File(p) => bytes.extend(std::fs::read(p).unwrap()),
            }
        }
        let mut got = Vec::new();
        for e in tar::Archive::new(bytes.as_slice()).entries().unwrap() {
            let mut e = e.unwrap();
            let name = e.path().unwrap().display().to_string();
            let mut data = Vec::new();
            e.read_to_end(&mut data).unwrap();
            got.push((name, data));
        }
        let sha = |i: usize| debs[i].pin.sha256.clone();
        assert_eq!(got.len(), 3);
        assert_eq!(got[0], ("01/jq_1.6_amd64.deb".to_string(), vec![b'a'; 700]));
        assert_eq!(got[1], (format!("00/{}.deb", sha(1)), vec![b'b'; 512]));
        assert_eq!(got[2].0, "SHA256SUMS");
        assert_eq!(
            String::from_utf8(got[2].1.clone()).unwrap(),
            format!(
                "{}  01/jq_1.6_amd64.deb\n{}  00/{}.deb\n",
                sha(0),
                sha(1),
                sha(1)
            )
        );
    }

    #[test]
    fn a_named_package_is_its_pin_and_a_dependency_is_downgraded_only_by_a_rollback() {
        assert!(needs_shipping("1.0-1", None, true, None));
        assert!(needs_shipping("1.0-1", None, false, None));
        assert!(!needs_shipping("1.0-1", Some("1.0-1"), true, None));
        assert!(needs_shipping("1.0-1", Some("1.0-2"), true, None));
        assert!(needs_shipping("1.0-1", Some("0.9"), true, None));
        assert!(!needs_shipping("1.0-1", Some("1.0-1"), false, None));
        assert!(!needs_shipping("1.0-1", Some("1.0-1+deb12u1"), false, None));
        assert!(needs_shipping("1.0-1+deb12u1", Some("1.0-1"), false, None));
        assert!(!needs_shipping("1:1.0", Some("2:0.1"), false, None));
        // A rollback moves back what the update installed, and only that.
        assert!(needs_shipping("1.0-1", Some("1.0-2"), false, Some("1.0-2")));
        assert!(!needs_shipping(
            "1.0-1",
            Some("1.0-3"),
            false,
            Some("1.0-2")
        ));
        assert!(!needs_shipping(
            "1.0-1",
            Some("1.0-1"),
            false,
            Some("1.0-2")
        ));
    }

    #[test]
    fn failures_carry_the_tool_its_log_and_a_hint() {
        let out = CommandOutput {
            status: Some(0),
            stdout: b"B\t0\tnot-installed\t\nF\t100\nL\tReading package lists...\nL\tE: Unable to locate package nosuch\nA\t0\tnot-installed\t\n".to_vec(),
            stderr: vec![],
        };
        let msg = tool_failure(&out).unwrap();
        assert!(msg.starts_with("apt-get exited with status 100"), "{msg}");
        assert!(msg.contains("Unable to locate package nosuch") && msg.contains("hint:"));
        let out = CommandOutput {
            status: Some(0),
            stdout: b"F\t1\tdpkg\nL\tdpkg: dependency problems prevent configuration of jq:\n"
                .to_vec(),
            stderr: vec![],
        };
        let msg = tool_failure(&out).unwrap();
        assert!(msg.starts_with("dpkg exited with status 1"), "{msg}");
        assert!(msg.contains("`base`"), "{msg}");
        assert_eq!(list(["a", "b"].into_iter()), "packages `a`, `b`");
    }
}
