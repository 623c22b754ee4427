//! The lockfile and the graph: what an environment needs pinned (read off its nodes), what
//! `build --locked` checks before anything runs, and `envc lock` itself. The lockfile's
//! model, its staleness and the archive resolution are in `envc_lockfiles`; this module
//! only knows which node needs what.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use envc_compiler::pin::PinKey;
use envc_lockfiles::changelog::Fix;
use envc_lockfiles::needs::Stale;
use envc_lockfiles::outdated::Outdated;
use envc_lockfiles::provider::{HttpPolicy, ProviderSource};
use envc_lockfiles::{
    check_tools, lock_path, probe_tool, read_lock, stale, CloudImagePin, LockDiff, LockProblem,
    Lockfile, Needs, ToolMismatch, ToolPin,
};

use crate::kinds;
use crate::kinds::node_type::LockNeeds;
use crate::spec::Spec;

/// The hash of this envc's standard library, as lockfiles pin it.
fn stdlib_hash() -> String {
    envc_compiler::stdlib::hash().to_hex().to_string()
}

/// What `spec` needs pinned: each `package` node its package (from the suite of the image
/// its VM boots, or its host's base, else the default), each `image` node and each host's
/// base its whole set, and the tools that build and reach its nodes.
pub fn needs_of(spec: &Spec) -> Result<Needs, Vec<String>> {
    let mut needs = Needs::default();
    let mut conflicts = Vec::new();
    // A host's base is pinned like any image, so the lab rebuilds exactly it; its tools
    // (mmdebstrap, QEMU) are the lab's, not production's: a build of plain hosts must not
    // need them, so they are not pinned for it.
    for n in &spec.lab_images {
        let mut cx = LockNeeds {
            spec,
            needs: &mut needs,
            conflicts: &mut conflicts,
            lab: true,
        };
        kinds::of(n.kind).lock_needs(n, &mut cx);
    }
    for n in &spec.nodes {
        let mut cx = LockNeeds {
            spec,
            needs: &mut needs,
            conflicts: &mut conflicts,
            lab: false,
        };
        kinds::of(n.kind).lock_needs(n, &mut cx);
    }
    if conflicts.is_empty() {
        Ok(needs)
    } else {
        Err(conflicts)
    }
}

/// Where the lockfile falls short of the environment, offline.
pub fn stale_pins(lock: &Lockfile, needs: &Needs) -> Vec<LockProblem> {
    stale(lock, needs, &stdlib_hash())
}

/// What `build --locked` and `verify` found before anything runs.
#[derive(Debug, Default)]
pub struct LockedCheck {
    /// Why they refuse, one per line: the lock does not cover the environment, or a tool
    /// here differs from the locked one where that can change what is built.
    pub problems: Vec<String>,
    /// Tools that differ where it cannot (another Debian revision of ssh or QEMU): said, not
    /// refused.
    pub notes: Vec<String>,
}

/// What `build --locked` checks before anything runs: the lock covers the environment, and
/// the tools here are the locked ones, as closely as each tool's role asks
/// ([`envc_lockfiles::ToolRole`]).
pub fn locked_problems(lock: Option<&Lockfile>, spec: &Spec, env_file: &Path) -> LockedCheck {
    let Some(lock) = lock else {
        return LockedCheck {
            problems: vec![format!(
                "{} does not exist; a locked build needs one: run `envc lock {}` and commit it",
                lock_path(env_file).display(),
                env_file.display()
            )],
            notes: Vec::new(),
        };
    };
    let needs = match needs_of(spec) {
        Ok(n) => n,
        Err(problems) => {
            return LockedCheck {
                problems,
                notes: Vec::new(),
            }
        }
    };
    let mut check = LockedCheck {
        problems: stale_pins(lock, &needs)
            .iter()
            .map(ToString::to_string)
            .collect(),
        notes: Vec::new(),
    };
    let (probed, errors) = probe_needed(&needs);
    check.problems.extend(errors);
    // A tool that could not be probed is already reported, with why.
    for m in tool_mismatches(lock, &needs, &probed) {
        match m.matters() {
            true => check.problems.push(m.to_string()),
            false => check.notes.push(m.to_string()),
        }
    }
    check
}

