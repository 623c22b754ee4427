//! `envc lock`, `envc lock --check`, `envc lock diff`, and what `build --locked` checks: the
//! lockfile beside an environment (`prod.env` → `prod.lock`) and how it meets the graph.
//!
//! What an environment needs pinned is read off its graph (`Needs`): each `package` node its
//! package, each `image` node its whole package set and the images' clock, the tools that
//! build and reach its nodes. `envc lock` resolves those against the archive (over the
//! network, in `envc_lockfiles`); `--check` and `--locked` compare them with the lockfile
//! offline, so CI can refuse a stale lock without reaching a mirror.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use envc_compiler::types::NodeKind;
use envc_executor::image::{lock_includes, mirror};
use envc_executor::spec::{Spec, Val};
use envc_lockfiles::{
    check_tools, lock_path, probe_tool, resolve_image, resolve_packages, Archive, ImagePin,
    Lockfile, ToolPin,
};

use crate::deploy::exit;

/// A new lockfile's clock for image builds. Kept across relocks: only `--update
/// source_date_epoch` moves it, to the time of the newest archive state it pins.
const DEFAULT_SOURCE_DATE_EPOCH: u64 = envc_executor::image::SOURCE_DATE_EPOCH;
/// The suite of packages on hosts envc did not build (their sources are their own).
const DEFAULT_SUITE: &str = "bookworm";
const ARCHITECTURE: &str = "amd64";

/// What an environment needs pinned.
#[derive(Debug, Default)]
pub struct Needs {
    /// image name → (suite, the names its set is resolved from).
    images: BTreeMap<String, (String, Vec<String>)>,
    /// package name → (suite, the version the source asks for, the nodes that install it).
    packages: BTreeMap<String, (String, Option<String>, Vec<String>)>,
    tools: BTreeSet<&'static str>,
}

impl Needs {
    pub fn of(spec: &Spec) -> Result<Needs, Vec<String>> {
        let mut needs = Needs::default();
        let mut errors = Vec::new();
        let str_attr = |i: usize, k: &str| spec.nodes[i].str_attr(k).map(str::to_string);
        let image_suite = |img: usize| str_attr(img, "suite").unwrap_or(DEFAULT_SUITE.into());
        for (i, n) in spec.nodes.iter().enumerate() {
            match n.kind {
                NodeKind::Image => {
                    let includes = lock_includes(&n.str_list("packages"));
                    needs
                        .images
                        .insert(n.name.clone(), (image_suite(i), includes));
                    needs.tools.insert("mmdebstrap");
                }
                NodeKind::Vm => {
                    needs.tools.insert("qemu-system-x86_64");
                    needs.tools.insert("ssh");
                }
                NodeKind::Host => {
                    needs.tools.insert("ssh");
                }
                NodeKind::Package => {
                    // On a VM, the suite of the image it boots; elsewhere the default.
                    let suite = n
                        .target
                        .and_then(|t| match spec.nodes[t].attr("image") {
                            Some(Val::Node(img)) => Some(image_suite(*img)),
                            _ => None,
                        })
                        .unwrap_or(DEFAULT_SUITE.into());
                    let version = str_attr(i, "version").filter(|v| !v.is_empty());
                    let entry = needs
                        .packages
                        .entry(n.name.clone())
                        .or_insert_with(|| (suite.clone(), version.clone(), Vec::new()));
                    if entry.1 != version || entry.0 != suite {
                        errors.push(format!(
                            "package:{}: `{}` asks for {} from {suite}, another node for {} from {}; a lockfile pins one version of a package\n  hint: give every node of `{}` the same version",
                            n.name,
                            n.key,
                            version.as_deref().unwrap_or("the newest"),
                            entry.1.as_deref().unwrap_or("the newest"),
                            entry.0,
                            n.name
                        ));
                    }
                    entry.2.push(n.key.clone());
                }
                _ => {}
            }
        }
        if errors.is_empty() {
            Ok(needs)
        } else {
            Err(errors)
        }
    }

    fn suites(&self) -> BTreeSet<&str> {
        self.images
            .values()
            .map(|(s, _)| s.as_str())
            .chain(self.packages.values().map(|(s, _, _)| s.as_str()))
            .collect()
    }
}

/// The pins as the compiler takes them: key → value, for every pin of `lock`.
pub fn pins_of(lock: &Lockfile) -> BTreeMap<String, String> {
    lock.keys()
        .into_iter()
        .filter_map(|k| Some((k.clone(), lock.pin_value(&k)?)))
        .collect()
}

