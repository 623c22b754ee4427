//! A directory of Kubernetes objects as envc writes it, locally (`envc render`) or in a
//! GitOps repository: one canonical YAML file per object and a `kustomization.yaml`
//! listing them. The kustomization is also envc's memory of what it wrote there: a file it
//! lists whose object left the environment is removed, and nothing it does not list is
//! touched. A kustomization envc did not write, or one another environment wrote, means
//! the directory is someone else's, and nothing is changed.
//!
//! The tree is untrusted: anyone who may push to the repository, or write in `--out`, can
//! put a link or a forged kustomization there. So every file is reached through
//! [`Beneath`] (no link followed, nothing outside the tree), and the kustomization records
//! the blake3 hash of each file envc wrote: a listed file whose content is no longer what
//! envc wrote is someone else's edit, and is left in place and reported, never removed.

use std::collections::BTreeMap;
use std::path::Path;

use crate::beneath::{Beneath, BeneathError};

/// The first line of every `kustomization.yaml` envc writes.
pub const MARK: &str =
    "# Written by envc: objects listed here that leave the environment are removed.";
/// The mark of directories rendered before it named its environment.
const OLD_MARK: &str =
    "# Written by `envc render`: objects listed here that leave the environment are removed.";
const ENVIRONMENT: &str = "# environment: ";
/// `# blake3: HASH FILE`: what envc wrote at FILE. Kustomizations written before these
/// lines existed have none; their files are removed as listed, within the tree.
const WROTE: &str = "# blake3: ";

pub const KUSTOMIZATION: &str = "kustomization.yaml";

/// What [`apply`] changed, as paths relative to the directory.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DirChange {
    pub written: Vec<String>,
    pub removed: Vec<String>,
    /// Files whose object left the environment but whose content someone else changed
    /// since envc wrote it: left in place, and no longer listed.
    pub left: Vec<String>,
    /// Every file the kustomization lists now (not a change: what the commit must hold).
    pub listed: Vec<String>,
}

impl DirChange {
    pub fn is_empty(&self) -> bool {
        self.written.is_empty() && self.removed.is_empty() && self.left.is_empty()
    }
}

/// Why a directory is not envc's to write.
#[derive(Debug)]
pub enum NotOurs {
    /// Its kustomization was not written by envc.
    Foreign,
    /// Another environment wrote it.
    Environment(String),
    /// A path in it is a link, or cannot be read or written.
    Path(BeneathError),
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
            NotOurs::Path(e) => e.fmt(f),
        }
    }
}

impl From<BeneathError> for NotOurs {
    fn from(e: BeneathError) -> NotOurs {
        NotOurs::Path(e)
    }
}