/// The versions here of the tools `needs` names, and why any could not be probed.
fn probe_needed(needs: &Needs) -> (Vec<ToolPin>, Vec<String>) {
    let mut probed = Vec::new();
    let mut errors = Vec::new();
    for t in &needs.tools {
        match probe_tool(t) {
            Ok(p) => probed.push(p),
            Err(e) => errors.push(e.to_string()),
        }
    }
    (probed, errors)
}

/// The locked tools this environment uses (`stale` reports leftovers) that differ here from
/// the lock; the ones not found here at all were reported by the probe.
fn tool_mismatches(lock: &Lockfile, needs: &Needs, probed: &[ToolPin]) -> Vec<ToolMismatch> {
    let mut used = lock.clone();
    used.tools.retain(|t| needs.tools.contains(&t.name));
    check_tools(&used, probed)
        .into_iter()
        .filter(|m| m.found.is_some())
        .collect()
}

/// The exact versions here of the tools the environment uses, as a run records them: what
/// a reviewer of a run compares with the lock. Tools that cannot be probed are left out
/// (the run fails on them, naming them, before it needs them).
pub fn tools_here(spec: &Spec) -> BTreeMap<String, String> {
    let Ok(needs) = needs_of(spec) else {
        return BTreeMap::new();
    };
    probe_needed(&needs)
        .0
        .into_iter()
        .map(|p| (p.name, p.version))
        .collect()
}

/// The pins of `new` (packages and images' sets) at a newer version than in `old`.
fn moved_pins(old: &Lockfile, new: &Lockfile) -> Vec<envc_lockfiles::PackagePin> {
    let all = |l: &Lockfile| -> Vec<envc_lockfiles::PackagePin> {
        let images = l.images.iter().flat_map(|i| i.packages.iter());
        l.packages.iter().chain(images).cloned().collect()
    };
    let before = all(old);
    let mut out: Vec<envc_lockfiles::PackagePin> = all(new)
        .into_iter()
        .filter(|n| {
            before
                .iter()
                .any(|o| o.name == n.name && o.sha256 != n.sha256)
        })
        .collect();
    out.sort_by(|a, b| a.sha256.cmp(&b.sha256));
    out.dedup_by(|a, b| a.sha256 == b.sha256);
    out
}

/// What `envc lock` was asked to do.
pub enum LockRequest<'a> {
    /// `--check`: change nothing.
    Check,
    /// `--update`: resolve every pin again.
    All,
    /// A plain `envc lock`: pin what is new, mend what no longer holds, keep the rest.
    Relock,
    /// `--update=KEY…`: move only these.
    Update(&'a [PinKey]),
    /// `--update=security`: move only what the security suites changed.
    Security,
}

/// What `envc lock` found or did.
pub enum LockOutcome {
    /// `--check`: the lockfile covers the environment. `notes`: what could not be checked
    /// (a cloud image pin without credentials to ask the cloud with), for stderr.
    UpToDate { path: PathBuf, notes: Vec<String> },
    /// `--check`: it does not exist.
    Missing { path: PathBuf },
    /// `--check`: it falls short, pin by pin.
    Stale {
        path: PathBuf,
        problems: Vec<LockProblem>,
        notes: Vec<String>,
    },
    /// Written: what moved against the old lockfile, or how many pins a new one has; and
    /// what the person locking should know (a broken lockfile replaced, an archive whose
    /// signature was not checked).
    Written {
        path: PathBuf,
        diff: Option<LockDiff>,
        /// For each package that moved: what its new changelog says the move fixes.
        fixes: Vec<Fix>,
        pins: usize,
        warnings: Vec<String>,
    },
}

/// Why `envc lock` wrote nothing.
#[derive(Debug)]
pub enum LockCommandError {
    /// The environment or the lockfile cannot be locked as it is (bad input).
    Input(String),
    /// Resolution failed: one message per pin; the lockfile is unchanged.
    Unresolved {
        path: PathBuf,
        errors: Vec<String>,
        warnings: Vec<String>,
    },
}

