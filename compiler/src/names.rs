//! The names an environment gives its nodes and repositories, checked when a node is built.
//! Names reach shell commands, file systems and git on targets later: what no real system
//! accepts is refused now, with the rule in the message. Pure rules on strings, apart
//! from the evaluator that applies them and the library functions beside it.

use crate::types::NodeKind;

/// Names reach shell commands and file systems on targets later: refuse what no real
/// system accepts now, with the rule in the message.
pub fn validate_name(kind: NodeKind, name: &str) -> Result<(), (String, String)> {
    let bad = |why: &str, help: &str| Err((why.to_string(), help.to_string()));
    if name.is_empty() {
        return bad("empty", "give it a name");
    }
    match kind {
        NodeKind::Vm | NodeKind::Host => {
            let ok = name.len() <= 63
                && name
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                && !name.starts_with('-')
                && !name.ends_with('-');
            if !ok {
                return bad(
                    "not a valid host name",
                    "use lowercase letters, digits and inner `-`, at most 63 characters: `db-0`",
                );
            }
        }
        NodeKind::Package => {
            let ok = name.len() >= 2
                && name
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "+-.".contains(c))
                && name.starts_with(|c: char| c.is_ascii_alphanumeric());
            if !ok {
                return bad("not a Debian package name", "package names are lowercase letters, digits, `+`, `-` and `.`, starting with a letter or digit");
            }
        }
        NodeKind::File => {
            let ok = name.starts_with('/')
                && !name.ends_with('/')
                && !name.split('/').any(|seg| seg == ".." || seg == ".")
                && !name.contains("//")
                && !name.chars().any(|c| c.is_control());
            if !ok {
                return bad("not a normalised absolute path", "write an absolute path without `.`, `..`, `//`, a trailing `/` or control characters: `/etc/app.conf`");
            }
        }
        NodeKind::Service => {
            let ok = name.len() <= 255
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || ":-_.@\\".contains(c))
                && !name.starts_with('-');
            if !ok {
                return bad(
                    "not a systemd unit name",
                    "unit names use letters, digits and `:-_.@`: `postgresql@15-main`",
                );
            }
        }
        NodeKind::Image => {
            if !is_label(name) {
                return bad(
                    "not a valid image name",
                    "use lowercase letters, digits, `-` and `.`, at most 63 characters: `debian-12`",
                );
            }
        }
        NodeKind::Exec => {
            let ok = name.len() <= 128
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_.@:".contains(c))
                && name.starts_with(|c: char| c.is_ascii_alphanumeric());
            if !ok {
                return bad(
                    "not a command name",
                    "name it with letters, digits and `-_.@:`, at most 128 characters: `init-replica`",
                );
            }
        }
        // Its name is the referenced file's path, which `stack_load.rs` resolved.
        NodeKind::Stack => {}
        NodeKind::Resource => {
            // What Terraform allows in a resource's name, so that an address reads the same
            // in both (`local_file.motd`).
            let ok = name.len() <= 128
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_".contains(c))
                && name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_');
            if !ok {
                return bad(
                    "not a resource name",
                    "name it with letters, digits, `-` and `_`, starting with a letter or `_`, at most 128 characters: `web_sg`",
                );
            }
        }
        NodeKind::Gitops => {
            // It names what its objects are delivered to (`NAME/manifest:…` in the state).
            if !is_label(name) {
                return bad(
                    "not a valid repository name",
                    "use lowercase letters, digits, `-` and `.`, at most 63 characters: `fleet-prod`",
                );
            }
        }
        NodeKind::Manifest => {
            let ok = name.len() <= 253
                && name
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
                && name.starts_with(|c: char| c.is_ascii_alphanumeric());
            if !ok {
                return bad(
                    "not a Kubernetes object name",
                    "use lowercase letters, digits, `-` and `.`",
                );
            }
        }
    }
    Ok(())
}

