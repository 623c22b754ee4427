//! `file` nodes: a file's bytes, owner, group and mode on a target, placed in one batch per
//! target, read back, and removed while they still hold what envc wrote.

pub mod remote;
mod restore;
pub mod templates;

use std::collections::BTreeSet;

use envc_ids::fact::content::SHA256;
use envc_ids::NodeKind;
use serde_json::json;

use crate::error::StepError;
use crate::node_type::{
    absorb_same, Absent, BoxFuture, Launch, Launching, NodeType, Payload, ProbeError, ReadsBack,
    Realize, Removable, Removal, Removing, Restores, Step, StepCx,
};
use crate::record::{Applied, Facts, RealizationRecord};
use crate::spec::{NodeSpec, Spec, Val};
use crate::substitute::{
    content_display, holds_sealed, render_template, template_json, Resolution, Resolving,
};
use crate::transport::Transport;
use envc_compiler::SourceLoader;
use remote::{apply_files, probe_files, remove_files, FileRemoval, FileSpec, Removed};

pub struct File;

impl NodeType for File {
    fn kind(&self) -> NodeKind {
        NodeKind::File
    }

    fn restores(&self) -> Option<&dyn Restores> {
        Some(self)
    }

    fn read_output(
        &self,
        producer: &NodeSpec,
        output: &str,
        facts: &Facts,
    ) -> Result<Val, Resolution> {
        let fact = match output {
            "content_hash" => SHA256,
            other => other,
        };
        crate::substitute::read_fact(producer, output, fact, facts)
    }

    fn resolve(&self, r: &mut Resolving<'_>) -> Result<Payload, Resolution> {
        let content = file_content(r.node, r)?;
        let mode = match r.attrs.get("mode") {
            Some(Val::Mode(m)) => *m,
            _ => 0o644,
        };
        // A file that holds a secret is known by keyed hashes only, here and in its
        // record's facts.
        let secrets = r.spec.secrets.as_deref();
        let sealed = ["content", "vars"]
            .iter()
            .any(|k| r.attrs.get(*k).is_some_and(holds_sealed))
            .then(|| secrets.map(|x| x.keyed(crate::script::sha256_hex(&content).as_bytes())))
            .map(|k| {
                k.ok_or_else(|| {
                    Resolution::Failed(
                        "a secret was used before the secrets were read (this is a bug in envc)"
                            .into(),
                    )
                })
            })
            .transpose()?;
        let f = FileSpec {
            path: r.node.name.clone(),
            owner: r.text("owner"),
            group: r.text("group"),
            mode,
            content,
            written_sha256: None,
            sealed,
        };
        match (&f.sealed, secrets) {
            (Some(_), Some(x)) => {
                let keyed = x.keyed(&f.content);
                r.show(
                    "content",
                    format!("{} (secret, {} bytes)", &keyed[..22], f.content.len()),
                );
                r.hash_only("content", json!(keyed));
            }
            _ => {
                r.hash_only("content", json!(blake3::hash(&f.content).to_hex().as_str()));
                r.show("content", content_display(&f.content));
            }
        }
        // Shown, not hashed: they explain a content change but do not cause one.
        for k in ["template", "source", "vars"] {
            if let Some(v) = r.attrs.get(k) {
                let shown = crate::substitute::display(&r.json(v));
                r.show(k, shown);
            }
        }
        r.put("owner", json!(f.owner));
        r.put("group", json!(f.group));
        r.put("mode", json!(format!("0o{:o}", f.mode)));
        Ok(std::sync::Arc::new(f))
    }

    fn reads_back(&self) -> Option<&dyn ReadsBack> {
        Some(self)
    }

    fn removable(&self) -> Option<&dyn Removable> {
        Some(self)
    }
}

impl ReadsBack for File {
    fn probe<'a>(
        &'a self,
        t: &'a Transport,
        names: &'a [String],
    ) -> BoxFuture<'a, Result<Vec<Option<Facts>>, ProbeError>> {
        Box::pin(async move { Ok(probe_files(t, names).await?) })
    }
}

impl Removable for File {
    fn removal_rank(&self) -> u8 {
        2
    }

    fn remove<'a>(
        &'a self,
        cx: &'a Removing<'a>,
        records: Vec<(&'a RealizationRecord, String)>,
    ) -> BoxFuture<'a, Vec<Removal>> {
        Box::pin(remove(cx, records))
    }
}

