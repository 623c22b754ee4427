//! `envc init [DIR] [--ci github|gitlab]`: a new project that builds on the first try — a
//! commented `prod.env` (one local VM, a file, a service), an `envc.toml` whose settings
//! are commented out (so everything stays on this machine until one is chosen), a
//! `.gitignore` that keeps the store and signing keys out of git, and a CI workflow from
//! examples/ci/. Nothing is ever overwritten: if one file is there, none is written.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use clap::ValueEnum;

use crate::exit::{Exit, Failure, Outcome};
use crate::output;

/// A CI system whose workflow `--ci` adds.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum Ci {
    Github,
    Gitlab,
}

/// The files of a new project: where, and what.
fn files(ci: Option<Ci>) -> Vec<(&'static str, String)> {
    let mut files = vec![
        ("prod.env", include_str!("init/prod.env").to_string()),
        ("envc.toml", include_str!("init/envc.toml").to_string()),
        (".gitignore", include_str!("init/gitignore").to_string()),
    ];
    // The examples' workflows, pointed at this project's environment file.
    let workflow =
        |text: &str| text.replace("ENV_FILE: examples/quickstart.env", "ENV_FILE: prod.env");
    match ci {
        Some(Ci::Github) => files.push((
            ".github/workflows/envc.yml",
            workflow(include_str!("../../examples/ci/github-actions.yml")),
        )),
        Some(Ci::Gitlab) => files.push((
            ".gitlab-ci.yml",
            workflow(include_str!("../../examples/ci/gitlab-ci.yml")),
        )),
        None => {}
    }
    files
}

/// The first directory on `rel`'s way beneath `dir` that is a symbolic link.
fn link_on_the_way(dir: &Path, rel: &str) -> Option<PathBuf> {
    let mut at = dir.to_path_buf();
    let parent = Path::new(rel).parent()?;
    for c in parent.components() {
        at.push(c);
        if at
            .symlink_metadata()
            .is_ok_and(|m| m.file_type().is_symlink())
        {
            return Some(at);
        }
    }
    None
}

pub fn init(dir: &Path, ci: Option<Ci>) -> Outcome {
    // DIR is the user's choice, links followed; anything but a directory (or nothing yet)
    // is bad input, said before anything is written.
    match (dir.symlink_metadata(), dir.metadata()) {
        (Err(_), _) => {}
        (Ok(_), Ok(m)) if m.is_dir() => {}
        (Ok(_), Ok(_)) => {
            return Err(Failure::Input(format!(
                "{} is not a directory
  hint: name a new or existing directory: `envc init DIR`",
                dir.display()
            )))
        }
        (Ok(_), Err(e)) => {
            return Err(Failure::Input(format!(
                "{} is a link to nothing ({e})
  hint: name a new or existing directory, or \
                 remove the link",
                dir.display()
            )))
        }
    }
    let files = files(ci);
    // Beneath DIR nothing is followed out of it: a `.github` that is a link (to another
    // project, or to /etc) is refused, not written through.
    if let Some(link) = files.iter().find_map(|(rel, _)| link_on_the_way(dir, rel)) {
        return Err(Failure::Input(format!(
            "envc init writes nothing: {} is a link, and envc init writes only inside {}
  \
             hint: remove the link, or init another directory",
            link.display(),
            dir.display()
        )));
    }
    let taken: Vec<PathBuf> = files
        .iter()
        .map(|(rel, _)| dir.join(rel))
        .filter(|p| p.symlink_metadata().is_ok())
        .collect();
    if !taken.is_empty() {
        let list: Vec<String> = taken.iter().map(|p| p.display().to_string()).collect();
        return Err(Failure::Input(format!(
            "envc init writes nothing: {} already there\n  hint: init a new directory (`envc init DIR`), or move {} away",
            list.join(", "),
            if list.len() == 1 { "it" } else { "them" }
        )));
    }
    for (rel, text) in &files {
        let path = dir.join(rel);
        let written = (|| -> std::io::Result<()> {
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent)?;
            }
            // create_new: a file that appeared since the look above is not overwritten.
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&path)?;
            f.write_all(text.as_bytes())?;
            f.sync_all()
        })();
        written.map_err(|e| Failure::Errors {
            errors: vec![format!("cannot write {}: {e}", path.display())],
            exit: Exit::Failed,
        })?;
        output::line(format!("wrote {}", path.display()));
    }
    let env = dir.join("prod.env");
    output::line(format!(
        "next: `envc check {0}`, `envc plan {0}`, then `envc build {0}` (as the README's set-up \
         prepared this machine: QEMU, mmdebstrap); `envc lock {0}` pins its inputs in prod.lock",
        env.display()
    ));
    Ok(Exit::Ok)
}