/// `envc lock FILE [--check] [--update=KEY…]`; `store_root` is the store that keeps the
/// pinned `.deb`s it fetches. A broken lockfile is regenerated by a full
/// lock (with a warning on stderr) and is an error otherwise. Providers are resolved from
/// the source `ENVC_PROVIDER_MIRROR` or `envc.toml` names ([`crate::config::provider_source`]),
/// read only when the environment has a provider.
pub fn lock_environment(
    env_file: &Path,
    spec: &Spec,
    request: LockRequest,
    store_root: &Path,
) -> Result<LockOutcome, LockCommandError> {
    let needs = needs_of(spec).map_err(|e| LockCommandError::Input(e.join("\n")))?;
    let source = if needs.providers.is_empty() {
        ProviderSource::Registry {
            http: HttpPolicy::HttpsOnly,
        }
    } else {
        let env = std::env::var(crate::config::PROVIDER_MIRROR_ENV).ok();
        crate::config::provider_source(&crate::project::project_dir(env_file), env.as_deref())
            .map_err(|e| LockCommandError::Input(e.to_string()))?
    };
    lock_needs(env_file, &needs, request, store_root, &source)
}

/// [`lock_environment`] for what `needs` asks, its providers resolved from `providers`:
/// the same checks, resolution and writing, for a caller (a test) that builds its needs
/// by hand.
pub fn lock_needs(
    env_file: &Path,
    needs: &Needs,
    request: LockRequest,
    store_root: &Path,
    providers: &ProviderSource,
) -> Result<LockOutcome, LockCommandError> {
    let path = lock_path(env_file);
    let mut warnings = Vec::new();
    let old = match read_lock(env_file) {
        Ok(old) => old.map(|l| l.lock),
        // Regenerating is how a broken lockfile is fixed.
        Err(e) if matches!(request, LockRequest::All | LockRequest::Relock) => {
            warnings.push(format!("{e}\nwarning: writing a new lockfile in its place"));
            None
        }
        Err(e) => return Err(LockCommandError::Input(e.to_string())),
    };
    if let LockRequest::Check = request {
        let Some(old) = &old else {
            return Ok(LockOutcome::Missing { path });
        };
        let mut problems = stale_pins(old, needs);
        let mut notes = Vec::new();
        // The tools here against the lock, as a locked build will find them: a difference
        // that can change what is built is a problem (`--update=tool:NAME` mends it), one
        // that cannot is said.
        let (probed, errors) = probe_needed(needs);
        notes.extend(errors);
        for m in tool_mismatches(old, needs, &probed) {
            match m.matters() {
                true => problems.push(LockProblem::Stale(Stale {
                    key: PinKey::Tool(m.tool.clone()),
                    problem: m.to_string(),
                })),
                false => notes.push(m.to_string()),
            }
        }
        // Online, where the offline checks found nothing: each cloud image the environment
        // boots is asked of its cloud, so an id edited into another valid-looking one is
        // caught. Without credentials that is only said.
        let offline: Vec<PinKey> = problems.iter().map(|p| p.key().clone()).collect();
        let pins: Vec<&CloudImagePin> = old
            .cloud_images
            .iter()
            .filter(|c| needs.cloud_images.contains_key(c.key().name()))
            .filter(|c| !offline.contains(&c.key()))
            .collect();
        if !pins.is_empty() {
            let clouds = kinds::cloud_images();
            for pin in pins {
                match clouds.check(pin) {
                    Ok(()) => {}
                    Err(e) if e.is_mismatch() => problems.push(LockProblem::Stale(Stale {
                        key: pin.key(),
                        problem: e.to_string(),
                    })),
                    Err(e) => notes.push(format!(
                        "{}: not checked against AWS, only offline: {e}",
                        pin.key()
                    )),
                }
            }
        }
        return Ok(if problems.is_empty() {
            LockOutcome::UpToDate { path, notes }
        } else {
            LockOutcome::Stale {
                path,
                problems,
                notes,
            }
        });
    }
    let clouds = kinds::cloud_images();
    // Project files (a vendor archive's key) are relative to the project's directory.
    let project = crate::project::project_dir(env_file);
    let resolved = envc_lockfiles::environment::resolve_environment(
        needs,
        old.as_ref(),
        &stdlib_hash(),
        &project,
        clouds.as_ref(),
        providers,
    )
    .map_err(|u| {
        warnings.extend(u.warnings);
        LockCommandError::Unresolved {
            path: path.clone(),
            errors: u.errors,
            warnings: std::mem::take(&mut warnings),
        }
    })?;
    warnings.extend(resolved.warnings);
    // What each archive served today, for `envc lock --outdated` offline.
    if let Err(e) = envc_lockfiles::outdated::save(&indices_dir(store_root), &resolved.indices) {
        warnings.push(format!(
            "{e} (`envc lock --outdated` will need `--refresh`)"
        ));
    }
    let fresh = resolved.lock;
    let new = match (&old, request) {
        (Some(old), LockRequest::Update(keys)) => {
            envc_lockfiles::environment::update_pins(old, &fresh, keys)
                .map_err(|e| LockCommandError::Input(e.to_string()))?
        }
        (Some(old), LockRequest::Security) => envc_lockfiles::updates::update_security(old, &fresh),
        (None, LockRequest::Update(_) | LockRequest::Security) => {
            return Err(LockCommandError::Input(format!(
                "--update needs an existing lockfile; {} does not exist (run `envc lock {}`)",
                path.display(),
                env_file.display()
            )))
        }
        // A plain relock keeps every pin that still holds, as `cargo` and `nix flake lock`
        // do: it pins what is new and mends what no longer matches the source (with the
        // archive states those were read from), and drops what nothing uses. Only
        // `--update` moves what holds: a relock to add one package is a reviewable diff,
        // not every pin that moved in the archive since.
        (Some(old), LockRequest::Relock) => {
            let mut keys = relock_keys(old, &fresh, &stale_pins(old, needs));
            // A kept cloud image must be one the cloud has, as pinned: a hand-edited id
            // that looks right offline is mended too.
            for pin in &old.cloud_images {
                if !keys.contains(&pin.key())
                    && fresh.cloud_image(&pin.name, &pin.region).is_some()
                    && clouds.check(pin).is_err_and(|e| e.is_mismatch())
                {
                    keys.push(pin.key());
                }
            }
            envc_lockfiles::environment::update_pins(old, &fresh, &keys)
                .map_err(|e| LockCommandError::Input(e.to_string()))?
        }
        _ => fresh,
    };
    let command = format!(
        "envc lock {}",
        env_file
            .file_name()
            .map_or("".into(), |f| f.to_string_lossy())
    );
    new.write_to(&path, &command)
        .map_err(|e| LockCommandError::Input(format!("cannot write {}: {e}", path.display())))?;
    // The .debs fetched to pin the packages, and those of every package that moved, kept in
    // the store: their changelogs say what a move fixes (`lock diff`), and the build needs
    // them anyway.
    let store = crate::store::Store::open(store_root);
    let fixes = match (&old, store) {
        (Some(old), Ok(store)) => {
            let mut debs = resolved.debs;
            let moved: Vec<envc_lockfiles::PackagePin> = moved_pins(old, &new)
                .into_iter()
                .filter(|p| !debs.contains_key(&p.sha256) && !store.deb_path(&p.sha256).is_file())
                .collect();
            let (fetched, errors) = envc_lockfiles::environment::fetch_pinned(&new, &moved);
            warnings.extend(
                errors
                    .into_iter()
                    .map(|e| format!("its changelog is not read: {e}")),
            );
            debs.extend(fetched);
            for (sha256, bytes) in &debs {
                if let Err(e) = store.put_deb(sha256, bytes) {
                    warnings.push(format!("cannot keep a pinned .deb in the store: {e}"));
                }
            }
            envc_lockfiles::changelog::fixes(old, &new, |p| {
                debs.get(&p.sha256)
                    .cloned()
                    .or_else(|| std::fs::read(store.deb_path(&p.sha256)).ok())
            })
        }
        _ => Vec::new(),
    };
    Ok(LockOutcome::Written {
        fixes,
        diff: old.as_ref().map(|old| envc_lockfiles::diff(old, &new)),
        pins: new.keys().len(),
        path,
        warnings,
    })
}

