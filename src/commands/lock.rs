//! `envc lock FILE [--check] [--update=KEY…]` and `envc lock diff OLD NEW [--env FILE]`.

use std::collections::BTreeMap;
use std::path::Path;

use envc_compiler::pin::PinKey;
use envc_compiler::{compile, CompileOptions};
use envc_executor::{
    lock_environment, migrate_lock, outdated_pins, split_root, FsLoader, LockCommandError,
    LockOutcome, LockRequest, Migrated, Spec,
};
use envc_lockfiles::changelog::Fix;
use envc_lockfiles::{read_lock_arg, Lockfile};

use super::{compile_env, report, Params, Ui};
use crate::exit::{Exit, Failure, Outcome};
use crate::output;

/// What `--update` names: a pin, or the security suites' changes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Update {
    Key(PinKey),
    Security,
}

/// An `--update` value that is neither a pin key nor `security`.
#[derive(Debug)]
pub enum BadUpdate {
    /// The environment file given as `--update=FILE`.
    File(String),
    Key(envc_compiler::pin::BadPinKey),
}

impl std::fmt::Display for BadUpdate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BadUpdate::File(s) => write!(
                f,
                "`{s}` is a file, not a pin key\n  hint: give the environment file on its own and \
                 `--update` alone, `--update=security` or `--update=KEY`: `envc lock {s} --update`"
            ),
            BadUpdate::Key(e) => write!(f, "{e} (or `security`: what the security suites changed)"),
        }
    }
}

impl std::error::Error for BadUpdate {}

/// `--update`'s value: `security`, or a pin key. A value that looks like a file is the
/// environment file given as `--update=FILE`.
pub fn parse_update(s: &str) -> Result<Update, BadUpdate> {
    if s == "security" {
        return Ok(Update::Security);
    }
    // `KIND:NAME` is a key, even with a `/` (`archive:debian/bookworm`,
    // `provider:HOST/NAMESPACE/TYPE`): a short provider address is told what a key is.
    let kind_like = s.split_once(':').is_some_and(|(kind, _)| {
        !kind.is_empty() && kind.bytes().all(|b| b.is_ascii_lowercase() || b == b'_')
    });
    let file_like = s.ends_with(".env") || s.ends_with(".lock") || Path::new(s).is_file();
    if kind_like && !file_like {
        return s.parse().map(Update::Key).map_err(BadUpdate::Key);
    }
    if looks_like_a_file(s) {
        return Err(BadUpdate::File(s.to_string()));
    }
    s.parse().map(Update::Key).map_err(BadUpdate::Key)
}

/// An environment file's name (`prod.env`, `envs/prod.env`), or a file that exists: not a
/// pin key (pin keys are `kind:name` or one word, without a `.env` or a `/`).
fn looks_like_a_file(s: &str) -> bool {
    s.ends_with(".env") || s.ends_with(".lock") || s.contains('/') || Path::new(s).is_file()
}

/// The one environment file `envc lock` was given. A second word is almost always the
/// value of an `--update` written without its `=` (`--update security`): say how to write it.
pub fn one_file(files: &[std::path::PathBuf]) -> Result<&Path, Failure> {
    match files {
        [file] => Ok(file),
        [] => Err(Failure::Input(
            "give the environment file: `envc lock prod.env`".into(),
        )),
        [first, rest @ ..] => {
            let words: Vec<String> = rest.iter().map(|f| f.display().to_string()).collect();
            let (file, extra): (&Path, String) = match words.first() {
                // `envc lock --update prod.env security`: the file came second.
                Some(w) if looks_like_a_file(w) && !looks_like_a_file(&first.to_string_lossy()) => {
                    (Path::new(w), first.display().to_string())
                }
                _ => (first, words.join(" ")),
            };
            let hint = if parse_update(&extra).is_ok() {
                format!(
                    "`--update` takes its value after `=`: `envc lock {} --update={extra}`",
                    file.display()
                )
            } else {
                format!(
                    "lock one environment at a time: `envc lock {}`",
                    file.display()
                )
            };
            Err(Failure::Input(format!(
                "`envc lock` takes one environment file; it was also given `{extra}`\n  hint: \
                 {hint}"
            )))
        }
    }
}

