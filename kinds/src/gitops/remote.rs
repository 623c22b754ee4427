//! Delivering Kubernetes objects to a git repository that Argo CD or Flux reconciles.
//!
//! `git` runs on this machine, in a scratch clone of the one branch (depth 1), and reaches
//! the repository through the target's connection ([`Transport::git_remote`]). A delivery
//! writes the objects under the repository's `path` with a kustomization
//! ([`crate::kustomize`]), removes what left the environment, commits, and pushes. It never
//! forces: when the branch moved between fetch and push, it starts again on top of what is
//! there now, a few times; a push refused for another reason is an error, and the scratch
//! clone goes with it (the source and the state are the truth, so nothing is lost: the next
//! run delivers again).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use crate::error::StepError;
use crate::kustomize;
pub use crate::node_type::Delivery;
use crate::transport::{GitRemote, Transport};

/// Where objects go: a branch of a repository on a host, and a directory in it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GitopsSpec {
    pub repo: String,
    pub branch: String,
    /// Relative to the repository's top; empty for the top.
    pub path: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Delivered {
    /// The commit that carries the objects: the new one, or the branch's head when there
    /// was nothing to change (`None`: the branch does not exist and nothing was written).
    pub commit: Option<String>,
    /// Whether this delivery made a commit.
    pub committed: bool,
    pub change: kustomize::DirChange,
    /// How many times the branch moved under it before its push landed.
    pub retries: u32,
}

/// How many times a delivery starts again on a branch that keeps moving.
const ATTEMPTS: u32 = 5;
/// Bounds each git command (a fetch of a large repository included).
const GIT_TIMEOUT: Duration = Duration::from_secs(300);

/// The branch's head commit, `None` when it does not exist yet; an error when the
/// repository cannot be read (no such repository, no access, host down).
pub async fn branch_head(
    t: &Transport,
    spec: &GitopsSpec,
    work: &Path,
) -> Result<Option<String>, StepError> {
    let remote = t.git_remote(&spec.repo);
    let out = git(
        work,
        &remote,
        &[
            "ls-remote",
            "--heads",
            &remote.url,
            &format!("refs/heads/{}", spec.branch),
        ],
    )
    .await?;
    if !out.status {
        return Err(failed(t, spec, "cannot read the repository", &out.stderr).hint(
            "check that the repository exists at that path on the host, and that the login may read and push to it",
        ));
    }
    Ok(out
        .stdout
        .lines()
        .find_map(|l| l.split_whitespace().next())
        .map(str::to_string))
}

/// What a branch holds of a delivery's directory, read back without a checkout.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReadBack {
    /// Whether the branch exists.
    pub branch: bool,
    /// What is at each name asked for and at the kustomization's (relative to the
    /// directory): absent names are not here.
    pub files: BTreeMap<String, Found>,
    /// The kustomization's bytes, when it is a plain file.
    pub kustomization: Option<Vec<u8>>,
}

/// What a read-back found at a name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Found {
    /// A plain file: the sha256 of its bytes (as a manifest's record keeps it).
    File { sha256: String },
    /// Something envc never writes there: a link, an executable, a submodule (git's mode).
    Other { mode: String },
}

impl Found {
    /// What is there, as a fact's value: the sha256 of a plain file, else what it is.
    pub fn sha256(&self) -> String {
        match self {
            Found::File { sha256 } => sha256.clone(),
            Found::Other { mode } => format!(
                "({})",
                match mode.as_str() {
                    "120000" => "a symbolic link",
                    "100755" => "an executable file",
                    "160000" => "a submodule",
                    _ => "not a plain file",
                }
            ),
        }
    }
}