/// The pins a plain relock moves: each that no longer holds (`problems`), each `fresh` has
/// and `old` lacks, and, where a Debian suite's own pin no longer holds (it takes other
/// suites beside it now), every pin read from that suite or those beside it.
fn relock_keys(old: &Lockfile, fresh: &Lockfile, problems: &[LockProblem]) -> Vec<PinKey> {
    let known = old.keys();
    let mut keys: Vec<PinKey> = problems
        .iter()
        .map(|p| p.key().clone())
        .chain(fresh.keys().into_iter().filter(|k| !known.contains(k)))
        .collect();
    let suites: Vec<String> = keys
        .iter()
        .filter_map(|k| match k {
            PinKey::Archive(a) => Some(old.group(old.main_of(a))),
            _ => None,
        })
        .flatten()
        .collect();
    let from = |archive: &str| suites.iter().any(|s| s == archive);
    keys.extend(
        old.packages
            .iter()
            .filter(|p| from(&p.archive))
            .map(|p| p.key()),
    );
    keys.extend(
        old.images
            .iter()
            .filter(|i| from(&i.archive) || i.packages.iter().any(|p| from(&p.archive)))
            .map(|i| i.key()),
    );
    keys.sort();
    keys.dedup();
    keys
}

/// What `envc lock --migrate` did.
pub enum Migrated {
    /// The lockfile is of the current format already: not written.
    Current { path: PathBuf },
    /// Rewritten from format `from`; `diff` is what moved (only the `version` pin).
    Rewritten {
        path: PathBuf,
        from: u32,
        diff: LockDiff,
    },
}

