//! Putting things on one target back as records had them, from the store alone: what the
//! scheduler's automatic rollback (`run/rollback.rs`) and `envc rollback --to`
//! (`rollback_to.rs`) both do on a target, once they know which records to go back to.
//! Each kind that is rolled back says how (`NodeType::restores`: a package from the
//! pinned `.deb`s its record names, a file from its content object, a service started
//! again); this puts the kinds back in their turn.

use std::fmt;

use envc_ids::NodeKind;

use crate::error::StepError;
use crate::kinds;
use crate::kinds::node_type::Restore;
use crate::record::RealizationRecord;
use crate::store::Store;
use crate::transport::Transport;

/// The word for what was done to one item, or why it could not be.
pub type Restored = (String, Result<String, StepError>);

/// Puts `items` back on `t`, kind by kind in their turn (`Restores::restore_rank`:
/// packages, then files, so that a package's files do not overwrite them, then services,
/// started again on the files as they were); in the order given within each kind. One
/// result per item, in the order of `items`.
pub async fn restore(t: &Transport, store: &Store, items: &[Restore]) -> Vec<Restored> {
    let mut results: Vec<Option<Result<String, StepError>>> = vec![None; items.len()];
    let mut ranked: Vec<_> = kinds::all()
        .filter_map(|k| Some((k.kind(), k.restores()?)))
        .collect();
    ranked.sort_by_key(|(_, r)| r.restore_rank());
    for (kind, restores) in ranked {
        let (at, of_kind): (Vec<usize>, Vec<&Restore>) = (items.iter().enumerate())
            .filter(|(_, item)| item.kind == kind)
            .unzip();
        if of_kind.is_empty() {
            continue;
        }
        for (i, r) in at
            .into_iter()
            .zip(restores.restore(t, store, &of_kind).await)
        {
            results[i] = Some(r);
        }
    }
    items
        .iter()
        .zip(results)
        .map(|(item, r)| {
            let r = r.unwrap_or_else(|| {
                Err(StepError::new(format!(
                    "a `{}` is not rolled back",
                    item.kind
                )))
            });
            (item.key.clone(), r)
        })
        .collect()
}

/// Whether a rollback puts back (or reports on) nodes of `kind`.
pub fn rolls_back(kind: NodeKind) -> bool {
    kinds::of(kind).restores().is_some()
}

/// Why the record of `name`, of `kind`, cannot be gone back to (it kept nothing to put
/// back), or `None`.
pub fn not_restorable(kind: NodeKind, name: &str, record: &RealizationRecord) -> Option<String> {
    kinds::of(kind)
        .restores()
        .and_then(|r| r.not_restorable(name, record))
}

/// What putting `record` (of the node `key`) back needs that the store cannot give whole:
/// the objects it names (a file's content, a package's kept `.deb` set), then each pinned
/// `.deb`, looked for as the rollback itself takes it (the store, then a binary cache).
/// Empty when everything is there.
pub async fn unsound(store: &Store, key: &str, record: &RealizationRecord) -> Vec<String> {
    let Ok(parsed) = key.parse::<envc_ids::NodeKey>() else {
        return Vec::new();
    };
    let Some(restores) = kinds::of(parsed.kind).restores() else {
        return Vec::new();
    };
    let debs = match restores.kept(&parsed.name, record, store) {
        Ok(debs) => debs,
        Err(e) => return vec![e.cause],
    };
    let mut why = Vec::new();
    for d in &debs {
        if let Err(e) = crate::debs::from_store(store, d).await {
            why.push(e.cause);
        }
    }
    why
}

/// One line for what a rollback did: `restored /etc/x; restarted nginx`, failures after.
pub fn summary(done: &[Restored]) -> String {
    let (ok, failed): (Vec<_>, Vec<_>) = done.iter().partition(|(_, r)| r.is_ok());
    let mut parts: Vec<String> = ok
        .iter()
        .map(|(k, r)| format!("{} `{k}`", r.as_ref().map_or("", String::as_str)))
        .collect();
    parts.extend(
        failed
            .iter()
            .filter_map(|(_, r)| r.as_ref().err().map(ToString::to_string)),
    );
    parts.join("; ")
}

/// Why `envc rollback --to` cannot go back to a run.
#[derive(Debug)]
pub enum RollbackError {
    /// No run of that id (or unique prefix) in the environment's history.
    UnknownRun {
        env: String,
        given: String,
        closest: Option<String>,
    },
    /// Objects going back to the run needs are missing or damaged: each node, and why.
    /// Nothing was changed.
    Unsound {
        run: String,
        why: Vec<(String, String)>,
    },
}

impl fmt::Display for RollbackError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RollbackError::UnknownRun {
                env,
                given,
                closest,
            } => {
                write!(f, "no run `{given}` in the history of `{env}`")?;
                match closest {
                    Some(c) => write!(
                        f,
                        "\n  hint: did you mean `{c}`? (`envc log` lists the runs)"
                    ),
                    None => write!(f, "\n  hint: `envc log` lists the runs"),
                }
            }
            RollbackError::Unsound { run, why } => {
                write!(
                    f,
                    "run `{run}` cannot be rolled back to: {} of what it would put back {} not \
                     whole in the store; nothing was changed",
                    why.len(),
                    if why.len() == 1 { "is" } else { "are" }
                )?;
                for (node, why) in why {
                    write!(f, "\n  {node}: {why}")?;
                }
                write!(
                    f,
                    "\n  hint: put the objects back from a backup of the store (`objects/`, \
                     `debs/`; a binary cache that has a .deb gives it back), or roll back to \
                     another run: `envc store verify FILE` names every run that can no longer \
                     be rolled back to"
                )
            }
        }
    }
}

impl std::error::Error for RollbackError {}