/// Reads back what the branch holds at `names` (relative to the delivery's directory) and
/// its kustomization: one `ls-remote`, one shallow fetch of the branch's head into a
/// scratch repository, then `ls-tree` and `cat-file` of git's objects there. Nothing is
/// checked out, so no link in the repository is ever followed.
pub async fn read_back(
    t: &Transport,
    spec: &GitopsSpec,
    names: &[String],
    work: &Path,
) -> Result<ReadBack, StepError> {
    if branch_head(t, spec, work).await?.is_none() {
        return Ok(ReadBack::default());
    }
    let remote = t.git_remote(&spec.repo);
    let scratch = tempfile::Builder::new()
        .prefix("gitops-read")
        .tempdir_in(work)
        .map_err(|e| {
            StepError::new(format!(
                "cannot create a scratch repository in {}: {e}",
                work.display()
            ))
        })?;
    let dir = scratch.path();
    run_ok(t, spec, dir, &remote, &["init", "-q", "--bare"]).await?;
    let branch_ref = format!("refs/heads/{}", spec.branch);
    run_ok(
        t,
        spec,
        dir,
        &remote,
        &[
            "fetch",
            "-q",
            "--no-tags",
            "--depth=1",
            &remote.url,
            &branch_ref,
        ],
    )
    .await?;
    let entries = tree_entries(t, spec, dir, &remote, "FETCH_HEAD").await?;
    let asked: Vec<&str> = names
        .iter()
        .map(String::as_str)
        .chain([kustomize::KUSTOMIZATION])
        .collect();
    // The plain files among them are read, in one batch.
    let plain: Vec<(&str, String)> = asked
        .iter()
        .map(|name| (*name, in_repository(spec, name)))
        .filter(|(_, path)| entries.get(path).is_some_and(|m| m == REGULAR))
        .collect();
    let paths: Vec<String> = plain.iter().map(|(_, p)| p.clone()).collect();
    let blobs = read_blobs(t, spec, dir, &remote, "FETCH_HEAD", &paths).await?;
    let mut bytes: BTreeMap<&str, Vec<u8>> = plain
        .iter()
        .zip(blobs)
        .filter_map(|((name, _), b)| Some((*name, b?)))
        .collect();
    let files = asked
        .iter()
        .filter_map(|name| {
            let found = match bytes.get(name) {
                Some(b) => Found::File {
                    sha256: crate::script::sha256_hex(b),
                },
                None => Found::Other {
                    mode: entries.get(&in_repository(spec, name))?.clone(),
                },
            };
            Some((name.to_string(), found))
        })
        .collect();
    let kustomization = bytes.remove(kustomize::KUSTOMIZATION);
    Ok(ReadBack {
        branch: true,
        files,
        kustomization,
    })
}

/// A repository is what a cluster applies: an object that holds a preview's placeholder
/// (`<known after build: …>`, which only `envc render --preview` writes; a source that
/// spells it out gets here too) is never committed.
fn refuse_placeholders(d: &Delivery) -> Result<(), StepError> {
    let held: Vec<String> = d
        .write
        .iter()
        .map(|(name, yaml)| (name, Some(yaml)))
        .chain(d.keep.iter().map(|(name, yaml)| (name, yaml.as_ref())))
        .filter_map(|(name, yaml)| {
            let found = crate::substitute::placeholders_in(yaml?);
            (!found.is_empty()).then(|| format!("{name} ({})", found.join(", ")))
        })
        .collect();
    match held.first() {
        None => Ok(()),
        Some(_) => Err(StepError::with_hint(
            format!(
                "refusing to commit objects that hold a value not known yet (`{}…>`): {}",
                crate::substitute::PLACEHOLDER,
                held.join(", ")
            ),
            "nothing was committed or pushed; such a placeholder is what `envc render --preview` writes, never a value to deliver",
        )),
    }
}

