//! Image builds: the `image` node is a build derivation. `image.sh` (embedded) runs
//! mmdebstrap against Debian's archive with `SOURCE_DATE_EPOCH` fixed and turns the rootfs
//! into an ext4 disk image; its outputs move into the store as objects, and the facts of
//! the image are their ids. Two builds give the same bits as long as the archive serves the
//! same package versions: nothing of the machine that builds leaks in (not the time, not
//! the directory order, not the cache). Pinning the archive's state is the lockfile's job.

use std::collections::BTreeMap;

use envc_compiler::pin::PinKey;
use envc_ids::ResolvedHash;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::cache::CacheUse;
use crate::debs::DebSource;
use crate::error::StepError;
use crate::record::Facts;
use crate::store::{ObjectId, Store};

/// The build script. Its hash is an input of every image (a new builder is a new image).
pub const BUILDER: &str = include_str!("image.sh");

/// Timestamps inside images when no lockfile pins `source_date_epoch`: the clock a new
/// lockfile starts from, so a first lock does not change an unlocked image.
pub const SOURCE_DATE_EPOCH: u64 = envc_lockfiles::environment::DEFAULT_SOURCE_DATE_EPOCH;

/// What every image has besides its own packages: systemd, sshd, the cloud kernel (it
/// boots without an initramfs), the tools the guest setup uses; dbus, without which
/// systemd-logind fails at boot.
pub const BASE_PACKAGES: &[&str] = &[
    "openssh-server",
    "systemd-sysv",
    "udev",
    "kmod",
    "iproute2",
    "e2fsprogs",
    "dbus",
    "linux-image-cloud-amd64",
];

/// Identifies how images are built: the script and the base package list. A new builder
/// makes new images.
pub fn builder_hash() -> String {
    let mut h = blake3::Hasher::new();
    h.update(BUILDER.as_bytes());
    for p in BASE_PACKAGES {
        h.update(b"\0");
        h.update(p.as_bytes());
    }
    format!("blake3:{}", &h.finalize().to_hex()[..16])
}

/// What the lockfile resolves an image's package set from: what the build is asked to
/// install, plus `usr-is-merged`, which mmdebstrap's merged-usr hook provides (without it,
/// resolution would pick `usrmerge` and perl, which a build does not install).
pub fn lock_includes(packages: &[String]) -> Vec<String> {
    let mut all: Vec<String> = BASE_PACKAGES.iter().map(|p| p.to_string()).collect();
    all.extend(packages.iter().cloned());
    all.push("usr-is-merged".into());
    all.sort();
    all.dedup();
    all
}

/// An image build bounded in time: a stuck mirror fails the node instead of hanging the run.
const BUILD_TIMEOUT: Duration = Duration::from_secs(1800);

/// What an image is built from; all of it enters the image's resolved hash.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImageSpec {
    pub name: String,
    pub suite: String,
    /// Extra packages, sorted and without repeats (a set: order does not make another image).
    pub packages: Vec<String>,
    /// Absolute path in the image → content.
    pub files: BTreeMap<String, String>,
    pub source_date_epoch: u64,
    /// The mirror the lockfile pinned its archive from; `None` (unlocked) builds from the
    /// mirror this machine's apt uses, so only locked images are the same bits everywhere
    /// (the mirror's URL is written into the image's apt sources).
    pub mirror: Option<String>,
    /// The `.deb`s the lockfile pins, when locked: the build installs from exactly these
    /// (kept in the store, fetched once and checked by sha256), through a local archive
    /// made of them, never from the mirror; a build that installs anything else fails,
    /// naming what differs.
    pub pinned: Option<Vec<DebSource>>,
}

impl ImageSpec {
    /// The locked set as `(name, version)`, when locked.
    fn expected(&self) -> Option<Vec<(String, String)>> {
        let debs = self.pinned.as_ref()?;
        Some(
            debs.iter()
                .map(|d| (d.pin.name.clone(), d.pin.version.clone()))
                .collect(),
        )
    }
}

/// The image's outputs, as facts: store object ids, and what is worth showing.
pub use envc_ids::fact::image as fact;