/// Removes files, each only while it holds what envc wrote: another environment (or a
/// person) may have written it since, and it is theirs now.
async fn remove(cx: &Removing<'_>, records: Vec<(&RealizationRecord, String)>) -> Vec<Removal> {
    let mut out = Vec::new();
    let (mut records, mut paths): (Vec<&RealizationRecord>, Vec<String>) =
        records.into_iter().unzip();
    let sealed = match sealed_written(cx, &records, &paths).await {
        Ok(s) => s,
        // Not knowing what is there, nothing sealed is removed: the records stay, and the
        // next build tries again.
        Err(e) => {
            let (kept, rest): (Vec<_>, Vec<_>) = records
                .into_iter()
                .zip(paths)
                .partition(|(r, _)| is_sealed(r));
            out.extend(kept.iter().map(|(r, _)| Removal::of(r, Err(e.clone()))));
            (records, paths) = rest.into_iter().unzip();
            vec![None; records.len()]
        }
    };
    if records.is_empty() {
        return out;
    }
    let removals: Vec<FileRemoval> = records
        .iter()
        .zip(paths)
        .zip(sealed)
        .map(|((r, path), sealed)| FileRemoval {
            path,
            written_sha256: sealed.or_else(|| r.facts.get(SHA256).cloned()),
        })
        .collect();
    let done = remove_files(cx.transport, &removals).await;
    out.extend(records.iter().zip(done).map(|(r, x)| {
        let said = x.map(|done| match done {
            Removed::Deleted => "deleted".to_string(),
            Removed::Absent => "already absent".to_string(),
            Removed::Changed => "left in place: its content changed \
                since envc wrote it (now held by something else)"
                .to_string(),
        });
        Removal::of(r, said)
    }));
    out
}

fn is_sealed(r: &RealizationRecord) -> bool {
    r.facts.contains_key("sealed")
}

/// For each file record that holds a secret (its sha256 kept as a keyed hash): the sha256
/// the target has now when it is what envc wrote, else a value no file has, so that
/// `remove_files` leaves it in place. `None` for other records. An error when the target
/// could not be looked at.
async fn sealed_written(
    cx: &Removing<'_>,
    records: &[&RealizationRecord],
    paths: &[String],
) -> Result<Vec<Option<String>>, StepError> {
    let probe: Vec<String> = records
        .iter()
        .zip(paths)
        .filter(|(r, _)| is_sealed(r))
        .map(|(_, p)| p.clone())
        .collect();
    let mut seen = match probe.is_empty() {
        true => Vec::new(),
        false => probe_files(cx.transport, &probe).await?,
    }
    .into_iter();
    Ok(records
        .iter()
        .map(|r| {
            if !is_sealed(r) {
                return None;
            }
            let now = seen.next().flatten().and_then(|f| f.get(SHA256).cloned());
            Some(match (now, cx.secrets) {
                (Some(sha), Some(s)) if Some(&s.keyed(sha.as_bytes())) == r.facts.get(SHA256) => {
                    sha
                }
                _ => "(not what envc wrote)".to_string(),
            })
        })
        .collect())
}

impl Realize for FileSpec {
    fn predicted_facts(&self) -> Option<Facts> {
        Some(self.facts())
    }

    fn launch(&self, cx: &Launching<'_>) -> Launch {
        let mut f = self.clone();
        // What envc wrote on this same target, to tell when a build replaces content
        // someone else put there since. (A sealed record holds a keyed hash, which the
        // target cannot compare.)
        f.written_sha256 = cx
            .record_here
            .filter(|r| !is_sealed(r))
            .and_then(|r| r.facts.get(SHA256).cloned());
        Launch::OnTarget(Box::new(Files(vec![(cx.node, f)])))
    }

    // A rollback writes these bytes back; a sealed file's are a secret's, never stored.
    fn kept(&self) -> Option<std::borrow::Cow<'_, [u8]>> {
        (self.sealed.is_none()).then_some(std::borrow::Cow::Borrowed(self.content.as_slice()))
    }
}

/// Files placed on one target in one batch.
struct Files(Vec<(usize, FileSpec)>);

impl Step for Files {
    fn nodes(&self) -> Vec<usize> {
        self.0.iter().map(|x| x.0).collect()
    }