/// A lockfile as read: its pins, and the blake3 of its bytes (what a run record names), read
/// once so that the two cannot disagree.
pub struct LockedFile {
    pub lock: Lockfile,
    pub hash: String,
}

/// The lockfile beside `file`, if there is one. A broken one is an error: builds must not
/// quietly go unpinned.
pub fn read_lock(file: &Path) -> Result<Option<LockedFile>, String> {
    let path = lock_path(file);
    let bytes = match crate::fs_loader::read_bounded(&path, envc_lockfiles::file::MAX_BYTES) {
        Ok(b) => b,
        Err(crate::fs_loader::ReadError::NotFound) => return Ok(None),
        Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
    };
    let lock = Lockfile::parse(&String::from_utf8_lossy(&bytes)).map_err(|errors| {
        invalid(&path.display().to_string(), errors)
            + &format!(
                "\n  hint: regenerate it with `envc lock {}`",
                file.display()
            )
    })?;
    Ok(Some(LockedFile {
        lock,
        hash: blake3::hash(&bytes).to_hex().to_string(),
    }))
}

/// `WHAT is not a valid lockfile:` and every problem, one per line.
fn invalid(what: &str, errors: Vec<envc_lockfiles::LockError>) -> String {
    let mut s = format!("{what} is not a valid lockfile:");
    for e in errors {
        s.push_str(&format!("\n  {}", e.to_string().replace('\n', "\n  ")));
    }
    s
}

/// Where `lock` falls short of what the environment needs (offline): missing pins, pins
/// for what left the source, a version the source asks for that the lock does not hold.
pub fn stale(lock: &Lockfile, needs: &Needs) -> Vec<String> {
    let mut out = Vec::new();
    let fix = "run `envc lock FILE` (or `--update KEY`) and commit the lockfile";
    for (name, (suite, version, nodes)) in &needs.packages {
        match lock.package(name) {
            None => out.push(format!(
                "package:{name}: not in the lockfile (used by {}); {fix}",
                nodes.join(", ")
            )),
            Some(p) => {
                if let Some(v) = version {
                    if *v != p.version {
                        out.push(format!(
                            "package:{name}: the source asks for {v}, the lockfile pins {}; {fix}",
                            p.version
                        ));
                    }
                }
                if p.archive != envc_lockfiles::ArchivePin::default_name(suite) {
                    out.push(format!(
                        "package:{name}: pinned from {}, the source installs it from {suite}; {fix}",
                        p.archive
                    ));
                }
            }
        }
    }
    for (name, (_, includes)) in &needs.images {
        match lock.image(name) {
            None => out.push(format!("image:{name}: not in the lockfile; {fix}")),
            Some(i)
                if i.archive != envc_lockfiles::ArchivePin::default_name(&needs.images[name].0) =>
            {
                out.push(format!(
                    "image:{name}: pinned from {}, the source builds it from {}; {fix}",
                    i.archive, needs.images[name].0
                ))
            }
            Some(i) if i.includes != *includes => {
                let added: Vec<&str> = includes
                    .iter()
                    .filter(|p| !i.includes.contains(p))
                    .map(String::as_str)
                    .collect();
                let dropped: Vec<&str> = i
                    .includes
                    .iter()
                    .filter(|p| !includes.contains(p))
                    .map(String::as_str)
                    .collect();
                out.push(format!(
                    "image:{name}: the source's packages changed (added: {}; dropped: {}) since its set was pinned; {fix}",
                    if added.is_empty() { "none".into() } else { added.join(", ") },
                    if dropped.is_empty() { "none".into() } else { dropped.join(", ") },
                ));
            }
            Some(_) => {}
        }
    }
    for p in &lock.packages {
        if !needs.packages.contains_key(&p.name) {
            out.push(format!(
                "package:{}: pinned, but no node installs it any more; {fix}",
                p.name
            ));
        }
    }
    for i in &lock.images {
        if !needs.images.contains_key(&i.name) {
            out.push(format!(
                "image:{}: pinned, but the source has no such image any more; {fix}",
                i.name
            ));
        }
    }
    for t in &needs.tools {
        if lock.tool(t).is_none() {
            out.push(format!("tool:{t}: not in the lockfile; {fix}"));
        }
    }
    for t in &lock.tools {
        if !needs.tools.contains(t.name.as_str()) {
            out.push(format!(
                "tool:{}: pinned, but nothing in the environment uses it any more; {fix}",
                t.name
            ));
        }
    }
    let stdlib = envc_compiler::stdlib::hash().to_hex().to_string();
    if lock.stdlib != stdlib {
        out.push(format!(
            "stdlib: this envc's standard library ({}) is not the one locked ({}); {fix}",
            &stdlib[..12],
            &lock.stdlib[..lock.stdlib.len().min(12)]
        ));
    }
    out
}