/// The store objects an image's facts name, that must be present for a record to stand.
pub fn objects(facts: &Facts) -> Vec<ObjectId> {
    [fact::DISK, fact::KERNEL, fact::ROOTFS, fact::PACKAGES]
        .iter()
        .filter_map(|k| ObjectId::parse(facts.get(*k)?))
        .collect()
}

/// Where downloaded `.deb` files are kept between builds (`$ENVC_DEB_CACHE`, else
/// `$XDG_CACHE_HOME/envc`, else `~/.cache/envc`). Packages are checked by apt against the
/// archive's signed index, so the cache saves time without being trusted.
pub fn cache_dir() -> PathBuf {
    let base = std::env::var_os("ENVC_DEB_CACHE")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("XDG_CACHE_HOME").map(|d| Path::new(&d).join("envc")))
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cache/envc")))
        .unwrap_or_else(|| std::env::temp_dir().join("envc-cache"));
    base.join("debs")
}

/// Builds the image and moves its outputs into the store. Returns its facts.
pub async fn build_image(store: &Store, spec: &ImageSpec) -> Result<Facts, StepError> {
    let mirror = match &spec.mirror {
        Some(m) => m.clone(),
        None => {
            envc_lockfiles::mirror::local_mirror().map_err(|e| StepError::new(e.to_string()))?
        }
    };
    let cache = cache_dir();
    std::fs::create_dir_all(&cache).map_err(|e| {
        StepError::new(format!(
            "cannot create the package cache {}: {e}",
            cache.display()
        ))
    })?;
    // Under the store, so that outputs move into it by rename.
    let work = tempfile::Builder::new()
        .prefix("image-")
        .tempdir_in(store.root().join("tmp"))
        .map_err(|e| {
            StepError::new(format!("cannot create a build directory in the store: {e}"))
        })?;
    let out = work.path().join("out");
    let files = work.path().join("files");
    std::fs::create_dir_all(&files).map_err(|e| StepError::new(e.to_string()))?;
    for (path, content) in &spec.files {
        let rel = path.trim_start_matches('/');
        if !path.starts_with('/')
            || rel
                .split('/')
                .any(|s| s.is_empty() || s == "." || s == "..")
        {
            return Err(StepError::new(format!(
                "image `{}`: file path {path:?} is not a normalised absolute path",
                spec.name
            )));
        }
        let dest = files.join(rel);
        let mut dir = dest.parent();
        while let Some(d) = dir.filter(|d| d.starts_with(&files) && *d != files) {
            std::fs::create_dir_all(d)
                .map_err(|e| StepError::new(format!("{}: {e}", d.display())))?;
            set_mode(d, 0o755)?;
            dir = d.parent();
        }
        std::fs::write(&dest, content)
            .map_err(|e| StepError::new(format!("{}: {e}", dest.display())))?;
        // The image gets these modes: set them, rather than inherit this process's umask.
        set_mode(&dest, 0o644)?;
    }
    // Locked: the pinned .debs, checked, in one directory that image.sh makes the build's
    // only archive.
    let pinned_dir = work.path().join("pinned");
    if let Some(debs) = &spec.pinned {
        gather_pinned(store, &spec.name, debs, &pinned_dir).await?;
    }
    let mut cmd = tokio::process::Command::new("bash");
    match spec.pinned {
        Some(_) => cmd.env("ENVC_PINNED_DEBS", &pinned_dir),
        // Not from envc's own environment either: an unlocked image builds from the mirror.
        None => cmd.env_remove("ENVC_PINNED_DEBS"),
    };
    cmd.arg("-c")
        .arg(BUILDER)
        .arg("envc-image")
        .arg(&out)
        .arg(&spec.suite)
        .arg(&mirror)
        .arg(
            BASE_PACKAGES
                .iter()
                .map(|p| p.to_string())
                .chain(spec.packages.iter().cloned())
                .collect::<Vec<_>>()
                .join(","),
        )
        .arg(&cache)
        .arg(&files)
        .env("SOURCE_DATE_EPOCH", spec.source_date_epoch.to_string())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        // In envc's process group: a Ctrl-C at the terminal reaches the build too, and
        // image.sh stops mmdebstrap and cleans up its mounts.
        .stderr(std::process::Stdio::piped());
    let child = cmd.spawn().map_err(|e| {
        StepError::new(format!(
            "cannot run bash to build image `{}`: {e}",
            spec.name
        ))
    })?;
    let pid = child.id().and_then(|p| i32::try_from(p).ok());
    let waiting = child.wait_with_output();
    tokio::pin!(waiting);
    let output = match tokio::time::timeout(BUILD_TIMEOUT, &mut waiting).await {
        Ok(Ok(o)) => o,
        Ok(Err(e)) => {
            return Err(StepError::new(format!(
                "building image `{}`: {e}",
                spec.name
            )))
        }
        Err(_) => {
            if let Some(pid) = pid {
                // image.sh passes SIGTERM on to mmdebstrap and cleans up its mounts; the
                // work directory is removed only once it has.
                // SAFETY: kill(2) has no memory-safety preconditions.
                unsafe { libc::kill(pid, libc::SIGTERM) };
                if tokio::time::timeout(Duration::from_secs(120), &mut waiting)
                    .await
                    .is_err()
                {
                    // Still mounted, perhaps: leave the directory for `Store::verify`.
                    let _ = work.keep();
                }
            }
            return Err(StepError::new(format!(
                "building image `{}` took more than {} s; is the mirror {mirror} reachable?",
                spec.name,
                BUILD_TIMEOUT.as_secs()
            )));
        }
    };
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let tail: Vec<&str> = stderr.lines().rev().take(15).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        return Err(StepError::with_hint(
            format!(
                "building image `{}` from {mirror} ({}) failed:\n{}",
                spec.name,
                spec.suite,
                tail.join("\n")
            ),
            "the image build needs mmdebstrap, e2fsprogs and, without root, uidmap and 65536 subordinate ids for this user in /etc/subuid and /etc/subgid (`./scripts/setup` installs the tools; `usermod --add-subuids`/`--add-subgids` gives the ids)",
        ));
    }
    if let Some(expected) = &spec.expected() {
        let built = std::fs::read_to_string(out.join("packages.txt")).map_err(|e| {
            StepError::new(format!(
                "image `{}`: the build wrote no packages.txt: {e}",
                spec.name
            ))
        })?;
        let built: Vec<String> = built.lines().map(str::to_string).collect();
        check_package_set(&spec.name, expected, &built)?;
    }
    let put = |name: &str| -> Result<String, StepError> {
        let path = out.join(name);
        store
            .put_file(&path)
            .map(|id| id.hex())
            .map_err(|e| StepError::new(format!("image `{}`: storing {name}: {e}", spec.name)))
    };
    let kernel_version = std::fs::read_to_string(out.join("kernel-version"))
        .map_err(|e| {
            StepError::new(format!(
                "image `{}`: the build wrote no kernel-version: {e}",
                spec.name
            ))
        })?
        .trim()
        .to_string();
    Ok(Facts::from([
        (fact::DISK.to_string(), put("disk.raw")?),
        (fact::KERNEL.to_string(), put("vmlinuz")?),
        (fact::ROOTFS.to_string(), put("rootfs.tar")?),
        (fact::PACKAGES.to_string(), put("packages.txt")?),
        (fact::KERNEL_VERSION.to_string(), kernel_version),
    ]))
}