/// Writes, commits and pushes `d` (see the module's comment).
pub async fn deliver(
    t: &Transport,
    spec: &GitopsSpec,
    d: &Delivery,
    work: &Path,
) -> Result<Delivered, StepError> {
    refuse_placeholders(d)?;
    let remote = t.git_remote(&spec.repo);
    let mut retries = 0;
    loop {
        let listed = branch_head(t, spec, work).await?;
        let scratch = tempfile::Builder::new()
            .prefix("gitops")
            .tempdir_in(work)
            .map_err(|e| {
                StepError::new(format!(
                    "cannot create a scratch clone in {}: {e}",
                    work.display()
                ))
            })?;
        let dir = scratch.path();
        run_ok(t, spec, dir, &remote, &["init", "-q"]).await?;
        let branch_ref = format!("refs/heads/{}", spec.branch);
        // What is built on: the branch as fetched (it may have moved since it was listed).
        let base = match listed {
            Some(_) => {
                run_ok(
                    t,
                    spec,
                    dir,
                    &remote,
                    &[
                        "fetch",
                        "-q",
                        "--no-tags",
                        "--depth=1",
                        &remote.url,
                        &branch_ref,
                    ],
                )
                .await?;
                run_ok(
                    t,
                    spec,
                    dir,
                    &remote,
                    &["checkout", "-q", "-B", &spec.branch, "FETCH_HEAD"],
                )
                .await?;
                Some(
                    git(dir, &remote, &["rev-parse", "HEAD"])
                        .await?
                        .stdout
                        .trim()
                        .to_string(),
                )
            }
            None => {
                run_ok(
                    t,
                    spec,
                    dir,
                    &remote,
                    &["symbolic-ref", "HEAD", &branch_ref],
                )
                .await?;
                None
            }
        };
        let change =
            kustomize::apply(dir, &spec.path, &d.environment, &d.write, &d.keep).map_err(|e| {
                StepError::with_hint(
                    format!(
                        "{}: cannot write `{}`: {e}",
                        describe(t, spec),
                        display_path(spec)
                    ),
                    "nothing was committed or pushed",
                )
            })?;
        let scope = scope(spec);
        run_ok(t, spec, dir, &remote, &["add", "-A", "--", scope]).await?;
        let staged = git(dir, &remote, &["diff", "--cached", "--quiet"]).await?;
        if staged.status {
            return Ok(Delivered {
                commit: base,
                committed: false,
                change: kustomize::DirChange::default(),
                retries,
            });
        }
        let message = commit_message(d, spec, &change);
        run_ok(
            t,
            spec,
            dir,
            &remote,
            &["commit", "-q", "--no-verify", "-m", &message],
        )
        .await?;
        let commit = git(dir, &remote, &["rev-parse", "HEAD"])
            .await?
            .stdout
            .trim()
            .to_string();
        check_committed(t, spec, dir, &remote, d, &change).await?;
        let push = git(
            dir,
            &remote,
            &[
                "push",
                "-q",
                "--no-verify",
                &remote.url,
                &format!("HEAD:{branch_ref}"),
            ],
        )
        .await?;
        if push.status {
            return Ok(Delivered {
                commit: Some(commit),
                committed: true,
                change,
                retries,
            });
        }
        // Refused. When the branch moved since the fetch, someone else pushed first: start
        // again on top of their commit. Otherwise the refusal is the answer.
        let now = branch_head(t, spec, work).await?;
        if now == base || retries + 1 >= ATTEMPTS {
            let why = if now == base {
                "the push was refused"
            } else {
                "the branch kept moving while envc pushed"
            };
            return Err(failed(t, spec, why, &push.stderr).hint(
                "envc never force-pushes; nothing was changed in the repository, and the next run delivers again",
            ));
        }
        retries += 1;
    }
}

fn commit_message(d: &Delivery, spec: &GitopsSpec, change: &kustomize::DirChange) -> String {
    let mut m = format!("envc: {} (run {})\n\n", d.environment, d.run);
    m += &format!(
        "Source: {}\n",
        d.source.as_deref().unwrap_or("not a git work tree")
    );
    let at = |f: &str| in_repository(spec, f);
    for f in &change.written {
        m += &format!("Wrote: {}\n", at(f));
    }
    for f in &change.removed {
        m += &format!("Removed: {}\n", at(f));
    }
    for f in &change.left {
        m += &format!(
            "Left (changed by someone else since envc wrote it): {}\n",
            at(f)
        );
    }
    m
}

/// What `git add` and `ls-tree` look at: the delivery's directory.
fn scope(spec: &GitopsSpec) -> &str {
    if spec.path.is_empty() {
        "."
    } else {
        &spec.path
    }
}

/// The path of `name` (relative to the delivery's directory) in the repository.
fn in_repository(spec: &GitopsSpec, name: &str) -> String {
    kustomize::path_in(&spec.path, name)
}

/// Before anything is pushed, proves from the commit itself that it holds what envc will
/// report committed: the kustomization and every object it lists as regular files (never
/// links), each object written with exactly the bytes written. A tree that led a write
/// elsewhere fails here, not in the repository.
async fn check_committed(
    t: &Transport,
    spec: &GitopsSpec,
    dir: &Path,
    remote: &GitRemote,
    d: &Delivery,
    change: &kustomize::DirChange,
) -> Result<(), StepError> {
    let regular = regular_files(t, spec, dir, remote, "HEAD").await?;
    let expected = change
        .listed
        .iter()
        .map(String::as_str)
        .chain([kustomize::KUSTOMIZATION])
        .map(|name| in_repository(spec, name));
    let missing: Vec<String> = expected
        .filter(|path| !regular.contains_key(path.as_str()))
        .collect();
    // What this delivery wrote: its objects, and those of the environment the branch had
    // lost (written from `keep`).
    let mut written: BTreeMap<&str, &str> = d
        .write
        .iter()
        .map(|(name, yaml)| (name.as_str(), yaml.as_str()))
        .collect();
    for name in &change.written {
        if let Some(Some(yaml)) = d.keep.get(name) {
            written.entry(name).or_insert(yaml);
        }
    }
    let paths: Vec<String> = written.keys().map(|n| in_repository(spec, n)).collect();
    let contents = read_blobs(t, spec, dir, remote, "HEAD", &paths).await?;
    let differ: Vec<String> = paths
        .into_iter()
        .zip(written.values())
        .zip(contents)
        .filter(|((path, yaml), bytes)| {
            // A file not committed at all is named once, above.
            bytes.as_deref() != Some(yaml.as_bytes()) && !missing.contains(path)
        })
        .map(|((path, _), _)| path)
        .collect();
    if missing.is_empty() && differ.is_empty() {
        return Ok(());
    }
    let mut what = Vec::new();
    if !missing.is_empty() {
        what.push(format!(
            "not committed as plain files: {}",
            missing.join(", ")
        ));
    }
    if !differ.is_empty() {
        what.push(format!(
            "committed with other content than envc wrote: {}",
            differ.join(", ")
        ));
    }
    Err(StepError::with_hint(
        format!(
            "{}: the commit does not hold what envc wrote ({})",
            describe(t, spec),
            what.join("; ")
        ),
        "nothing was pushed; look for links or ignore rules in the repository that redirect or hide these paths",
    ))
}