pub fn lock(
    file: &Path,
    check: bool,
    update: Option<&[Update]>,
    params: &Params,
    ui: Ui,
) -> Outcome {
    let keys: Vec<PinKey> = update
        .unwrap_or_default()
        .iter()
        .filter_map(|u| match u {
            Update::Key(k) => Some(k.clone()),
            Update::Security => None,
        })
        .collect();
    let security = update.is_some_and(|u| u.contains(&Update::Security));
    if security && !keys.is_empty() {
        return Err(Failure::Input(
            "--update=security moves what the security suites changed; name pins in another \
             run (`--update=KEY`)"
                .into(),
        ));
    }
    let env = compile_env(file, params, false, ui)?;
    let request = match (check, security, keys.is_empty()) {
        (true, _, _) => LockRequest::Check,
        (false, true, _) => LockRequest::Security,
        // `--update` alone: every pin. A plain `envc lock`: what is new or no longer holds.
        (false, false, true) if update.is_some() => LockRequest::All,
        (false, false, true) => LockRequest::Relock,
        (false, false, false) => LockRequest::Update(&keys),
    };
    let store = envc_executor::store_root(file);
    match lock_environment(file, &env.spec, request, &store) {
        Ok(LockOutcome::UpToDate { path, notes }) => {
            for n in &notes {
                crate::output::errln!("note: {n}");
            }
            output::line(format!("{}: up to date", path.display()));
            Ok(Exit::Ok)
        }
        Ok(LockOutcome::Missing { path }) => Err(Failure::Errors {
            errors: vec![format!(
                "{} does not exist\n  hint: run `envc lock {}` and commit it",
                path.display(),
                file.display()
            )],
            exit: Exit::Drift,
        }),
        Ok(LockOutcome::Stale {
            path,
            problems,
            notes,
        }) => {
            for n in &notes {
                crate::output::errln!("note: {n}");
            }
            Err(Failure::Errors {
                errors: vec![std::iter::once(format!("{} is stale:", path.display()))
                    .chain(problems.iter().map(|p| format!("  {p}")))
                    .collect::<Vec<_>>()
                    .join("\n")],
                exit: Exit::Drift,
            })
        }
        Ok(LockOutcome::Written {
            path,
            diff,
            fixes,
            pins,
            warnings,
        }) => {
            for w in &warnings {
                crate::output::errln!("warning: {w}");
            }
            match diff {
                Some(d) if d.is_empty() => output::line(format!("{}: unchanged", path.display())),
                Some(d) => output::print(&d.to_string()),
                None => output::line(format!("{}: {pins} pins written", path.display())),
            }
            print_fixes(&fixes);
            Ok(Exit::Ok)
        }
        Err(LockCommandError::Input(e)) => Err(Failure::Input(e)),
        Err(LockCommandError::Unresolved {
            path,
            errors,
            warnings,
        }) => {
            for w in &warnings {
                crate::output::errln!("warning: {w}");
            }
            let errors = errors
                .iter()
                .map(ToString::to_string)
                .chain([format!("nothing written: {} is unchanged", path.display())])
                .collect();
            Err(Failure::Errors {
                errors,
                exit: Exit::Input,
            })
        }
    }
}

/// `envc lock --outdated FILE [--refresh]`: the pins with newer versions, security updates
/// first; exit 3 when a security update is pending, 0 otherwise.
pub fn outdated(file: &Path, refresh: bool, params: &Params, ui: Ui) -> Outcome {
    let env = compile_env(file, params, false, ui)?;
    let store = envc_executor::store_root(file);
    let report = match outdated_pins(file, &env.spec, refresh, &store) {
        Ok(r) => r,
        Err(LockCommandError::Input(e)) => return Err(Failure::Input(e)),
        Err(LockCommandError::Unresolved {
            errors, warnings, ..
        }) => {
            for w in &warnings {
                crate::output::errln!("warning: {w}");
            }
            return Err(Failure::Errors {
                errors,
                exit: Exit::Input,
            });
        }
    };
    for w in &report.warnings {
        crate::output::errln!("warning: {w}");
    }
    let as_of: Vec<String> = report
        .as_of
        .iter()
        .map(|(archive, date)| format!("{archive} ({date})"))
        .collect();
    let (security, other): (Vec<_>, Vec<_>) = report.updates.iter().partition(|u| u.security);
    let path = report.path.display();
    if report.updates.is_empty() {
        output::line(format!("{path}: no pin has a newer version in its suites"));
    } else {
        output::line(format!(
            "{path}: {} with a newer version, {} a security update",
            plural(report.updates.len(), "pin", "pins"),
            security.len()
        ));
        for (title, list) in [("Security updates", &security), ("Other updates", &other)] {
            if list.is_empty() {
                continue;
            }
            output::line(format!("\n{title}:"));
            for u in list.iter() {
                output::line(format!("- {u}"));
            }
        }
    }
    output::line(format!(
        "\nCompared with the indices of {}{}.",
        as_of.join(", "),
        if refresh {
            ""
        } else {
            " (what the last `envc lock` read; `--refresh` reads today's)"
        }
    ));
    if security.is_empty() {
        return Ok(Exit::Ok);
    }
    output::line(format!(
        "hint: `envc lock {} --update=security` moves the security updates",
        file.display()
    ));
    Ok(Exit::Drift)
}

/// `envc lock --migrate FILE`: the lockfile rewritten in the current format, no pin moved.
pub fn migrate(file: &Path) -> Outcome {
    match migrate_lock(file) {
        Ok(Migrated::Current { path }) => {
            output::line(format!(
                "{}: already format {}; unchanged",
                path.display(),
                envc_lockfiles::FORMAT_VERSION
            ));
            Ok(Exit::Ok)
        }
        Ok(Migrated::Rewritten { path, from, .. }) => {
            output::line(format!(
                "{}: format {from} → {}; no pin moved",
                path.display(),
                envc_lockfiles::FORMAT_VERSION
            ));
            Ok(Exit::Ok)
        }
        Err(LockCommandError::Input(e)) => Err(Failure::Input(e)),
        Err(LockCommandError::Unresolved { errors, .. }) => Err(Failure::Errors {
            errors,
            exit: Exit::Input,
        }),
    }
}