/// How many pinned `.deb`s are fetched at once, when the store lacks them.
const FETCHES: usize = 8;

/// Puts every `.deb` of `debs` into `dir` as `SHA256.deb`: hard links to the store's copies
/// (fetched into it first where it lacks them, each checked against its pin), copies
/// where the store is on another filesystem.
async fn gather_pinned(
    store: &Store,
    image: &str,
    debs: &[DebSource],
    dir: &Path,
) -> Result<(), StepError> {
    use futures::{StreamExt, TryStreamExt};
    std::fs::create_dir_all(dir).map_err(|e| StepError::new(format!("{}: {e}", dir.display())))?;
    let owner = PinKey::Image(image.to_string());
    // Owned futures: borrowed ones would make the node's future not `Send`.
    let fetches = debs.iter().cloned().map(|d| {
        let (store, owner) = (store.clone(), owner.clone());
        async move { crate::debs::path_of(&store, &d, &owner).await }
    });
    let paths: Vec<PathBuf> = futures::stream::iter(fetches)
        .buffer_unordered(FETCHES)
        .try_collect()
        .await
        .map_err(|e| StepError {
            cause: format!("image `{image}`: {}", e.cause),
            hint: e.hint,
        })?;
    for from in paths {
        let to = dir.join(from.file_name().unwrap_or_default());
        match std::fs::hard_link(&from, &to) {
            // Linked already (the set names it twice): never copy over the store's file.
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::CrossesDevices => {
                std::fs::copy(&from, &to).map(|_| ())
            }
            other => other,
        }
        .map_err(|e| StepError::new(format!("{} → {}: {e}", from.display(), to.display())))?;
    }
    Ok(())
}