/// The entries of commit `rev` under the delivery's directory, by path in the repository:
/// its git mode (`100644` a file, `100755` an executable one, `120000` a link, `160000` a
/// submodule). Read from git's objects, never from a checkout, so no link is followed.
async fn tree_entries(
    t: &Transport,
    spec: &GitopsSpec,
    dir: &Path,
    remote: &GitRemote,
    rev: &str,
) -> Result<BTreeMap<String, String>, StepError> {
    let scope = scope(spec);
    let listing = git(
        dir,
        remote,
        &["ls-tree", "-r", "-z", "--full-tree", rev, "--", scope],
    )
    .await?;
    if !listing.status {
        return Err(failed(t, spec, "cannot list the commit", &listing.stderr));
    }
    Ok(listing
        .stdout
        .split('\0')
        .filter_map(|entry| {
            let (meta, path) = entry.split_once('\t')?;
            let mode = meta.split(' ').next()?;
            Some((path.to_string(), mode.to_string()))
        })
        .collect())
}

/// The plain files (`100644`: what envc writes) of commit `rev` under the delivery's
/// directory, by path in the repository, with their mode.
async fn regular_files(
    t: &Transport,
    spec: &GitopsSpec,
    dir: &Path,
    remote: &GitRemote,
    rev: &str,
) -> Result<BTreeMap<String, String>, StepError> {
    let mut entries = tree_entries(t, spec, dir, remote, rev).await?;
    entries.retain(|_, mode| mode == REGULAR);
    Ok(entries)
}

/// The git mode of a plain file, as envc writes every file.
const REGULAR: &str = "100644";

/// The bytes at `paths` in commit `rev`, in order (`None`: not a blob there), in one
/// `git cat-file --batch`.
async fn read_blobs(
    t: &Transport,
    spec: &GitopsSpec,
    dir: &Path,
    remote: &GitRemote,
    rev: &str,
    paths: &[String],
) -> Result<Vec<Option<Vec<u8>>>, StepError> {
    if paths.is_empty() {
        return Ok(Vec::new());
    }
    let batch: String = paths.iter().map(|p| format!("{rev}:{p}\n")).collect();
    let contents = run_git(
        dir,
        remote,
        &["cat-file", "--batch"],
        Some(batch.into_bytes()),
    )
    .await?;
    if !contents.status.success() {
        let stderr = String::from_utf8_lossy(&contents.stderr);
        return Err(failed(t, spec, "cannot read the commit", &stderr));
    }
    let mut rest = contents.stdout.as_slice();
    Ok(paths.iter().map(|_| next_batch_object(&mut rest)).collect())
}

/// The next object of `git cat-file --batch`'s output (`OID TYPE SIZE\n`, the bytes, `\n`),
/// `None` for a missing one (`NAME missing\n`) or the end.
fn next_batch_object(rest: &mut &[u8]) -> Option<Vec<u8>> {
    let end = rest.iter().position(|b| *b == b'\n')?;
    let header = String::from_utf8_lossy(&rest[..end]).into_owned();
    *rest = &rest[end + 1..];
    let size: usize = header.rsplit(' ').next()?.parse().ok()?;
    if header.ends_with(" missing") || rest.len() < size {
        return None;
    }
    let bytes = rest[..size].to_vec();
    *rest = rest.get(size + 1..).unwrap_or_default();
    Some(bytes)
}

fn display_path(spec: &GitopsSpec) -> String {
    if spec.path.is_empty() {
        "the repository's top".into()
    } else {
        format!("{}/", spec.path)
    }
}