/// What `build --locked` checks before anything runs: the lock covers the environment, and
/// the tools here are the locked ones. Problems, one per line.
pub fn locked_problems(lock: Option<&Lockfile>, spec: &Spec, file: &Path) -> Vec<String> {
    let Some(lock) = lock else {
        return vec![format!(
            "{} does not exist; a locked build needs one: run `envc lock {}` and commit it",
            lock_path(file).display(),
            file.display()
        )];
    };
    let needs = match Needs::of(spec) {
        Ok(n) => n,
        Err(e) => return e,
    };
    let mut out = stale(lock, &needs);
    // Only the tools this environment uses are checked (`stale` reports leftovers).
    let mut used = lock.clone();
    used.tools.retain(|t| needs.tools.contains(t.name.as_str()));
    let mut probed: Vec<ToolPin> = Vec::new();
    for t in &needs.tools {
        match probe_tool(t) {
            Ok(p) => probed.push(p),
            Err(e) => out.push(e.to_string()),
        }
    }
    out.extend(
        check_tools(&used, &probed)
            .into_iter()
            // A tool that could not be probed is already reported, with why.
            .filter(|m| m.found.is_some())
            .map(|m| m.to_string()),
    );
    out
}

/// Checks the archive's InRelease signature against Debian's keyring (`gpgv`), so that a
/// lock records an archive state Debian signed, not whatever a mirror or proxy served.
/// `ENVC_ARCHIVE_KEYRING` names another keyring; set empty, it skips the check (for an
/// archive of one's own), with a warning.
fn authenticate(archive: &Archive) -> Result<(), String> {
    let keyring = std::env::var("ENVC_ARCHIVE_KEYRING")
        .unwrap_or_else(|_| envc_lockfiles::fetch::DEBIAN_KEYRING.to_string());
    if keyring.is_empty() {
        eprintln!(
            "warning: archive:{}: its signature is not checked (ENVC_ARCHIVE_KEYRING is empty)",
            archive.pin.name
        );
        return Ok(());
    }
    envc_lockfiles::fetch::verify_signature(archive, Path::new(&keyring)).map_err(|e| {
        format!(
            "archive:{}: {e}\n  hint: for an archive Debian does not sign, set \
             ENVC_ARCHIVE_KEYRING to the keyring that does",
            archive.pin.name
        )
    })
}

/// The mirror to lock `suite` from: `$ENVC_DEBIAN_MIRROR`, else the one the lockfile
/// already pins (so that relocking on another machine does not move every pin to its
/// mirror), else the one apt here uses.
fn mirror_for(suite: &str, old: Option<&Lockfile>) -> Result<String, String> {
    let overridden = std::env::var("ENVC_DEBIAN_MIRROR").is_ok_and(|m| !m.is_empty());
    match old.and_then(|o| o.archive(&envc_lockfiles::ArchivePin::default_name(suite))) {
        Some(a) if !overridden => Ok(a.mirror.clone()),
        _ => mirror(),
    }
}