fn set_mode(path: &Path, mode: u32) -> Result<(), StepError> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .map_err(|e| StepError::new(format!("{}: {e}", path.display())))
}

/// The archive moved under the lock: say which pins no longer hold, instead of storing an
/// image that silently differs from the locked one.
fn check_package_set(
    image: &str,
    expected: &[(String, String)],
    built: &[String],
) -> Result<(), StepError> {
    // `packages.txt` is what image.sh wrote: `name=version` a line.
    let split = |s: &String| -> (String, String) {
        let (n, v) = s.split_once('=').unwrap_or((s, ""));
        (n.to_string(), v.to_string())
    };
    let want: BTreeMap<String, String> = expected.iter().cloned().collect();
    let got: BTreeMap<String, String> = built.iter().map(split).collect();
    let mut lines = Vec::new();
    for (name, v) in &want {
        match got.get(name) {
            Some(g) if g == v => {}
            Some(g) => lines.push(format!("  {name}: locked {v}, the archive gave {g}")),
            None => lines.push(format!("  {name}: locked {v}, not installed")),
        }
    }
    for (name, g) in &got {
        if !want.contains_key(name) {
            lines.push(format!("  {name}: not in the lock, the archive gave {g}"));
        }
    }
    if lines.is_empty() {
        return Ok(());
    }
    let key = PinKey::Image(image.to_string());
    Err(StepError::with_hint(
        format!(
            "image `{image}` no longer matches its pin `{key}`: the archive changed under \
             the lock\n{}",
            lines.join("\n")
        ),
        format!(
            "review the move with `envc lock FILE --update={key}` and `envc lock diff`, or \
             build from a mirror that still serves the locked versions"
        ),
    ))
}

#[cfg(test)]
mod tests {

    #[test]
    fn a_moved_archive_names_every_pin_that_no_longer_holds() {
        let s = |xs: &[&str]| xs.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        let lock = s(&[
            "bash=5.2.15-2+b7",
            "libc6=2.36-9+deb12u10",
            "zlib1g=1:1.2.13",
        ]);
        let pinned: Vec<(String, String)> = lock
            .iter()
            .filter_map(|l| l.split_once('='))
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect();
        assert!(super::check_package_set("i", &pinned, &lock).is_ok());
        let err = super::check_package_set(
            "i",
            &pinned,
            &s(&["bash=5.2.15-2+b7", "libc6=2.36-9+deb12u13", "tzdata=2025b"]),
        )
        .unwrap_err()
        .to_string();
        for part in [
            "pin `image:i`",
            "libc6: locked 2.36-9+deb12u10, the archive gave 2.36-9+deb12u13",
            "zlib1g: locked 1:1.2.13, not installed",
            "tzdata: not in the lock, the archive gave 2025b",
            "--update=image:i",
        ] {
            assert!(err.contains(part), "{part}: {err}");
        }
        assert!(!err.contains("bash"), "{err}");
    }
}

/// An error as one line, hint included, for a step's note.
fn one_line(e: &impl std::fmt::Display) -> String {
    e.to_string()
        .lines()
        .map(str::trim)
        .collect::<Vec<_>>()
        .join(" — ")
}

