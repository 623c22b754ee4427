//! A directory of Kubernetes objects as envc writes it, locally (`envc render`) or in a
//! GitOps repository: one canonical YAML file per object and a `kustomization.yaml`
//! listing them. The kustomization is also envc's memory of what it wrote there: a file it
//! lists whose object left the environment is removed, and nothing it does not list is
//! touched. A kustomization envc did not write, or one another environment wrote, means
//! the directory is someone else's, and nothing is changed.

use std::collections::BTreeSet;
use std::path::Path;

/// The first line of every `kustomization.yaml` envc writes.
pub const MARK: &str =
    "# Written by envc: objects listed here that leave the environment are removed.";
/// The mark of directories rendered before it named its environment.
const OLD_MARK: &str =
    "# Written by `envc render`: objects listed here that leave the environment are removed.";
const ENVIRONMENT: &str = "# environment: ";

pub const KUSTOMIZATION: &str = "kustomization.yaml";

/// What [`apply`] changed, as paths relative to the directory.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DirChange {
    pub written: Vec<String>,
    pub removed: Vec<String>,
}

impl DirChange {
    pub fn is_empty(&self) -> bool {
        self.written.is_empty() && self.removed.is_empty()
    }
}

/// Why a directory is not envc's to write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NotOurs {
    /// Its kustomization was not written by envc.
    Foreign,
    /// Another environment wrote it.
    Environment(String),
    Io(String),
}

impl std::fmt::Display for NotOurs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NotOurs::Foreign => write!(
                f,
                "its {KUSTOMIZATION} was not written by envc; give envc a directory of its own (an empty one, or one envc wrote before)"
            ),
            NotOurs::Environment(env) => write!(
                f,
                "its {KUSTOMIZATION} was written by environment `{env}`; each environment needs a directory of its own, or they would remove each other's objects"
            ),
            NotOurs::Io(e) => f.write_str(e),
        }
    }
}

/// Writes the objects `write` (relative file name, YAML) under `dir`, removes the files an
/// earlier kustomization listed that are not in `keep` (the file names of every object the
/// environment has there now), and writes the kustomization: what it listed and is kept,
/// and what was written. Files whose content is already right are not rewritten.
pub fn apply(
    dir: &Path,
    environment: &str,
    write: &[(String, String)],
    keep: &BTreeSet<String>,
) -> Result<DirChange, NotOurs> {
    let kustomization = dir.join(KUSTOMIZATION);
    let previous = previous_resources(&kustomization, environment)?;
    std::fs::create_dir_all(dir).map_err(|e| io(dir, &e))?;
    let mut change = DirChange::default();
    for (name, yaml) in write {
        let path = dir.join(name);
        if std::fs::read(&path).ok().as_deref() == Some(yaml.as_bytes()) {
            continue;
        }
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|e| io(parent, &e))?;
        }
        write_atomic(&path, yaml.as_bytes())?;
        change.written.push(name.clone());
    }
    for old in previous.iter().filter(|p| !keep.contains(*p)) {
        let path = dir.join(old);
        match std::fs::remove_file(&path) {
            Ok(()) => {
                change.removed.push(old.clone());
                // Its namespace's directory, once empty.
                if let Some(parent) = path.parent().filter(|d| *d != dir) {
                    let _ = std::fs::remove_dir(parent);
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io(&path, &e)),
        }
    }
    let listed: BTreeSet<&str> = previous
        .iter()
        .filter(|p| keep.contains(*p))
        .chain(write.iter().map(|(n, _)| n))
        .map(String::as_str)
        .collect();
    let text = kustomization_text(environment, &listed);
    if std::fs::read(&kustomization).ok().as_deref() != Some(text.as_bytes()) {
        write_atomic(&kustomization, text.as_bytes())?;
    }
    Ok(change)
}

fn kustomization_text(environment: &str, resources: &BTreeSet<&str>) -> String {
    let mut k = format!(
        "{MARK}\n{ENVIRONMENT}{environment}\napiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
    );
    if resources.is_empty() {
        k.push_str("resources: []\n");
    } else {
        k.push_str("resources:\n");
        for n in resources {
            k.push_str(&format!("- {n}\n"));
        }
    }
    k
}