fn describe(t: &Transport, spec: &GitopsSpec) -> String {
    format!(
        "repository {} (branch {}) on host `{}`",
        spec.repo,
        spec.branch,
        t.host()
    )
}

fn failed(t: &Transport, spec: &GitopsSpec, why: &str, stderr: &str) -> StepError {
    let detail = stderr.trim();
    if detail.is_empty() {
        StepError::new(format!("{}: {why}", describe(t, spec)))
    } else {
        StepError::new(format!("{}: {why}: {detail}", describe(t, spec)))
    }
}

struct GitOutput {
    status: bool,
    stdout: String,
    stderr: String,
}

async fn run_ok(
    t: &Transport,
    spec: &GitopsSpec,
    dir: &Path,
    remote: &GitRemote,
    args: &[&str],
) -> Result<(), StepError> {
    let out = git(dir, remote, args).await?;
    if out.status {
        Ok(())
    } else {
        Err(failed(
            t,
            spec,
            &format!("`git {}` failed", args[0]),
            &out.stderr,
        ))
    }
}

/// Runs `git ARGS` in `dir`, reaching `remote` through its ssh command, with no user or
/// system configuration (a signing or hook setting of the user's must not change what
/// envc commits) and never a prompt.
async fn git(dir: &Path, remote: &GitRemote, args: &[&str]) -> Result<GitOutput, StepError> {
    let out = run_git(dir, remote, args, None).await?;
    Ok(GitOutput {
        status: out.status.success(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    })
}

async fn run_git(
    dir: &Path,
    remote: &GitRemote,
    args: &[&str],
    input: Option<Vec<u8>>,
) -> Result<std::process::Output, StepError> {
    let mut cmd = tokio::process::Command::new("git");
    cmd.current_dir(dir)
        .args(args)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_AUTHOR_NAME", "envc")
        .env("GIT_AUTHOR_EMAIL", "envc@localhost")
        .env("GIT_COMMITTER_NAME", "envc")
        .env("GIT_COMMITTER_EMAIL", "envc@localhost")
        .stdin(if input.is_some() {
            std::process::Stdio::piped()
        } else {
            std::process::Stdio::null()
        })
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    match &remote.ssh_command {
        Some(ssh) => cmd.env("GIT_SSH_COMMAND", ssh),
        None => cmd.env_remove("GIT_SSH_COMMAND"),
    };
    let run = async {
        let mut child = cmd.spawn()?;
        let feed = child.stdin.take().zip(input).map(|(mut stdin, bytes)| {
            tokio::spawn(async move {
                use tokio::io::AsyncWriteExt;
                // A git that stops reading has failed, and says so on its own.
                let _ = stdin.write_all(&bytes).await;
            })
        });
        let out = child.wait_with_output().await;
        if let Some(feed) = feed {
            let _ = feed.await;
        }
        out
    };
    match tokio::time::timeout(GIT_TIMEOUT, run).await {
        Ok(Ok(out)) => Ok(out),
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::NotFound => Err(StepError::with_hint(
            format!("cannot run git: {e}"),
            "install git on the machine envc runs on (`apt-get install git`)",
        )),
        Ok(Err(e)) => Err(StepError::new(format!("cannot run git: {e}"))),
        Err(_) => Err(StepError::new(format!(
            "`git {}` did not finish within {} s and was stopped",
            args[0],
            GIT_TIMEOUT.as_secs()
        ))),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn delivery(write: &[(&str, &str)], keep: &[(&str, Option<&str>)]) -> Delivery {
        Delivery {
            write: write
                .iter()
                .map(|(n, y)| (n.to_string(), y.to_string()))
                .collect(),
            keep: keep
                .iter()
                .map(|(n, y)| (n.to_string(), y.map(str::to_string)))
                .collect(),
            environment: "prod".into(),
            run: "r".into(),
            source: None,
        }
    }

    #[test]
    fn a_placeholder_is_never_delivered() {
        let fine = delivery(
            &[("shop/configmap-web.yaml", "data:\n  upstream: 10.89.0.2\n")],
            &[("shop/deployment-web.yaml", None)],
        );
        assert!(refuse_placeholders(&fine).is_ok());
        let held = "data:\n  upstream: \"<known after build: vm:web.address>:8080\"\n";
        for d in [
            delivery(&[("shop/configmap-web.yaml", held)], &[]),
            delivery(&[], &[("shop/configmap-web.yaml", Some(held))]),
        ] {
            let e = refuse_placeholders(&d).unwrap_err().to_string();
            assert!(
                e.contains("shop/configmap-web.yaml (vm:web.address)")
                    && e.contains("nothing was committed"),
                "{e}"
            );
        }
    }
}