    fn without(self: Box<Self>, gone: &BTreeSet<usize>) -> Option<Box<dyn Step>> {
        let left: Vec<_> = self
            .0
            .into_iter()
            .filter(|x| !gone.contains(&x.0))
            .collect();
        (!left.is_empty()).then(|| Box::new(Files(left)) as Box<dyn Step>)
    }

    fn absorb(&mut self, other: Box<dyn Step>) -> Option<Box<dyn Step>> {
        absorb_same(self, other, |a, b| a.0.extend(b.0))
    }

    fn probes(&self) -> bool {
        true
    }

    fn absent<'a>(
        self: Box<Self>,
        t: &'a Transport,
        nodes: &'a [usize],
    ) -> BoxFuture<'a, Result<Absent, StepError>> {
        Box::pin(async move {
            let probed: Vec<&(usize, FileSpec)> =
                self.0.iter().filter(|x| nodes.contains(&x.0)).collect();
            let paths: Vec<String> = probed.iter().map(|x| x.1.path.clone()).collect();
            let found = probe_files(t, &paths).await?;
            let absent = probed
                .iter()
                .zip(found)
                .filter_map(|(x, f)| f.is_none().then_some(x.0))
                .collect();
            Ok((absent, self as Box<dyn Step>))
        })
    }

    fn intent_facts(&self, i: usize) -> Facts {
        self.0
            .iter()
            .find(|x| x.0 == i)
            .map(|(_, f)| f.facts())
            .unwrap_or_default()
    }

    fn run<'a>(
        self: Box<Self>,
        cx: StepCx<'a>,
    ) -> BoxFuture<'a, Vec<(usize, Result<Applied, StepError>)>> {
        Box::pin(async move {
            let (nodes, specs): (Vec<usize>, Vec<FileSpec>) = self.0.into_iter().unzip();
            let rs = apply_files(cx.transport, &specs).await;
            nodes.into_iter().zip(rs).collect()
        })
    }
}

/// A file's bytes: its `content`, its `source` file, or its `template` rendered.
fn file_content(node: &NodeSpec, r: &Resolving<'_>) -> Result<Vec<u8>, Resolution> {
    let (attrs, spec, files): (_, &Spec, &dyn SourceLoader) = (&r.attrs, r.spec, r.files);
    let fail = |m: String| Resolution::Failed(format!("`{}`: {m}", node.key));
    let read = |v: &Val| -> Result<(String, Vec<u8>), Resolution> {
        let Val::Path { path, blake3 } = v else {
            return Err(fail("expected a project file".into()));
        };
        let bytes = files
            .read(path)
            .map_err(|e| fail(format!("cannot read `{path}`: {e}")))?;
        if blake3::hash(&bytes).to_hex().as_str() != blake3 {
            return Err(fail(format!(
                "`{path}` changed after it was compiled; run the command again"
            )));
        }
        Ok((path.clone(), bytes))
    };
    let given: Vec<&str> = ["content", "template", "source"]
        .into_iter()
        .filter(|k| attrs.contains_key(*k))
        .collect();
    match given.as_slice() {
        ["content"] => match &attrs["content"] {
            Val::Str(s) => Ok(s.clone().into_bytes()),
            Val::Sealed(s) => Ok(s.value.clone().into_bytes()),
            _ => Err(fail("`content` is not a string".into())),
        },
        ["source"] => Ok(read(&attrs["source"])?.1),
        ["template"] => {
            let (path, bytes) = read(&attrs["template"])?;
            let text = String::from_utf8(bytes)
                .map_err(|_| fail(format!("template `{path}` is not UTF-8 text")))?;
            let vars = attrs
                .get("vars")
                .map_or(json!({}), |v| template_json(v, spec));
            render_template(&path, &text, &vars).map_err(|e| {
                // minijinja's detail can quote a value (an include of a variable): not a
                // secret's.
                if attrs.get("vars").is_some_and(holds_sealed) {
                    fail(format!("template `{path}` failed to render (its message is withheld: the variables hold a secret)"))
                } else {
                    fail(e.to_string())
                }
            })
        }
        [] => Err(fail(
            "a file needs its content: give `content`, `template` or `source`".into(),
        )),
        many => Err(fail(format!(
            "a file takes one of `content`, `template` or `source`, not {}",
            many.join(" and ")
        ))),
    }
}