/// Makes an image's outputs present in the store, the cheapest way there is: what the store
/// already has (built or fetched before), then the binary cache, then a build. What was not
/// fetched is pushed when `cache.push`. Returns the facts and, where it is worth saying, how
/// they came.
///
/// Only locked images go through the cache: an unlocked one is built from whatever the
/// machine's mirror serves that day, which its resolved hash does not say, so another
/// machine must not take it for its own. A cache that cannot be read, or whose entry is
/// untrusted or damaged, never fails the node: the image is built instead and the note
/// (or the build's error) says why the cache was not used.
pub async fn realize_image(
    store: &Store,
    cache: Option<&CacheUse>,
    node: &str,
    resolved_hash: &ResolvedHash,
    spec: &ImageSpec,
) -> Result<(Facts, Option<String>), StepError> {
    let cache = cache.filter(|_| spec.pinned.is_some());
    let mut notes = Vec::new();
    let local = store.substitute(resolved_hash, objects);
    let (facts, came) = match (local, cache) {
        (Some(facts), _) => {
            notes.push("from the store (built before)".to_string());
            (facts, Came::Store)
        }
        (
            None,
            Some(CacheUse {
                cache, transfers, ..
            }),
        ) => {
            let pulled = cache.pull_told(store, resolved_hash, objects, node, &**transfers);
            match pulled.await {
                Ok(Some((entry, moved))) => {
                    notes.push(format!(
                        "fetched from {} ({} objects, {} MiB, signed by {})",
                        cache.url(),
                        moved.objects,
                        moved.bytes >> 20,
                        entry.signer.unwrap_or_default()
                    ));
                    (entry.body.facts, Came::Cache)
                }
                Ok(None) => (build(store, resolved_hash, spec, None).await?, Came::Build),
                Err(e) => {
                    let why = one_line(&e);
                    let facts = build(store, resolved_hash, spec, Some(&why)).await?;
                    notes.push(format!("built, the binary cache was not used: {why}"));
                    (facts, Came::BuildAfterRefusal)
                }
            }
        }
        (None, None) => (build(store, resolved_hash, spec, None).await?, Came::Build),
    };
    if let Some(CacheUse {
        cache,
        push: true,
        transfers,
    }) = cache.filter(|_| came != Came::Cache)
    {
        let output = output(node, resolved_hash, &facts);
        // Chunks are read back and mended where a fetch of them was refused.
        let repair = came == Came::BuildAfterRefusal;
        let pushed = cache.push_told(store, output, repair, &**transfers).await;
        notes.push(match pushed {
            Ok(moved) => format!("pushed to {} ({} MiB)", cache.url(), moved.bytes >> 20),
            Err(e) => format!("not pushed: {}", one_line(&e)),
        });
    }
    Ok((facts, (!notes.is_empty()).then(|| notes.join("; "))))
}

/// Where an image's outputs came from, in [`realize_image`].
#[derive(Clone, Copy, PartialEq, Eq)]
enum Came {
    Store,
    Cache,
    Build,
    /// Built because the cache's entry was refused (damaged, untrusted).
    BuildAfterRefusal,
}

/// An image's outputs as the binary cache takes them.
pub fn output(node: &str, resolved_hash: &ResolvedHash, facts: &Facts) -> crate::cache::Output {
    crate::cache::Output {
        node: node.to_string(),
        resolved_hash: resolved_hash.clone(),
        objects: objects(facts),
        facts: facts.clone(),
    }
}

/// Builds the image and remembers it as the store's substitute; `refused` is why the
/// cache was not used, which a failed build says too.
async fn build(
    store: &Store,
    resolved_hash: &ResolvedHash,
    spec: &ImageSpec,
    refused: Option<&str>,
) -> Result<Facts, StepError> {
    let facts = build_image(store, spec).await.map_err(|e| match refused {
        Some(why) => StepError {
            cause: format!("{}\n(the binary cache was not used: {why})", e.cause),
            hint: e.hint,
        },
        None => e,
    })?;
    store.put_substitute(resolved_hash, &facts)?;
    Ok(facts)
}