/// `envc lock --migrate FILE`: FILE's lockfile rewritten in the current format, every pin
/// as it was read (nothing is resolved, nothing fetched). Written only when reading it
/// back gives the same pins.
pub fn migrate_lock(env_file: &Path) -> Result<Migrated, LockCommandError> {
    let path = lock_path(env_file);
    let old = match read_lock(env_file) {
        Ok(Some(l)) => l.lock,
        Ok(None) => {
            return Err(LockCommandError::Input(format!(
                "{} does not exist: there is nothing to migrate\n  hint: `envc lock {}` \
                 writes one",
                path.display(),
                env_file.display()
            )))
        }
        Err(e) => return Err(LockCommandError::Input(e.to_string())),
    };
    if old.version == envc_lockfiles::FORMAT_VERSION {
        return Ok(Migrated::Current { path });
    }
    let name = path
        .file_name()
        .map_or("".into(), |f| f.to_string_lossy())
        .replace(".lock", ".env");
    let command = format!("envc lock {name}");
    // Read back before writing: the text must carry every pin as it was.
    let again = envc_lockfiles::Lockfile::parse(&old.to_toml(&command)).map_err(|errors| {
        let errors: Vec<String> = errors.iter().map(ToString::to_string).collect();
        LockCommandError::Input(format!(
            "{} cannot be migrated (a bug: please report it with the file): {}",
            path.display(),
            errors.join("; ")
        ))
    })?;
    let diff = envc_lockfiles::diff(&old, &again);
    let moved: Vec<String> = diff
        .changes
        .iter()
        .filter(|c| c.key != "version")
        .map(|c| c.key.clone())
        .collect();
    if !moved.is_empty() {
        return Err(LockCommandError::Input(format!(
            "{}: migrating would move {} (a bug: please report it with the file); nothing \
             written",
            path.display(),
            moved.join(", ")
        )));
    }
    old.write_to(&path, &command)
        .map_err(|e| LockCommandError::Input(format!("cannot write {}: {e}", path.display())))?;
    Ok(Migrated::Rewritten {
        path,
        from: old.version,
        diff,
    })
}

/// Where the store keeps the indices the last `envc lock` read (`--outdated`).
pub fn indices_dir(store_root: &Path) -> PathBuf {
    store_root.join("indices")
}

/// What `envc lock --outdated` found.
pub struct OutdatedReport {
    /// The lockfile compared.
    pub path: PathBuf,
    /// The pins with newer versions, security updates first.
    pub updates: Vec<Outdated>,
    /// Each archive compared with, and the `Date` of the Release its index is of.
    pub as_of: Vec<(String, String)>,
    pub warnings: Vec<String>,
}

