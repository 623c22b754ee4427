//! What `envc --version` says beyond Cargo's version: the commit it was built from (its short
//! hash, `-dirty` when tracked files differed from it), the commit's date and the target
//! triple, all from the source and the toolchain, none from the build's clock or machine, so
//! the same commit builds the same binary bytes (`scripts/package-deb` and `.ci/run` rely on
//! it). Outside a git checkout (a source tarball) the commit and date are unknown;
//! `SOURCE_DATE_EPOCH`, when set, is the date (as the reproducible-builds convention has it).

use std::path::{Path, PathBuf};
use std::process::Command;

include!("src/utc.rs");

/// The first 12 hex digits, whatever `core.abbrev` the builder's git has.
const SHORT: usize = 12;

/// What the binary is built from besides the workspace's member crates (read from
/// `Cargo.toml`, [`sources`]): the manifests, the toolchain, this script, the CLI's own
/// crate and the standard library it embeds. `-dirty` says one of them differs from the
/// commit; an edit of the docs, the tests or the examples changes no byte of the binary,
/// so it neither marks it dirty nor rebuilds it.
const SOURCES: &[&str] = &[
    "Cargo.toml",
    "Cargo.lock",
    "rust-toolchain.toml",
    "build.rs",
    "src",
    "std",
];

/// [`SOURCES`] and the folders of the workspace's members (`members = [...]` in the root
/// manifest): a new crate counts without this script being told.
fn sources(root: &Path) -> Vec<String> {
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).unwrap_or_default();
    let members = manifest
        .lines()
        .find_map(|l| l.trim().strip_prefix("members"))
        .and_then(|l| l.split_once('[').map(|(_, rest)| rest))
        .and_then(|l| l.split_once(']').map(|(list, _)| list))
        .unwrap_or_default();
    let mut all: Vec<String> = SOURCES.iter().map(|s| s.to_string()).collect();
    all.extend(
        members
            .split(',')
            .map(|m| m.trim().trim_matches('"'))
            .filter(|m| !m.is_empty())
            .map(str::to_string),
    );
    all
}

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=src/utc.rs");
    println!("cargo:rerun-if-env-changed=SOURCE_DATE_EPOCH");
    let root = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_default());
    let commit = Checkout::find(&root).map(|c| c.describe());
    let date = match std::env::var("SOURCE_DATE_EPOCH") {
        Ok(s) if !s.trim().is_empty() => s.trim().parse::<u64>().ok(),
        _ => commit.as_ref().and_then(|c| c.unix),
    };
    let target = std::env::var("TARGET").unwrap_or_else(|_| "unknown".into());
    let hash = commit.as_ref().map(|c| c.hash.clone());
    let dirty = commit.as_ref().map(|c| c.dirty);
    let line = format!(
        "{} (commit {}, {}, {target})",
        std::env::var("CARGO_PKG_VERSION").unwrap_or_default(),
        match (&hash, dirty) {
            (Some(h), Some(true)) => format!("{h}-dirty"),
            (Some(h), _) => h.clone(),
            (None, _) => "unknown".into(),
        },
        date.map_or("date unknown".into(), rfc3339),
    );
    println!("cargo:rustc-env=BUILT_VERSION_LINE={line}");
    println!("cargo:rustc-env=BUILT_COMMIT={}", hash.unwrap_or_default());
    let dirty = dirty.map_or("", |d| if d { "true" } else { "false" });
    println!("cargo:rustc-env=BUILT_DIRTY={dirty}");
    let date = date.map(|d| d.to_string()).unwrap_or_default();
    println!("cargo:rustc-env=BUILT_DATE_UNIX={date}");
    println!("cargo:rustc-env=BUILT_TARGET={target}");
}

/// The git checkout whose top is this crate's directory (not one that merely holds it, as
/// a distribution's packaging repository may hold an unpacked tarball).
struct Checkout<'a> {
    root: &'a Path,
}

struct Described {
    hash: String,
    dirty: bool,
    unix: Option<u64>,
}

impl<'a> Checkout<'a> {
    fn find(root: &'a Path) -> Option<Checkout<'a>> {
        let checkout = Checkout { root };
        let top = checkout.git(&["rev-parse", "--show-toplevel"])?;
        let same = match (Path::new(&top).canonicalize(), root.canonicalize()) {
            (Ok(a), Ok(b)) => a == b,
            _ => false,
        };
        same.then_some(checkout)
    }

    /// `git ARGS` in the checkout: its trimmed stdout, or None when git is missing or fails.
    /// GIT_OPTIONAL_LOCKS=0: `git status` must not refresh the index, a write that would
    /// make this script's own inputs look newer than its last run.
    fn git(&self, args: &[&str]) -> Option<String> {
        let out = Command::new("git")
            .arg("-C")
            .arg(self.root)
            .args(args)
            .env("GIT_OPTIONAL_LOCKS", "0")
            .output()
            .ok()?;
        if !out.status.success() {
            return None;
        }
        Some(String::from_utf8_lossy(&out.stdout).trim().to_string())
    }

    fn describe(&self) -> Described {
        let sources = sources(self.root);
        let sources: Vec<&str> = sources.iter().map(String::as_str).collect();
        self.watch(&sources);
        let hash = self
            .git(&["rev-parse", &format!("--short={SHORT}"), "HEAD"])
            .unwrap_or_default();
        // Tracked files only: an untracked file (a scratch note, a build's output) is not
        // part of what the commit builds.
        let status = ["status", "--porcelain", "--untracked-files=no", "--"];
        let dirty = self
            .git(&[&status[..], &sources].concat())
            .is_none_or(|s| !s.is_empty());
        let unix = self
            .git(&["log", "-1", "--format=%ct", "HEAD"])
            .and_then(|s| s.parse().ok());
        Described { hash, dirty, unix }
    }

    /// Rerun when HEAD moves (a checkout, a commit: HEAD and the ref it names, loose or
    /// packed) or a tracked file of the `sources` changes (which is what `-dirty` says).
    /// Only files that exist: Cargo reruns a script on every build while one it watches is
    /// missing.
    fn watch(&self, sources: &[&str]) {
        let mut paths: Vec<PathBuf> = Vec::new();
        let mut git_path = |name: &str| {
            if let Some(p) = self.git(&["rev-parse", "--git-path", name]) {
                paths.push(self.root.join(p));
            }
        };
        git_path("HEAD");
        git_path("packed-refs");
        if let Some(head_ref) = self.git(&["symbolic-ref", "-q", "HEAD"]) {
            git_path(&head_ref);
        }
        if let Some(files) = self.git(&[&["ls-files", "-z", "--"][..], sources].concat()) {
            paths.extend(
                (files.split('\0'))
                    .filter(|f| !f.is_empty())
                    .map(|f| self.root.join(f)),
            );
        }
        for p in paths.iter().filter(|p| p.exists()) {
            println!("cargo:rerun-if-changed={}", p.display());
        }
    }
}