/// `1 pin`, `2 pins`.
fn plural(n: usize, one: &str, many: &str) -> String {
    if n == 1 {
        format!("1 {one}")
    } else {
        format!("{n} {many}")
    }
}

/// What each moved package's changelog says the move fixes, after the diff.
fn print_fixes(fixes: &[Fix]) {
    if fixes.is_empty() {
        return;
    }
    output::line("");
    output::line("What the moved packages fix (their changelog.Debian.gz):");
    for f in fixes {
        output::line(format!("- {f}"));
    }
}

/// How `envc lock diff` writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum DiffFormat {
    /// Lines for a terminal (markdown lists).
    Text,
    /// A pull request's body.
    Markdown,
}

/// `envc lock diff OLD NEW [--env FILE] [--format markdown]`: what moved, what each moved
/// package's changelog says it fixes, and with `--env` the nodes whose ids change because
/// of it. The `.deb`s are the store's (beside `--env`, else beside NEW, or `$ENVC_STORE`):
/// nothing is fetched.
pub fn lock_diff(old: &str, new: &str, env: Option<&Path>, format: DiffFormat, ui: Ui) -> Outcome {
    let (a, b) = (
        read_lock_arg(old).map_err(|e| Failure::Input(e.to_string()))?,
        read_lock_arg(new).map_err(|e| Failure::Input(e.to_string()))?,
    );
    let d = envc_lockfiles::diff(&a, &b);
    // `REV:PATH` names its file after the colon.
    let beside = env.map_or_else(
        || Path::new(new.rsplit_once(':').map_or(new, |(_, p)| p)).to_path_buf(),
        Path::to_path_buf,
    );
    let debs = envc_executor::store_root(&beside).join("debs");
    let fixes = envc_lockfiles::changelog::fixes(&a, &b, |p| {
        std::fs::read(debs.join(format!("{}.deb", p.sha256))).ok()
    });
    match format {
        DiffFormat::Markdown => output::print(&d.markdown(&fixes)),
        DiffFormat::Text => {
            if d.is_empty() {
                output::line("no pins changed");
            } else {
                output::print(&d.to_string());
            }
            print_fixes(&fixes);
        }
    }
    let Some(env) = env else {
        return Ok(Exit::Ok);
    };
    // Their diagnostics are on stderr already.
    let (Some(before), Some(after)) = (node_ids(env, &a, ui), node_ids(env, &b, ui)) else {
        return Err(Failure::Reported(Exit::Input));
    };
    let changed: Vec<&String> = after
        .iter()
        .filter(|(k, id)| before.get(*k) != Some(id))
        .map(|(k, _)| k)
        .collect();
    output::line("");
    let heading = if format == DiffFormat::Markdown {
        "#### "
    } else {
        ""
    };
    if changed.is_empty() {
        output::line(format!("{heading}No node ids change."));
    } else {
        output::line(format!(
            "{heading}Nodes whose ids change ({}):",
            changed.len()
        ));
        if format == DiffFormat::Markdown {
            output::line("");
        }
        for k in changed {
            output::line(format!("- `{k}`"));
        }
    }
    Ok(Exit::Ok)
}

/// Node key → id of the environment compiled with `lock`'s pins (`None` when it does not
/// compile; its diagnostics are printed).
fn node_ids(file: &Path, lock: &Lockfile, ui: Ui) -> Option<BTreeMap<String, String>> {
    let (dir, name) = split_root(file);
    let options = CompileOptions {
        pins: lock.pins(),
        params: envc_executor::project_params(&envc_executor::project_dir(file)).ok()?,
        ..Default::default()
    };
    let compiled = compile(&name, &FsLoader::new(&dir), &options);
    let spec = Spec::from_graph(report(&compiled, ui, file)?, &compiled.sources);
    Some(spec.nodes.into_iter().map(|n| (n.key, n.id)).collect())
}

#[cfg(test)]
mod update_tests {
    use super::*;

    #[test]
    fn update_values_with_a_slash_are_keys_when_they_are_keys() {
        // `value` → what it reads as.
        let check = |value: &str, expected: &str| {
            let got = match parse_update(value) {
                Ok(Update::Security) => "security".to_string(),
                Ok(Update::Key(k)) => format!("key {k}"),
                Err(BadUpdate::File(f)) => format!("file {f}"),
                Err(BadUpdate::Key(_)) => "bad key".to_string(),
            };
            assert_eq!(got, expected, "{value}");
        };
        check("security", "security");
        check("package:nginx", "key package:nginx");
        check("archive:debian/bookworm", "key archive:debian/bookworm");
        check(
            "provider:registry.terraform.io/hashicorp/google",
            "key provider:registry.terraform.io/hashicorp/google",
        );
        check("examples/quickstart.env", "file examples/quickstart.env");
        check("prod.env", "file prod.env");
        check("provider:hashicorp/google", "bad key");
        check("pkg:nginx", "bad key");
    }
}