/// Resolves every pin the environment needs against the mirror.
fn resolve(needs: &Needs, old: Option<&Lockfile>) -> Result<Lockfile, Vec<String>> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| vec![e.to_string()])?;
    let mut errors: Vec<String> = Vec::new();
    let mut archives: BTreeMap<&str, Archive> = BTreeMap::new();
    for suite in needs.suites() {
        let mirror = match mirror_for(suite, old) {
            Ok(m) => m,
            Err(e) => {
                errors.push(e);
                continue;
            }
        };
        match rt.block_on(Archive::fetch(&mirror, suite, ARCHITECTURE, &["main"])) {
            Ok(a) => match authenticate(&a) {
                Ok(()) => {
                    archives.insert(suite, a);
                }
                Err(e) => errors.push(e),
            },
            Err(e) => errors.push(format!(
                "archive:{}: {e}",
                envc_lockfiles::ArchivePin::default_name(suite)
            )),
        }
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    let mut lock = Lockfile::new(
        old.map_or(DEFAULT_SOURCE_DATE_EPOCH, |o| o.source_date_epoch),
        envc_compiler::stdlib::hash().to_hex().to_string(),
    );
    let mut used: BTreeSet<&str> = BTreeSet::new();
    for (name, (suite, version, _)) in &needs.packages {
        let archive = &archives[suite.as_str()];
        match resolve_packages(archive, &[(name.as_str(), version.as_deref())]) {
            Ok(pins) => {
                // The last link of Release → Packages → .deb: the file itself matches.
                for pin in &pins {
                    if let Err(e) =
                        rt.block_on(envc_lockfiles::fetch::fetch_deb(&archive.pin.mirror, pin))
                    {
                        errors.push(format!("package:{}: {e}", pin.name));
                    }
                }
                lock.packages.extend(pins)
            }
            Err(es) => errors.extend(es.iter().map(|e| e.to_string())),
        }
        used.insert(suite);
    }
    for (name, (suite, includes)) in &needs.images {
        let archive = &archives[suite.as_str()];
        let includes: Vec<&str> = includes.iter().map(String::as_str).collect();
        match resolve_image(archive, &includes) {
            Ok(packages) => lock.images.push(ImagePin {
                name: name.clone(),
                archive: archive.pin.name.clone(),
                includes: includes.iter().map(|s| s.to_string()).collect(),
                packages,
            }),
            Err(es) => errors.extend(
                es.iter()
                    .map(|e| format!("image:{name}: {}", e.to_string().replace('\n', "\n  "))),
            ),
        }
        used.insert(suite);
    }
    lock.archives = used.into_iter().map(|s| archives[s].pin.clone()).collect();
    for t in &needs.tools {
        match probe_tool(t) {
            Ok(p) => lock.tools.push(p),
            Err(e) => errors.push(e.to_string()),
        }
    }
    if errors.is_empty() {
        lock.normalize();
        Ok(lock)
    } else {
        Err(errors)
    }
}

/// The newest `Date:` of the archives a lockfile pins, as seconds since the epoch: what
/// `--update source_date_epoch` moves the images' clock to (deterministic: it is the
/// archive's own time, not this machine's).
fn archive_epoch(lock: &Lockfile) -> Option<u64> {
    lock.archives
        .iter()
        .filter_map(|a| rfc2822_epoch(&a.date))
        .max()
}

/// `Sat, 11 Jul 2026 10:16:37 UTC` → seconds since 1970 (Release files use UTC).
fn rfc2822_epoch(date: &str) -> Option<u64> {
    let mut w = date.split_whitespace();
    let first = w.next()?;
    let day: u64 = if first.ends_with(',') {
        w.next()?
    } else {
        first
    }
    .parse()
    .ok()?;
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let name = w.next()?;
    let month = MONTHS.iter().position(|m| *m == name)? as i64 + 1;
    let year: i64 = w.next()?.parse().ok()?;
    let mut hms = w.next()?.split(':').map(|x| x.parse::<u64>().ok());
    let (h, m, s) = (hms.next()??, hms.next()??, hms.next()??);
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day as i64 - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    u64::try_from(days)
        .ok()
        .map(|d| d * 86_400 + h * 3600 + m * 60 + s)
}

/// `envc lock FILE [--check] [--update KEY…]`.
pub fn lock(file: &Path, spec: &Spec, check: bool, update: &[String]) -> Result<u8, String> {
    let needs = match Needs::of(spec) {
        Ok(n) => n,
        Err(e) => return Err(e.join("\n")),
    };
    let old = match read_lock(file) {
        Ok(old) => old.map(|l| l.lock),
        // Regenerating is how a broken lockfile is fixed.
        Err(e) if !check && update.is_empty() => {
            eprintln!("warning: {e}\nwarning: writing a new lockfile in its place");
            None
        }
        Err(e) => return Err(e),
    };
    let path = lock_path(file);
    if check {
        let Some(old) = &old else {
            eprintln!(
                "error: {} does not exist\n  hint: run `envc lock {}` and commit it",
                path.display(),
                file.display()
            );
            return Ok(exit::DRIFT);
        };
        let problems = stale(old, &needs);
        if problems.is_empty() {
            println!("{}: up to date", path.display());
            return Ok(exit::OK);
        }
        eprintln!("error: {} is stale:", path.display());
        for p in &problems {
            eprintln!("  {p}");
        }
        return Ok(exit::DRIFT);
    }
    let fresh = match resolve(&needs, old.as_ref()) {
        Ok(l) => l,
        Err(errors) => {
            for e in &errors {
                eprintln!("error: {e}");
            }
            eprintln!("error: nothing written: {} is unchanged", path.display());
            return Ok(exit::INPUT);
        }
    };
    let new = match (&old, update.is_empty()) {
        (Some(old), false) => {
            let keys: Vec<&str> = update.iter().map(String::as_str).collect();
            let mut new =
                envc_lockfiles::model::update(old, &fresh, &keys).map_err(|e| e.to_string())?;
            if keys.contains(&envc_lockfiles::KEY_SOURCE_DATE_EPOCH) {
                new.source_date_epoch = archive_epoch(&new).ok_or(
                    "source_date_epoch moves to the pinned archive's Release date, and no archive is pinned",
                )?;
            }
            new
        }
        (None, false) => {
            return Err(format!(
                "--update needs an existing lockfile; {} does not exist (run `envc lock {}`)",
                path.display(),
                file.display()
            ))
        }
        (_, true) => fresh,
    };
    let command = format!(
        "envc lock {}",
        file.file_name().map_or("".into(), |f| f.to_string_lossy())
    );
    new.write_to(&path, &command)
        .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    match &old {
        Some(old) => {
            let d = envc_lockfiles::diff(old, &new);
            if d.is_empty() {
                println!("{}: unchanged", path.display());
            } else {
                print!("{d}");
            }
        }
        None => println!("{}: {} pins written", path.display(), new.keys().len()),
    }
    Ok(exit::OK)
}