/// `envc lock --outdated FILE [--refresh]`: the pins of FILE's lockfile that have newer
/// versions in their suites; offline against the indices the last `envc lock` kept in the
/// store, or, with `refresh`, against the archives' current ones (fetched and verified as
/// `envc lock` does, and kept). Changes no pin.
pub fn outdated_pins(
    env_file: &Path,
    spec: &Spec,
    refresh: bool,
    store_root: &Path,
) -> Result<OutdatedReport, LockCommandError> {
    let path = lock_path(env_file);
    let lock = match read_lock(env_file) {
        Ok(Some(l)) => l.lock,
        Ok(None) => {
            return Err(LockCommandError::Input(format!(
                "{} does not exist\n  hint: run `envc lock {}` and commit it",
                path.display(),
                env_file.display()
            )))
        }
        Err(e) => return Err(LockCommandError::Input(e.to_string())),
    };
    let dir = indices_dir(store_root);
    let mut warnings = Vec::new();
    let indices = if refresh {
        let needs = needs_of(spec).map_err(|e| LockCommandError::Input(e.join("\n")))?;
        let project = crate::project::project_dir(env_file);
        let (fetched, w) =
            envc_lockfiles::environment::fetch_indices(&needs, Some(&lock), &project).map_err(
                |u| LockCommandError::Unresolved {
                    path: path.clone(),
                    errors: u.errors,
                    warnings: u.warnings,
                },
            )?;
        warnings.extend(w);
        if let Err(e) = envc_lockfiles::outdated::save(&dir, &fetched) {
            warnings.push(e.to_string());
        }
        fetched
            .into_iter()
            .map(|i| (i.archive.clone(), i))
            .collect()
    } else {
        envc_lockfiles::outdated::load(&dir, &lock)
            .map_err(|e| LockCommandError::Input(e.to_string()))?
    };
    let updates = envc_lockfiles::outdated::outdated(&lock, &indices)
        .map_err(|e| LockCommandError::Input(e.to_string()))?;
    Ok(OutdatedReport {
        path,
        updates,
        as_of: indices
            .values()
            .map(|i| (i.archive.clone(), i.date.clone()))
            .collect(),
        warnings,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `needs_of` asks of the lockfile for `src`: images with their suites, packages
    /// with theirs, and the tools, one line each.
    fn check(src: &str, expected: &[&str]) {
        check_with(src, expected, false)
    }

    /// `check`, and with `cloud` the cloud images, what each package starts from and how
    /// each suite is taken.
    fn check_with(src: &str, expected: &[&str], cloud: bool) {
        let loader = envc_compiler::MemoryLoader::new([("main.env", src)]);
        let c = envc_compiler::compile("main.env", &loader, &Default::default());
        assert!(c.diagnostics.is_empty(), "{:#?}", c.diagnostics);
        let spec = Spec::from_graph(&c.graph.unwrap(), &c.sources);
        let needs = needs_of(&spec).unwrap();
        let mut got: Vec<String> = Vec::new();
        got.extend(
            needs
                .images
                .iter()
                .map(|(n, i)| format!("image {n} {}", i.suite)),
        );
        got.extend(
            needs
                .packages
                .iter()
                .map(|(n, p)| format!("package {n} {}", p.suite)),
        );
        got.extend(needs.tools.iter().map(|t| format!("tool {t}")));
        if !cloud {
            assert_eq!(got, expected, "{src}");
            return;
        }
        got.extend(needs.cloud_images.values().map(|c| {
            format!(
                "cloud_image {} {} {} {} {} (booted by {})",
                c.key(),
                c.provider,
                c.owner,
                c.pattern,
                c.architecture,
                c.used_by.join(", ")
            )
        }));
        got.extend(needs.packages.iter().map(|(n, p)| {
            let starts: Vec<&str> = p.starts_from.iter().map(String::as_str).collect();
            format!("{n} starts from {}", starts.join(" "))
        }));
        got.extend(
            needs
                .suite_updates
                .iter()
                .map(|(s, u)| format!("suite {s} updates {} ({})", u.updates, u.declared_by)),
        );
        assert_eq!(got, expected, "{src}");
    }

    #[test]
    fn a_hosts_base_is_pinned_its_packages_come_from_its_suite_and_it_needs_no_lab_tools() {
        let host = "let h = host(name = \"h1\", address = \"192.0.2.1\"";
        let curl = "let p = package(name = \"curl\", target = h)\n";
        check(
            &format!("{host})\n{curl}"),
            &["package curl bookworm", "tool ssh"],
        );
        check(
            &format!("{host}, base = image(name = \"t\", suite = \"trixie\"))\n{curl}"),
            &["image t trixie", "package curl trixie", "tool ssh"],
        );
        // A host with no base says which suite it runs; one whose base says it may too.
        check(
            &format!("{host}, suite = \"trixie\")\n{curl}"),
            &["package curl trixie", "tool ssh"],
        );
        check(
            &format!("{host}, suite = \"trixie\", base = image(name = \"t\", suite = \"trixie\"))\n{curl}"),
            &["image t trixie", "package curl trixie", "tool ssh"],
        );
        // A VM's image is built here: its tools are needed (all three that write its bytes).
        check(
            "let v = vm(name = \"v\", image = image(name = \"i\"))\n",
            &[
                "image i bookworm",
                "tool mke2fs",
                "tool mmdebstrap",
                "tool qemu-system-x86_64",
                "tool ssh",
                "tool tar",
            ],
        );
    }

    #[test]
    fn a_cloud_machine_needs_its_image_pinned_and_its_packages_pinned_from_required() {
        let machine =
            "import \"std/aws\"\nlet net = aws.network(\"web\", region = \"eu-west-1\")\n\
                       let web = aws.machine(\"web-0\", network = net)\n";
        check_with(
            &format!("{machine}let p = package(name = \"curl\", target = web)\n"),
            &[
                "package curl bookworm",
                "tool ssh",
                "cloud_image cloud_image:debian-12@eu-west-1 aws 136693071363 \
                 debian-12-amd64-* x86_64 (booted by vm:web-0)",
                "curl starts from required",
                "suite bookworm updates true (vm:web-0)",
            ],
            true,
        );
        // Two machines in two regions, one image: one pin per region.
        check_with(
            &format!(
                "{machine}let net2 = aws.network(\"web2\", region = \"us-east-1\")\n\
                 let web2 = aws.machine(\"web-1\", network = net2)\n\
                 let web3 = aws.machine(\"web-2\", network = net)\n"
            ),
            &[
                "tool ssh",
                "cloud_image cloud_image:debian-12@eu-west-1 aws 136693071363 \
                 debian-12-amd64-* x86_64 (booted by vm:web-0, vm:web-2)",
                "cloud_image cloud_image:debian-12@us-east-1 aws 136693071363 \
                 debian-12-amd64-* x86_64 (booted by vm:web-1)",
            ],
            true,
        );
    }
}

/// `envc lock`, `lock --check` and a relock of an environment whose one need is a provider,
/// as a `resource` node's `lock_needs` will declare it: needs built by hand, the provider
/// served by a filesystem mirror on disk (Terraform's unpacked layout: no zip to build).
#[cfg(test)]
mod provider_tests {
    use super::*;
    use envc_lockfiles::provider::Platform;

    const ADDRESS: &str = "registry.envc.test/envc-test/local";

    /// Publishes `version` in the mirror at `root`: an executable that says its version.
    fn publish(root: &Path, version: &str) {
        use std::os::unix::fs::PermissionsExt;
        let dir = root
            .join(ADDRESS)
            .join(version)
            .join(Platform::current().to_string());
        std::fs::create_dir_all(&dir).unwrap();
        let exe = dir.join(format!("terraform-provider-local_v{version}"));
        std::fs::write(&exe, format!("#!/bin/sh\necho local {version}\n")).unwrap();
        std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    fn needs(constraint: Option<&str>) -> Needs {
        let mut n = Needs::default();
        if let Some(c) = constraint {
            n.add_provider(ADDRESS, c, "h/resource:notes").unwrap();
        }
        n
    }

    /// What `request` made of the lockfile: `written <diff>`, `up to date`, or the stale
    /// pins' messages, one a line.
    fn check(env: &Path, needs: &Needs, request: LockRequest, mirror: &Path, expected: &str) {
        let store = env.with_file_name("store");
        let source = ProviderSource::FilesystemMirror {
            root: mirror.to_path_buf(),
        };
        let got = match lock_needs(env, needs, request, &store, &source) {
            Ok(LockOutcome::Written { diff, pins, .. }) => match diff {
                Some(d) => format!("written: {}", d.to_string().trim_end()),
                None => format!("written: {pins} pins"),
            },
            Ok(LockOutcome::UpToDate { .. }) => "up to date".into(),
            Ok(LockOutcome::Stale { problems, .. }) => {
                let lines: Vec<String> = problems.iter().map(ToString::to_string).collect();
                format!("stale: {}", lines.join("\n"))
            }
            Ok(LockOutcome::Missing { .. }) => "missing".into(),
            Err(LockCommandError::Input(e)) => format!("input: {e}"),
            Err(LockCommandError::Unresolved { errors, .. }) => {
                format!("unresolved: {}", errors.join("\n"))
            }
        };
        assert_eq!(got, expected);
    }

    #[test]
    fn a_provider_is_locked_checked_kept_moved_and_dropped_like_other_pins() {
        let project = tempfile::tempdir().unwrap();
        let mirror = tempfile::tempdir().unwrap();
        let m = mirror.path();
        publish(m, "0.1.0");
        publish(m, "0.1.1");
        let env = project.path().join("prod.env");
        let key = format!("provider:{ADDRESS}");
        let constrained = needs(Some("~> 0.1.0"));
        check(&env, &constrained, LockRequest::Check, m, "missing");
        // stdlib, source_date_epoch and the provider.
        check(
            &env,
            &constrained,
            LockRequest::Relock,
            m,
            "written: 3 pins",
        );
        let text = std::fs::read_to_string(project.path().join("prod.lock")).unwrap();
        assert!(
            text.contains(&format!(
                "[[provider]]\nname = \"{ADDRESS}\"\nversion = \"0.1.1\"\nconstraints = \"~> \
                 0.1.0\"\nhashes = [\n    \"h1:"
            )),
            "{text}"
        );
        check(&env, &constrained, LockRequest::Check, m, "up to date");

        // The source asks for 0.2: `--check` (exit 3) says so, naming the node and the fix.
        let moved_on = needs(Some("~> 0.2.0"));
        check(
            &env,
            &moved_on,
            LockRequest::Check,
            m,
            &format!(
                "stale: {key}: pinned at 0.1.1, which the constraint `~> 0.2.0` of \
                 h/resource:notes does not admit: run `envc lock FILE --update={key}` to pin a \
                 version it admits; run `envc lock FILE` (or `--update=KEY`) and commit the \
                 lockfile"
            ),
        );

        // The mirror gets 0.1.2: a relock keeps 0.1.1, `--update=provider:…` moves it.
        publish(m, "0.1.2");
        check(
            &env,
            &constrained,
            LockRequest::Relock,
            m,
            "written: No pin changed.",
        );
        let keys = [key.parse::<PinKey>().unwrap()];
        let updated = check_moved(&env, &constrained, &keys, m);
        assert!(
            updated.starts_with(&format!(
                "written: 1 pin changed: 0 added, 0 removed, 1 moved.\n\nMoved:\n- `{key}`: \
                 0.1.1 → 0.1.2, hashes: 1 dropped, 1 added\n  - dropped h1:"
            )),
            "{updated}"
        );

        // No resource uses it any more: `--check` says so, a relock drops it.
        let none = needs(None);
        check(
            &env,
            &none,
            LockRequest::Check,
            m,
            &format!(
                "stale: {key}: pinned, but no resource uses it any more; run `envc lock FILE` \
                 (or `--update=KEY`) and commit the lockfile"
            ),
        );
        check(
            &env,
            &none,
            LockRequest::Relock,
            m,
            &format!(
                "written: 1 pin changed: 0 added, 1 removed, 0 moved.\n\nRemoved:\n- `{key}` \
                 0.1.2 (constraints ~> 0.1.0, 1 hash)"
            ),
        );
    }

    /// `--update=KEY…`'s outcome, as `check` renders it.
    fn check_moved(env: &Path, needs: &Needs, keys: &[PinKey], mirror: &Path) -> String {
        let source = ProviderSource::FilesystemMirror {
            root: mirror.to_path_buf(),
        };
        let store = env.with_file_name("store");
        match lock_needs(env, needs, LockRequest::Update(keys), &store, &source) {
            Ok(LockOutcome::Written { diff: Some(d), .. }) => {
                format!("written: {}", d.to_string().trim_end())
            }
            Ok(_) => "not written".into(),
            Err(e) => format!("{e:?}"),
        }
    }
}
