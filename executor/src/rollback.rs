//! Putting things on one target back as records had them, from the store alone: the file's
//! bytes (the content object its record names), the service's enabled/running. What the
//! scheduler's automatic rollback (`run/rollback.rs`) and `envc rollback --to`
//! (`session.rs`) both do on a target, once they know which records to go back to.
//!
//! Packages are not put back: a version's dependency closure was resolved against the lock
//! of its day, which the record does not keep; a package in a rollback is reported as left
//! at the version the update installed.

use std::fmt;

use envc_ids::fact::content::SHA256;
use envc_ids::NodeKind;

use crate::error::StepError;
use crate::kinds::file::remote::{apply_files, remove_files, FileRemoval, FileSpec, Removed};
use crate::kinds::service::remote::{apply_service, remove_service, ServiceSpec};
use crate::record::RealizationRecord;
use crate::store::Store;
use crate::transport::Transport;

/// One thing on a target to put back.
#[derive(Clone, Debug)]
pub struct Restore {
    /// `target/kind:name`.
    pub key: String,
    pub kind: NodeKind,
    /// The file's path, the service's or package's name.
    pub name: String,
    /// The record to go back to; `None`: the thing did not exist then (envc made it
    /// since), so it is removed.
    pub to: Option<RealizationRecord>,
    /// For a removal: what envc wrote there since (a file is removed only while it holds
    /// that), from its record or intent.
    pub written: Option<RealizationRecord>,
}

/// The word for what was done to one item, or why it could not be.
pub type Restored = (String, Result<String, StepError>);

/// Puts `items` back on `t`: files first (one batch), then services, each started again
/// (restarted when it runs) so that it reads the files as they were. In the order given
/// within each kind; one result per item, in the order of `items`.
pub async fn restore(t: &Transport, store: &Store, items: &[Restore]) -> Vec<Restored> {
    let mut results: Vec<Option<Result<String, StepError>>> = vec![None; items.len()];
    // Files: those with content to write, and those to remove.
    let mut write: Vec<(usize, FileSpec)> = Vec::new();
    let mut remove: Vec<(usize, FileRemoval)> = Vec::new();
    for (i, item) in items.iter().enumerate() {
        match (item.kind, &item.to) {
            (NodeKind::File, Some(r)) => match file_spec(&item.name, r, store) {
                Ok(f) => write.push((i, f)),
                Err(e) => results[i] = Some(Err(e)),
            },
            (NodeKind::File, None) => remove.push((
                i,
                FileRemoval {
                    path: item.name.clone(),
                    written_sha256: item
                        .written
                        .as_ref()
                        .and_then(|w| w.facts.get(SHA256).cloned()),
                },
            )),
            (NodeKind::Package, _) => {
                results[i] = Some(Err(StepError::new(format!(
                    "package `{}` is not rolled back: it stays at the version the update installed",
                    item.name
                ))))
            }
            (NodeKind::Service, _) => {}
            (kind, _) => {
                results[i] = Some(Err(StepError::new(format!(
                    "a `{kind}` is not rolled back"
                ))))
            }
        }
    }
    if !write.is_empty() {
        let specs: Vec<FileSpec> = write.iter().map(|(_, f)| f.clone()).collect();
        for ((i, _), r) in write.iter().zip(apply_files(t, &specs).await) {
            results[*i] = Some(r.map(|_| "restored".to_string()));
        }
    }
    if !remove.is_empty() {
        let specs: Vec<FileRemoval> = remove.iter().map(|(_, f)| f.clone()).collect();
        for ((i, _), r) in remove.iter().zip(remove_files(t, &specs).await) {
            results[*i] = Some(r.map(|done| match done {
                Removed::Deleted => "removed (it did not exist before)".to_string(),
                Removed::Absent => "already absent".to_string(),
                Removed::Changed => {
                    "left in place: its content changed since envc wrote it".to_string()
                }
            }));
        }
    }
    for (i, item) in items.iter().enumerate() {
        if item.kind != NodeKind::Service {
            continue;
        }
        results[i] = Some(match &item.to {
            Some(r) => {
                let flag = |k: &str| r.attrs.get(k).is_none_or(|v| v == "true");
                let spec = ServiceSpec {
                    name: item.name.clone(),
                    enabled: flag("enabled"),
                    running: flag("running"),
                    restart: flag("running"),
                };
                apply_service(t, &spec).await.map(|_| {
                    if spec.running {
                        "restarted".to_string()
                    } else {
                        "stopped".to_string()
                    }
                })
            }
            None => remove_service(t, &item.name)
                .await
                .map(|()| "stopped and disabled (it did not exist before)".to_string()),
        });
    }
    items
        .iter()
        .zip(results)
        .map(|(item, r)| {
            (
                item.key.clone(),
                r.unwrap_or_else(|| Err(StepError::new("internal error: no result"))),
            )
        })
        .collect()
}

/// The file a record describes, its bytes from the store.
fn file_spec(path: &str, r: &RealizationRecord, store: &Store) -> Result<FileSpec, StepError> {
    let Some(id) = r.content else {
        return Err(StepError::new(format!(
            "file `{path}` is not rolled back: its record keeps no content (it holds a secret, or was written before envc kept file contents)"
        )));
    };
    let content = store.get(&id).map_err(|e| {
        StepError::new(format!(
            "file `{path}` is not rolled back: its content is not in the store ({e})"
        ))
    })?;
    let fact = |k: &str| r.facts.get(k).cloned().unwrap_or_default();
    let mode = u32::from_str_radix(&fact("mode"), 8).unwrap_or(0o644);
    Ok(FileSpec {
        path: path.to_string(),
        content,
        owner: fact("owner"),
        group: fact("group"),
        mode,
        written_sha256: None,
        sealed: None,
    })
}

/// The kinds a rollback puts back (or reports on).
pub fn rolls_back(kind: NodeKind) -> bool {
    matches!(kind, NodeKind::File | NodeKind::Service | NodeKind::Package)
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
    /// The run is in the history, but the records of its state are not in the store.
    Gone { run: String, error: String },
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
                    Some(c) => write!(f, "\n  hint: did you mean `{c}`? (`envc log` lists the runs)"),
                    None => write!(f, "\n  hint: `envc log` lists the runs"),
                }
            }
            RollbackError::Gone { run, error } => write!(
                f,
                "the records of run `{run}` are no longer in the store ({error}); it cannot be rolled back to"
            ),
        }
    }
}

impl std::error::Error for RollbackError {}