/// A lockfile given to `lock diff`: a path, or `REV:PATH` read from git.
fn read_lock_arg(arg: &str) -> Result<Lockfile, String> {
    let text = if Path::new(arg).exists() {
        let bytes = crate::fs_loader::read_bounded(Path::new(arg), envc_lockfiles::file::MAX_BYTES)
            .map_err(|e| format!("{arg}: {e}"))?;
        String::from_utf8(bytes).map_err(|_| format!("{arg}: it is not UTF-8 text"))?
    } else if let Some((rev, path)) = arg.split_once(':') {
        let out = std::process::Command::new("git")
            .args(["show", &format!("{rev}:{path}")])
            .output()
            .map_err(|e| format!("cannot run git for {arg}: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "{arg}: neither a file nor a git `REV:PATH`: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        String::from_utf8_lossy(&out.stdout).into_owned()
    } else {
        return Err(format!(
            "{arg}: no such file (a git revision is written `REV:PATH`)"
        ));
    };
    Lockfile::parse(&text).map_err(|errors| invalid(arg, errors))
}

/// Compiles the environment with the given pins: node key → id (`None` when it does not
/// compile; its diagnostics are printed).
pub type NodeIds<'a> = &'a dyn Fn(&BTreeMap<String, String>) -> Option<BTreeMap<String, String>>;

/// `envc lock diff OLD NEW [--env FILE]`: what moved, and with `--env` the nodes whose ids
/// change because of it (`ids` compiles the environment with the given pins).
pub fn lock_diff(old: &str, new: &str, ids: Option<NodeIds>) -> Result<u8, String> {
    let (a, b) = (read_lock_arg(old)?, read_lock_arg(new)?);
    let d = envc_lockfiles::diff(&a, &b);
    if d.is_empty() {
        println!("no pins changed");
    } else {
        print!("{d}");
    }
    if let Some(ids) = ids {
        let (Some(before), Some(after)) = (ids(&pins_of(&a)), ids(&pins_of(&b))) else {
            return Ok(exit::INPUT);
        };
        let changed: Vec<&String> = after
            .iter()
            .filter(|(k, id)| before.get(*k) != Some(id))
            .map(|(k, _)| k)
            .collect();
        println!();
        if changed.is_empty() {
            println!("No node ids change.");
        } else {
            println!("Nodes whose ids change ({}):", changed.len());
            for k in changed {
                println!("- `{k}`");
            }
        }
    }
    Ok(exit::OK)
}

#[cfg(test)]
mod tests {
    #[test]
    fn release_dates_are_read_as_utc_seconds() {
        let check = |date: &str, expected: Option<u64>| {
            assert_eq!(super::rfc2822_epoch(date), expected, "{date}");
        };
        check("Thu, 01 Jan 1970 00:00:00 UTC", Some(0));
        check("Tue, 14 Nov 2023 22:13:20 UTC", Some(1_700_000_000));
        check("Sat, 11 Jul 2026 10:16:37 UTC", Some(1_783_764_997));
        check("29 Feb 2024 12:00:00 UTC", Some(1_709_208_000));
        check("Sat, 11 Jul", None);
        check("Sat, 11 Foo 2026 10:16:37 UTC", None);
    }
}
