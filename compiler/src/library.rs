//! The pure library functions (`len`, `join`, `path`, …) and node-name validation.

use std::collections::BTreeMap;
use std::rc::Rc;

use envc_lang::{Diagnostic, Span};

use crate::builtins::Builtin;
use crate::derivation::value_json;
use crate::eval::{display, Evaluator, Stop};
use crate::types::NodeKind;
use crate::value::{Deferred, Value};

type R<T> = Result<T, Stop>;

fn wrong(ev: &Evaluator, f: &str, expected: &str, v: &Value, span: Span) -> Stop {
    Stop::from(
        Diagnostic::new(
            "type::mismatch",
            format!("`{f}` expected {expected}, found {}", v.type_name()),
        )
        .label(ev.file(), span, format!("this is {}", v.type_name())),
    )
}

fn no_deferred(ev: &Evaluator, f: &str, v: &Value, span: Span) -> R<()> {
    if v.is_deferred() {
        return Err(Stop::from(crate::check::deferred_diagnostic(
            ev.file(),
            span,
            &format!("`{f}`"),
            &crate::types::Ty::deferred(crate::types::Ty::Str),
        )));
    }
    Ok(())
}

/// The elements of a list of ints, strings or sizes (all alike), in ascending order.
fn sorted(ev: &Evaluator, name: &str, (v, s): (Value, Span)) -> R<Vec<Value>> {
    no_deferred(ev, name, &v, s)?;
    let Value::List(xs) = &v else {
        return Err(wrong(ev, name, "a list", &v, s));
    };
    let mut ints: Vec<i64> = Vec::new();
    let mut strs: Vec<Rc<str>> = Vec::new();
    let mut sizes: Vec<u64> = Vec::new();
    for x in xs.iter() {
        no_deferred(ev, name, x, s)?;
        match x {
            Value::Int(n) if strs.is_empty() && sizes.is_empty() => ints.push(*n),
            Value::Str(t) if ints.is_empty() && sizes.is_empty() => strs.push(t.clone()),
            Value::Size(n) if ints.is_empty() && strs.is_empty() => sizes.push(*n),
            other => {
                return Err(wrong(
                    ev,
                    name,
                    "a list of ints, strings or sizes, all alike",
                    other,
                    s,
                ))
            }
        }
    }
    ints.sort_unstable();
    strs.sort_unstable();
    sizes.sort_unstable();
    Ok(ints
        .into_iter()
        .map(Value::Int)
        .chain(strs.into_iter().map(Value::Str))
        .chain(sizes.into_iter().map(Value::Size))
        .collect())
}