/// Writes the objects `write` (file name relative to `sub`, YAML) in the directory `sub`
/// of the tree `root` (`sub` empty: the tree's top), removes the files an earlier
/// kustomization listed that are not in `keep`, and writes the kustomization listing every
/// object of `keep` that is there. `keep` is every object the environment has in the
/// directory now, by file name, with its YAML where the caller knows it (a build does not
/// for an object whose input failed): such an object the tree lacks (a force-push or
/// someone's commit took it away) is written again, so the kustomization never lists less
/// than the environment has there, whatever happened to the previous one. An object
/// without its YAML is listed as the previous kustomization listed it, while its file is
/// there. Files whose content is already right are not rewritten. Nothing outside `root`
/// is read, written or removed, whatever links the tree holds.
pub fn apply(
    root: &Path,
    sub: &str,
    environment: &str,
    write: &[(String, String)],
    keep: &BTreeMap<String, Option<String>>,
) -> Result<DirChange, NotOurs> {
    let tree = Beneath::open(root, true)?;
    let at = |name: &str| path_in(sub, name);
    let kustomization = at(KUSTOMIZATION);
    let previous: BTreeMap<String, Option<String>> =
        previous_resources(&tree, &kustomization, environment)?
            .into_iter()
            .collect();
    let mut change = DirChange::default();
    let mut listed: BTreeMap<&str, String> = BTreeMap::new();
    for (name, yaml) in write {
        let path = at(name);
        if tree.read(&path)?.as_deref() != Some(yaml.as_bytes()) {
            tree.write(&path, yaml.as_bytes())?;
            change.written.push(name.clone());
        }
        listed.insert(name, content_hash(yaml.as_bytes()));
    }
    for (name, yaml) in keep {
        if listed.contains_key(name.as_str()) {
            continue;
        }
        let now = tree.read(&at(name))?;
        let hash = match (yaml, now) {
            (Some(yaml), None) => {
                tree.write(&at(name), yaml.as_bytes())?;
                change.written.push(name.clone());
                content_hash(yaml.as_bytes())
            }
            // There, as envc wrote it or as someone changed it since (the hash says which
            // when it leaves; what this run delivers was read back before it decided).
            (Some(yaml), Some(_)) => content_hash(yaml.as_bytes()),
            (None, None) => continue,
            (None, Some(now)) => match previous.get(name) {
                // A file from before hashes were recorded gets its own.
                Some(wrote) => wrote.clone().unwrap_or_else(|| content_hash(&now)),
                // Not known to be envc's: someone else's file at that name stays theirs.
                None => continue,
            },
        };
        listed.insert(name, hash);
    }
    for (old, wrote) in &previous {
        if keep.contains_key(old) {
            continue;
        }
        let path = at(old);
        let Some(now) = tree.read(&path)? else {
            continue;
        };
        if wrote.as_ref().is_some_and(|h| *h != content_hash(&now)) {
            change.left.push(old.clone());
            continue;
        }
        if tree.remove(&path)? {
            change.removed.push(old.clone());
            // Its namespace's directory, once empty.
            if let Some((dir, _)) = path.rsplit_once('/').filter(|(d, _)| *d != sub) {
                tree.remove_empty_dir(dir);
            }
        }
    }
    let text = kustomization_text(environment, &listed);
    if tree.read(&kustomization)?.as_deref() != Some(text.as_bytes()) {
        tree.write(&kustomization, text.as_bytes())?;
    }
    change.listed = listed.keys().map(|s| s.to_string()).collect();
    Ok(change)
}

/// The path of `name` in the directory `dir` of a tree (`dir` empty: the tree's top).
pub fn path_in(dir: &str, name: &str) -> String {
    if dir.is_empty() {
        name.to_string()
    } else {
        format!("{dir}/{name}")
    }
}

/// The hash a kustomization records for a file's content.
fn content_hash(bytes: &[u8]) -> String {
    blake3::hash(bytes).to_hex().to_string()
}

fn kustomization_text(environment: &str, resources: &BTreeMap<&str, String>) -> String {
    let mut k = format!("{MARK}\n{ENVIRONMENT}{environment}\n");
    for (name, hash) in resources {
        k.push_str(&format!("{WROTE}{hash} {name}\n"));
    }
    k.push_str("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n");
    if resources.is_empty() {
        k.push_str("resources: []\n");
    } else {
        k.push_str("resources:\n");
        for n in resources.keys() {
            k.push_str(&format!("- {n}\n"));
        }
    }
    k
}

/// The resources the kustomization of an earlier run lists, each with the hash of what
/// envc wrote there when it recorded one: none when there is no kustomization.
fn previous_resources(
    tree: &Beneath,
    path: &str,
    environment: &str,
) -> Result<Vec<(String, Option<String>)>, NotOurs> {
    match tree.read(path)? {
        Some(bytes) => listing(&bytes, environment),
        None => Ok(Vec::new()),
    }
}