/// Lowercase letters, digits, `-` and `.`, starting with a letter or digit, at most 63
/// characters: an image's or a repository's name.
fn is_label(name: &str) -> bool {
    name.len() <= 63
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "-.".contains(c))
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
}

/// Why `repo` cannot name a git repository on a host: (label, help).
pub fn bad_repo(repo: &str) -> Option<(&'static str, &'static str)> {
    if repo.is_empty() || repo.starts_with('-') || repo.chars().any(char::is_control) {
        return Some((
            "not a repository path",
            "give the repository's path on its host, as `git clone HOST:PATH` takes it: `/srv/git/fleet.git`",
        ));
    }
    None
}

/// Why `branch` is not a branch name git accepts (`git check-ref-format --branch`).
pub fn bad_branch(branch: &str) -> Option<(&'static str, &'static str)> {
    let bad_char = |c: char| c.is_control() || c.is_whitespace() || "~^:?*[\\".contains(c);
    let ok = !branch.is_empty()
        && !branch.starts_with(['-', '/', '.'])
        && !branch.ends_with(['/', '.'])
        && !branch.ends_with(".lock")
        && !branch.contains("..")
        && !branch.contains("//")
        && !branch.contains("@{")
        && !branch.contains("/.")
        && branch != "@"
        && !branch.chars().any(bad_char);
    (!ok).then_some((
        "not a branch name git accepts",
        "use letters, digits and `-_./`, not starting with `-` or `.`: `main`, `env/prod`",
    ))
}

/// Why `path` is not a directory inside a repository.
pub fn bad_repo_dir(path: &str) -> Option<(&'static str, &'static str)> {
    let ok = path.is_empty()
        || (!path.starts_with('/')
            && !path.ends_with('/')
            && !path
                .split('/')
                .any(|seg| seg.is_empty() || seg == "." || seg == ".." || seg == ".git")
            && !path.chars().any(|c| c.is_control() || c == '\\'));
    (!ok).then_some((
        "not a directory inside the repository",
        "write it relative to the repository's top, without `.`, `..` or `.git`: `clusters/prod`; empty for the top",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        let check =
            |k, n: &str, ok: bool| assert_eq!(validate_name(k, n).is_ok(), ok, "{k:?} {n:?}");
        check(NodeKind::Vm, "db-0", true);
        check(NodeKind::Vm, "DB_0", false);
        check(NodeKind::Package, "libc6-dev", true);
        check(NodeKind::Package, "x; rm -rf /", false);
        check(NodeKind::File, "/etc/app.conf", true);
        check(NodeKind::File, "/etc/../shadow", false);
        check(NodeKind::File, "etc/x", false);
        check(NodeKind::Service, "postgresql@15-main", true);
        check(NodeKind::Service, "a b", false);
        check(NodeKind::Exec, "init-replica@db-0", true);
        check(NodeKind::Exec, "-x", false);
        check(NodeKind::Exec, "a b", false);
        check(NodeKind::Gitops, "fleet-prod", true);
        check(NodeKind::Gitops, "fleet/prod", false);
    }

    #[test]
    fn repositories() {
        let check = |f: fn(&str) -> Option<(&str, &str)>, x: &str, ok: bool| {
            assert_eq!(f(x).is_none(), ok, "{x:?}")
        };
        check(bad_repo, "/srv/git/fleet.git", true);
        check(bad_repo, "org/fleet.git", true);
        check(bad_repo, "--upload-pack=touch /tmp/x", false);
        check(bad_repo, "", false);
        check(bad_branch, "main", true);
        check(bad_branch, "env/prod-1", true);
        for bad in [
            "", "-f", "a..b", "a b", "a:b", "a.lock", "a/", "/a", "a@{1}", ".a", "a/.b",
        ] {
            check(bad_branch, bad, false);
        }
        check(bad_repo_dir, "", true);
        check(bad_repo_dir, "clusters/prod", true);
        for bad in ["/abs", "a/../b", "a//b", "a/", "./a", ".git/hooks", "a\\b"] {
            check(bad_repo_dir, bad, false);
        }
    }
}