pub(crate) fn call(
    ev: &mut Evaluator,
    b: Builtin,
    arg: &dyn Fn(usize) -> (Value, Span),
    span: Span,
) -> R<Value> {
    let name = b.name();
    let str_arg = |ev: &Evaluator, i: usize| -> R<Rc<str>> {
        let (v, s) = arg(i);
        no_deferred(ev, name, &v, s)?;
        match v {
            Value::Str(x) => Ok(x),
            other => Err(wrong(ev, name, "str", &other, s)),
        }
    };
    Ok(match b {
        Builtin::Len => {
            let (v, s) = arg(0);
            no_deferred(ev, name, &v, s)?;
            Value::Int(match &v {
                Value::List(xs) => xs.len() as i64,
                Value::Str(x) => x.chars().count() as i64,
                Value::Record(r) => r.len() as i64,
                other => return Err(wrong(ev, name, "a list, string or record", other, s)),
            })
        }
        Builtin::Keys | Builtin::Values => {
            let (v, s) = arg(0);
            match &v {
                Value::Record(r) if b == Builtin::Keys => Value::List(
                    r.keys()
                        .map(|k| Value::Str(k.clone()))
                        .collect::<Vec<_>>()
                        .into(),
                ),
                Value::Record(r) => Value::List(r.values().cloned().collect::<Vec<_>>().into()),
                other => return Err(wrong(ev, name, "a record", other, s)),
            }
        }
        Builtin::Join => {
            let (items, s) = arg(0);
            let sep = str_arg(ev, 1)?;
            let Value::List(xs) = &items else {
                return Err(wrong(ev, name, "a list", &items, s));
            };
            let mut parts = Vec::with_capacity(xs.len() * 2);
            for (i, x) in xs.iter().enumerate() {
                if i > 0 {
                    parts.push(Value::Str(sep.clone()));
                }
                match x {
                    Value::Str(_) | Value::Deferred(_) => parts.push(x.clone()),
                    other => return Err(wrong(ev, name, "a list of strings", other, s)),
                }
            }
            ev.concat(parts, span)?
        }
        Builtin::Split => {
            let text = str_arg(ev, 0)?;
            let sep = str_arg(ev, 1)?;
            if sep.is_empty() {
                let (_, s) = arg(1);
                return Err(Stop::from(
                    Diagnostic::new(
                        "eval::empty-separator",
                        "cannot split on an empty separator",
                    )
                    .label(ev.file(), s, "this is \"\""),
                ));
            }
            Value::List(
                text.split(&*sep)
                    .map(|p| Value::Str(p.into()))
                    .collect::<Vec<_>>()
                    .into(),
            )
        }
        Builtin::Get => {
            let (r, s) = arg(0);
            no_deferred(ev, name, &r, s)?;
            let key = str_arg(ev, 1)?;
            match &r {
                Value::Record(fields) => match fields.get(&key) {
                    Some(v) => v.clone(),
                    None => arg(2).0,
                },
                other => return Err(wrong(ev, name, "a record", other, s)),
            }
        }
        Builtin::Contains => {
            let (hay, s) = arg(0);
            let (needle, ns) = arg(1);
            no_deferred(ev, name, &hay, s)?;
            no_deferred(ev, name, &needle, ns)?;
            match (&hay, &needle) {
                (Value::Str(h), Value::Str(n)) => Value::Bool(h.contains(&**n)),
                (Value::Record(r), Value::Str(k)) => Value::Bool(r.contains_key(k)),
                (Value::List(xs), _) => {
                    let mut found = false;
                    for x in xs.iter() {
                        if ev.equal(x, &needle, span)? {
                            found = true;
                            break;
                        }
                    }
                    Value::Bool(found)
                }
                (other, _) => return Err(wrong(ev, name, "a list, string or record", other, s)),
            }
        }
        Builtin::StartsWith => Value::Bool(str_arg(ev, 0)?.starts_with(&*str_arg(ev, 1)?)),
        Builtin::EndsWith => Value::Bool(str_arg(ev, 0)?.ends_with(&*str_arg(ev, 1)?)),
        Builtin::Upper => Value::Str(str_arg(ev, 0)?.to_uppercase().into()),
        Builtin::Lower => Value::Str(str_arg(ev, 0)?.to_lowercase().into()),
        Builtin::Trim => Value::Str(str_arg(ev, 0)?.trim().into()),
        Builtin::Replace => {
            let text = str_arg(ev, 0)?;
            let from = str_arg(ev, 1)?;
            let to = str_arg(ev, 2)?;
            if from.is_empty() {
                Value::Str(text)
            } else {
                let grown = text.matches(&*from).count().saturating_mul(to.len());
                if grown > ev.limits.max_string_bytes {
                    return Err(Stop::from(
                        Diagnostic::new("eval::too-large", "string too large").label(
                            ev.file(),
                            span,
                            "the replacement makes a huge string",
                        ),
                    ));
                }
                Value::Str(text.replace(&*from, &to).into())
            }
        }
        Builtin::ToStr => {
            let (v, s) = arg(0);
            match &v {
                Value::Str(_) | Value::Deferred(_) => v,
                Value::Int(_) | Value::Bool(_) | Value::Size(_) | Value::Mode(_) => {
                    Value::Str(display(&v).into())
                }
                other => {
                    return Err(wrong(
                        ev,
                        name,
                        "a string, number, size, mode or bool",
                        other,
                        s,
                    ))
                }
            }
        }
        Builtin::Sort => Value::List(sorted(ev, name, arg(0))?.into()),
        Builtin::Min | Builtin::Max => {
            let (v, s) = arg(0);
            let xs = sorted(ev, name, (v, s))?;
            let pick = if b == Builtin::Min {
                xs.first()
            } else {
                xs.last()
            };
            match pick {
                Some(x) => x.clone(),
                None => {
                    return Err(Stop::from(
                        Diagnostic::new("eval::empty-list", format!("`{name}` of an empty list"))
                            .label(ev.file(), s, "has no elements")
                            .help(format!(
                                "an empty list has no {}; check `len(…) > 0` first",
                                if b == Builtin::Min {
                                    "least element"
                                } else {
                                    "greatest element"
                                }
                            )),
                    ))
                }
            }
        }
        Builtin::All | Builtin::Any => {
            let (v, s) = arg(0);
            no_deferred(ev, name, &v, s)?;
            let Value::List(xs) = &v else {
                return Err(wrong(ev, name, "a list of bools", &v, s));
            };
            let mut bools = Vec::with_capacity(xs.len());
            for x in xs.iter() {
                no_deferred(ev, name, x, s)?;
                match x {
                    Value::Bool(t) => bools.push(*t),
                    other => return Err(wrong(ev, name, "a list of bools", other, s)),
                }
            }
            Value::Bool(if b == Builtin::All {
                bools.iter().all(|t| *t)
            } else {
                bools.iter().any(|t| *t)
            })
        }
        Builtin::Read => {
            let (v, s) = arg(0);
            let Value::Path(p) = &v else {
                return Err(wrong(ev, name, "a project file (`path(\"x.txt\")`)", &v, s));
            };
            ev.read_project_file(p, s)?
        }
        Builtin::Merge => {
            let (a, sa) = arg(0);
            let (b2, sb) = arg(1);
            match (&a, &b2) {
                (Value::Record(x), Value::Record(y)) => {
                    let mut out: BTreeMap<Rc<str>, Value> = (**x).clone();
                    out.extend(y.iter().map(|(k, v)| (k.clone(), v.clone())));
                    Value::Record(Rc::new(out))
                }
                (Value::Record(_), other) => return Err(wrong(ev, name, "a record", other, sb)),
                (other, _) => return Err(wrong(ev, name, "a record", other, sa)),
            }
        }
        Builtin::Path => {
            let p = str_arg(ev, 0)?;
            let (_, s) = arg(0);
            ev.project_file(&p, s)?
        }
        Builtin::Secret => {
            let secret = str_arg(ev, 0)?;
            if !crate::value::is_secret_name(&secret) {
                let (_, s) = arg(0);
                return Err(Stop::Error(Box::new(
                    Diagnostic::new(
                        "eval::bad-secret-name",
                        format!("invalid secret name: `{}`", secret.escape_debug()),
                    )
                    .label(ev.file(), s, "not a secret name")
                    .help("name it with letters, digits and `_-.`, starting with a letter, at most 64 characters: `pg_replication_password`"),
                )));
            }
            Value::Deferred(Rc::new(Deferred::Secret(secret)))
        }
        Builtin::ToJson => {
            let (v, s) = arg(0);
            if !crate::value::expands_within(&v, ev.limits.max_string_bytes) {
                return Err(Stop::Error(Box::new(ev.too_large(s, "this value as JSON"))));
            }
            if contains_deferred(&v) {
                no_deferred(
                    ev,
                    name,
                    &Value::Deferred(Rc::new(Deferred::Concat(Vec::new()))),
                    s,
                )?;
            }
            Value::Str(value_json(&v).to_string().into())
        }
        Builtin::Node(_) | Builtin::Check(_) | Builtin::Nodes => {
            unreachable!("nodes and checks are built by the evaluator")
        }
    })
}

fn contains_deferred(v: &Value) -> bool {
    match v {
        Value::Deferred(_) => true,
        Value::List(xs) => xs.iter().any(contains_deferred),
        Value::Record(r) => r.values().any(contains_deferred),
        _ => false,
    }
}

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