/// What a kustomization envc wrote lists (file names relative to its directory), each
/// with the blake3 hash of what envc wrote there when it recorded one; an error when envc
/// did not write it, or another environment did. Only what envc writes is read as a
/// resource (`NAMESPACE/kind-NAME.yaml`), never a path out of the directory.
pub fn listing(bytes: &[u8], environment: &str) -> Result<Vec<(String, Option<String>)>, NotOurs> {
    let text = String::from_utf8_lossy(bytes);
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
    let wrote: BTreeMap<&str, &str> = text
        .lines()
        .filter_map(|l| l.strip_prefix(WROTE)?.split_once(' '))
        .map(|(hash, name)| (name, hash))
        .collect();
    Ok(text
        .lines()
        .filter_map(|l| l.strip_prefix("- "))
        .filter(|p| {
            p.ends_with(".yaml") && !p.split('/').any(|s| s.is_empty() || s == "." || s == "..")
        })
        .map(|p| (p.to_string(), wrote.get(p).map(|h| h.to_string())))
        .collect())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// Objects kept without their YAML (as a build keeps one whose input failed).
    fn names(xs: &[&str]) -> BTreeMap<String, Option<String>> {
        xs.iter().map(|s| (s.to_string(), None)).collect()
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
            "",
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
        let same = apply(dir, "", "prod", &[obj("a/x.yaml", "x: 1\n")], &all).unwrap();
        assert!(same.is_empty(), "{same:?}");
        // Only some objects written, the others kept as listed.
        assert_eq!(std::fs::read_to_string(dir.join(KUSTOMIZATION)).unwrap(), k);

        // One object leaves; a file envc never listed stays.
        std::fs::write(dir.join("b/notes.txt"), "mine").unwrap();
        let pruned = apply(dir, "", "prod", &[], &names(&["a/x.yaml"])).unwrap();
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
        assert!(matches!(
            apply(d.path(), "", "prod", &[], &BTreeMap::new()),
            Err(NotOurs::Foreign)
        ));

        let d = tempfile::tempdir().unwrap();
        apply(
            d.path(),
            "",
            "staging",
            &[obj("x.yaml", "x: 1\n")],
            &names(&["x.yaml"]),
        )
        .unwrap();
        assert!(matches!(
            apply(d.path(), "", "prod", &[], &BTreeMap::new()),
            Err(NotOurs::Environment(e)) if e == "staging"
        ));
        assert!(d.path().join("x.yaml").exists());
    }

    fn untouched(outside: &Path) {
        assert_eq!(
            std::fs::read_to_string(outside.join("victim.yaml")).unwrap(),
            "precious\n"
        );
        assert_eq!(std::fs::read_dir(outside).unwrap().count(), 1);
    }

    #[test]
    fn a_forged_kustomization_through_a_link_removes_nothing_outside() {
        // The attack of issue 34: a linked subdirectory, and a kustomization carrying
        // envc's header that lists a file through it.
        let (_d, tree, outside) = crate::beneath::tests::tree_and_outside();
        std::os::unix::fs::symlink(&outside, tree.join("link")).unwrap();
        std::fs::write(
            tree.join(KUSTOMIZATION),
            format!("{MARK}\n# environment: prod\nresources:\n- link/victim.yaml\n"),
        )
        .unwrap();
        let refused = apply(&tree, "", "prod", &[], &BTreeMap::new());
        assert!(
            matches!(&refused, Err(NotOurs::Path(BeneathError::Link { path })) if path == "link"),
            "{refused:?}"
        );
        assert!(refused.unwrap_err().to_string().contains("symbolic link"));
        untouched(&outside);
    }

    #[test]
    fn objects_are_never_written_through_a_linked_directory() {
        let (_d, tree, outside) = crate::beneath::tests::tree_and_outside();
        std::os::unix::fs::symlink(&outside, tree.join("shop")).unwrap();
        let objects = [
            obj("shop/victim.yaml", "evil: 1\n"),
            obj("shop/new.yaml", "x\n"),
        ];
        let refused = apply(&tree, "", "prod", &objects, &names(&["shop/victim.yaml"]));
        assert!(matches!(
            refused,
            Err(NotOurs::Path(BeneathError::Link { .. }))
        ));
        untouched(&outside);

        // A GitOps path whose first directory is a link: refused the same way.
        let (_d, tree, outside) = crate::beneath::tests::tree_and_outside();
        std::os::unix::fs::symlink(&outside, tree.join("clusters")).unwrap();
        let refused = apply(&tree, "clusters/prod", "prod", &objects, &BTreeMap::new());
        assert!(
            matches!(&refused, Err(NotOurs::Path(BeneathError::Link { path })) if path == "clusters"),
            "{refused:?}"
        );
        untouched(&outside);
    }

    #[test]
    fn a_file_someone_else_edited_is_left_not_removed() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path();
        apply(
            dir,
            "apps",
            "prod",
            &[obj("a/x.yaml", "x: 1\n"), obj("a/y.yaml", "y: 1\n")],
            &names(&["a/x.yaml", "a/y.yaml"]),
        )
        .unwrap();
        let k = std::fs::read_to_string(dir.join("apps").join(KUSTOMIZATION)).unwrap();
        assert!(
            k.contains(&format!("# blake3: {} a/x.yaml\n", content_hash(b"x: 1\n"))),
            "{k}"
        );
        std::fs::write(dir.join("apps/a/y.yaml"), "y: edited by hand\n").unwrap();
        let pruned = apply(dir, "apps", "prod", &[], &BTreeMap::new()).unwrap();
        assert_eq!(pruned.removed, ["a/x.yaml"]);
        assert_eq!(pruned.left, ["a/y.yaml"]);
        assert_eq!(
            std::fs::read_to_string(dir.join("apps/a/y.yaml")).unwrap(),
            "y: edited by hand\n"
        );
        assert!(
            std::fs::read_to_string(dir.join("apps").join(KUSTOMIZATION))
                .unwrap()
                .ends_with("resources: []\n")
        );
    }

    #[test]
    fn a_kustomization_from_before_hashes_still_prunes_inside_the_tree() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path();
        std::fs::create_dir_all(dir.join("a")).unwrap();
        std::fs::write(dir.join("a/x.yaml"), "x: 1\n").unwrap();
        std::fs::write(dir.join("a/y.yaml"), "y: 1\n").unwrap();
        std::fs::write(
            dir.join(KUSTOMIZATION),
            format!("{OLD_MARK}\nresources:\n- a/x.yaml\n- a/y.yaml\n"),
        )
        .unwrap();
        let pruned = apply(dir, "", "prod", &[], &names(&["a/x.yaml"])).unwrap();
        assert_eq!(pruned.removed, ["a/y.yaml"]);
        // The kept file now has its hash recorded.
        let k = std::fs::read_to_string(dir.join(KUSTOMIZATION)).unwrap();
        assert!(
            k.contains(&format!("# blake3: {} a/x.yaml\n", content_hash(b"x: 1\n"))),
            "{k}"
        );
    }

    #[test]
    fn a_directory_taken_away_is_written_whole_again() {
        // A force-push dropped envc's directory, kustomization and all; then one object
        // changed. What is delivered lists every object the environment has there, and
        // writes again the ones the tree lost.
        let d = tempfile::tempdir().unwrap();
        let dir = d.path();
        let keep: BTreeMap<String, Option<String>> = [
            ("a/x.yaml".to_string(), Some("x: 2\n".to_string())),
            ("a/y.yaml".to_string(), Some("y: 1\n".to_string())),
            // Its input failed in this run: unknown, and not there, so not listed.
            ("a/z.yaml".to_string(), None),
        ]
        .into();
        let change = apply(dir, "apps", "prod", &[obj("a/x.yaml", "x: 2\n")], &keep).unwrap();
        assert_eq!(change.written, ["a/x.yaml", "a/y.yaml"]);
        assert_eq!(change.listed, ["a/x.yaml", "a/y.yaml"]);
        assert_eq!(
            std::fs::read_to_string(dir.join("apps/a/y.yaml")).unwrap(),
            "y: 1\n"
        );
        let k = std::fs::read_to_string(dir.join("apps").join(KUSTOMIZATION)).unwrap();
        assert!(k.ends_with("resources:\n- a/x.yaml\n- a/y.yaml\n"), "{k}");
        assert!(
            k.contains(&format!("# blake3: {} a/y.yaml\n", content_hash(b"y: 1\n"))),
            "{k}"
        );

        // A file at an object's name that envc never listed and whose YAML is unknown is
        // not claimed: a later removal must not take someone else's file.
        std::fs::write(dir.join("apps/a/z.yaml"), "theirs\n").unwrap();
        let again = apply(dir, "apps", "prod", &[], &keep).unwrap();
        assert!(again.is_empty(), "{again:?}");
        assert_eq!(again.listed, ["a/x.yaml", "a/y.yaml"]);
    }

    #[test]
    fn a_listing_reads_only_envcs_own_kustomization() {
        let text = format!("{MARK}\n# environment: prod\n# blake3: abc a/x.yaml\nresources:\n- a/x.yaml\n- ../out.yaml\n- a/y.yaml\n");
        assert_eq!(
            listing(text.as_bytes(), "prod").unwrap(),
            [
                ("a/x.yaml".to_string(), Some("abc".to_string())),
                ("a/y.yaml".to_string(), None)
            ]
        );
        assert!(matches!(
            listing(text.as_bytes(), "staging"),
            Err(NotOurs::Environment(e)) if e == "prod"
        ));
        assert!(matches!(
            listing(b"resources:\n- a/x.yaml\n", "prod"),
            Err(NotOurs::Foreign)
        ));
    }
}