/// The resources the kustomization of an earlier run lists: none when there is none.
fn previous_resources(path: &Path, environment: &str) -> Result<Vec<String>, NotOurs> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io(path, &e)),
    };
    if !text.starts_with(MARK) && !text.starts_with(OLD_MARK) {
        return Err(NotOurs::Foreign);
    }
    if let Some(other) = text
        .lines()
        .find_map(|l| l.strip_prefix(ENVIRONMENT))
        .filter(|e| *e != environment)
    {
        return Err(NotOurs::Environment(other.to_string()));
    }
    Ok(text
        .lines()
        .filter_map(|l| l.strip_prefix("- "))
        // Only what envc writes: NAMESPACE/KIND-NAME.yaml, never a path out of the directory.
        .filter(|p| {
            p.ends_with(".yaml") && !p.split('/').any(|s| s.is_empty() || s == "." || s == "..")
        })
        .map(str::to_string)
        .collect())
}

fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), NotOurs> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut tmp = tempfile::NamedTempFile::new_in(dir).map_err(|e| io(dir, &e))?;
    std::io::Write::write_all(&mut tmp, bytes).map_err(|e| io(path, &e))?;
    tmp.persist(path).map_err(|e| io(path, &e.error))?;
    Ok(())
}

fn io(path: &Path, e: &std::io::Error) -> NotOurs {
    NotOurs::Io(format!("{}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn names(xs: &[&str]) -> BTreeSet<String> {
        xs.iter().map(|s| s.to_string()).collect()
    }

    fn obj(name: &str, body: &str) -> (String, String) {
        (name.to_string(), body.to_string())
    }

    #[test]
    fn writes_lists_and_prunes_only_its_own() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path();
        let all = names(&["a/x.yaml", "b/y.yaml"]);
        let first = apply(
            dir,
            "prod",
            &[obj("a/x.yaml", "x: 1\n"), obj("b/y.yaml", "y: 1\n")],
            &all,
        )
        .unwrap();
        assert_eq!(first.written, ["a/x.yaml", "b/y.yaml"]);
        let k = std::fs::read_to_string(dir.join(KUSTOMIZATION)).unwrap();
        assert!(
            k.starts_with(&format!("{MARK}\n# environment: prod\n")),
            "{k}"
        );
        assert!(k.ends_with("resources:\n- a/x.yaml\n- b/y.yaml\n"), "{k}");

        // The same objects: nothing changes.
        let same = apply(dir, "prod", &[obj("a/x.yaml", "x: 1\n")], &all).unwrap();
        assert!(same.is_empty(), "{same:?}");
        // Only some objects written, the others kept as listed.
        assert_eq!(std::fs::read_to_string(dir.join(KUSTOMIZATION)).unwrap(), k);

        // One object leaves; a file envc never listed stays.
        std::fs::write(dir.join("b/notes.txt"), "mine").unwrap();
        let pruned = apply(dir, "prod", &[], &names(&["a/x.yaml"])).unwrap();
        assert_eq!(pruned.removed, ["b/y.yaml"]);
        assert!(dir.join("b/notes.txt").exists());
        assert!(std::fs::read_to_string(dir.join(KUSTOMIZATION))
            .unwrap()
            .ends_with("resources:\n- a/x.yaml\n"));
    }

    #[test]
    fn refuses_a_directory_that_is_not_its_own() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join(KUSTOMIZATION), "resources:\n- app.yaml\n").unwrap();
        assert_eq!(
            apply(d.path(), "prod", &[], &BTreeSet::new()),
            Err(NotOurs::Foreign)
        );

        let d = tempfile::tempdir().unwrap();
        apply(
            d.path(),
            "staging",
            &[obj("x.yaml", "x: 1\n")],
            &names(&["x.yaml"]),
        )
        .unwrap();
        assert_eq!(
            apply(d.path(), "prod", &[], &BTreeSet::new()),
            Err(NotOurs::Environment("staging".into()))
        );
        assert!(d.path().join("x.yaml").exists());
    }
}
