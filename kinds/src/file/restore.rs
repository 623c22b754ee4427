//! A file put back as its record had it: its bytes from the content object the record
//! names, its owner, group and mode from its facts; one envc made since is removed while
//! it still holds what envc wrote.

use envc_ids::fact::content::SHA256;

use super::remote::{apply_files, remove_files, FileRemoval, FileSpec, Removed};
use super::File;
use crate::debs::DebSource;
use crate::error::unusable;
use crate::error::StepError;
use crate::node_type::{BoxFuture, Restore, Restores};
use crate::record::RealizationRecord;
use crate::store::Store;
use crate::transport::Transport;

impl Restores for File {
    fn restore_rank(&self) -> u8 {
        1
    }

    fn kept(
        &self,
        _: &str,
        r: &RealizationRecord,
        store: &Store,
    ) -> Result<Vec<DebSource>, StepError> {
        if let Some(id) = &r.content {
            store.get(id).map_err(|e| unusable("its content", id, e))?;
        }
        Ok(Vec::new())
    }

    fn restore<'a>(
        &'a self,
        t: &'a Transport,
        store: &'a Store,
        items: &'a [&'a Restore],
    ) -> BoxFuture<'a, Vec<Result<String, StepError>>> {
        Box::pin(restore_files(t, store, items))
    }
}

/// Writes those with content to go back to (one batch), then removes those that did not
/// exist then (another).
async fn restore_files(
    t: &Transport,
    store: &Store,
    items: &[&Restore],
) -> Vec<Result<String, StepError>> {
    let mut results: Vec<Option<Result<String, StepError>>> = vec![None; items.len()];
    let mut write: Vec<(usize, FileSpec)> = Vec::new();
    let mut remove: Vec<(usize, FileRemoval)> = Vec::new();
    for (i, item) in items.iter().enumerate() {
        match &item.to {
            Some(r) => match file_spec(&item.name, r, store) {
                Ok(f) => write.push((i, f)),
                Err(e) => results[i] = Some(Err(e)),
            },
            None => remove.push((
                i,
                FileRemoval {
                    path: item.name.clone(),
                    written_sha256: item
                        .written
                        .as_ref()
                        .and_then(|w| w.facts.get(SHA256).cloned()),
                },
            )),
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
    results
        .into_iter()
        .map(|r| r.unwrap_or_else(|| Err(StepError::new("internal error: no result"))))
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
