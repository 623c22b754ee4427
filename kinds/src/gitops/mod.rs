//! `gitops` nodes: a branch and directory of a git repository on a host, which `manifest`
//! nodes are delivered to: all of an environment's objects there in one commit, pushed, and
//! checked in the commit (`remote.rs`).

pub mod remote;

use std::collections::BTreeSet;
use std::sync::Arc;

use envc_ids::fact;
use envc_ids::NodeKind;
use serde_json::json;

use crate::error::StepError;
use crate::kustomize::{self, NotOurs};
use crate::manifest::GIT;
use crate::node_type::{
    payload_of, BoxFuture, Holds, Launch, Launching, NodeType, Payload, ProbeError, Probing,
    Realize, Step, StepCx,
};
use crate::record::{Applied, Facts, RealizationRecord};
use crate::substitute::{Resolution, Resolving};
use crate::tools::Tool;
use crate::transport::Transport;
use remote::{Delivery, GitopsSpec, ReadBack};
use std::path::Path;

pub struct Gitops;

impl NodeType for Gitops {
    fn kind(&self) -> NodeKind {
        NodeKind::Gitops
    }

    fn resolve(&self, r: &mut Resolving<'_>) -> Result<Payload, Resolution> {
        let g = GitopsSpec {
            repo: r.text("repo"),
            branch: r.text("branch"),
            path: r.text("path"),
        };
        r.put("repo", json!(g.repo));
        r.put("branch", json!(g.branch));
        r.put("path", json!(g.path));
        Ok(Arc::new(g))
    }

    fn tools(&self) -> &'static [Tool] {
        GIT
    }

    fn holds(&self) -> Option<&dyn Holds> {
        Some(self)
    }
}

impl Holds for Gitops {
    fn read_on_every_build(&self) -> bool {
        true
    }

    fn probe_held<'a>(
        &'a self,
        cx: &'a Probing<'a>,
        record: &'a RealizationRecord,
        held: &'a [(String, &'a RealizationRecord)],
    ) -> BoxFuture<'a, Result<Vec<Option<Facts>>, ProbeError>> {
        Box::pin(async move {
            let Some(spec) = GitopsSpec::of_record(record) else {
                return Err(ProbeError::Kind(format!(
                    "the record of `{}` does not say where its repository is",
                    record.node
                )));
            };
            let files: Vec<String> = held.iter().map(|(name, r)| object_file(name, r)).collect();
            let read = remote::read_back(cx.transport, &spec, &files, cx.work_dir).await?;
            let listing = Listing::of(&read, cx.environment);
            Ok(held
                .iter()
                .zip(&files)
                .map(|((_, r), file)| read_object(r, file, &read, &listing, &spec))
                .collect())
        })
    }

    fn holder_of_record(&self, record: &RealizationRecord) -> Option<Payload> {
        Some(Arc::new(GitopsSpec::of_record(record)?))
    }

    fn deliver(
        &self,
        payload: &Payload,
        objects: Vec<(usize, String, String)>,
        delivery: Delivery,
    ) -> Option<Box<dyn Step>> {
        let spec = payload_of::<GitopsSpec>(payload)?.clone();
        Some(Box::new(Deliver {
            objects,
            spec,
            delivery,
        }))
    }

    fn undeliver<'a>(
        &'a self,
        t: &'a Transport,
        payload: &'a Payload,
        delivery: &'a Delivery,
        work_dir: &'a Path,
        records: &'a [RealizationRecord],
    ) -> BoxFuture<'a, Vec<Result<String, StepError>>> {
        Box::pin(async move {
            let done = match payload_of::<GitopsSpec>(payload) {
                Some(g) => remote::deliver(t, g, delivery, work_dir).await,
                None => Err(StepError::new(
                    "internal error: a repository's payload is not a repository",
                )),
            };
            records
                .iter()
                .map(|r| {
                    let d = done.as_ref().map_err(Clone::clone)?;
                    let left = r
                        .facts
                        .get(fact::delivery::FILE)
                        .is_some_and(|f| d.change.left.contains(f));
                    Ok(match (left, d.committed, &d.commit) {
                        (true, _, _) => {
                            "left in the repository: someone changed its file since envc wrote it"
                                .to_string()
                        }
                        (false, true, Some(c)) => format!("removed in commit {}", short(c)),
                        _ => "already absent".to_string(),
                    })
                })
                .collect()
        })
    }

    fn removed_in(&self, commit: &str) -> String {
        format!("removed in commit {}", short(commit))
    }
}

/// The file an object's record says it was committed to (records name it; the node's name
/// gives it too).
fn object_file(name: &str, r: &RealizationRecord) -> String {
    r.facts
        .get(fact::delivery::FILE)
        .cloned()
        .unwrap_or_else(|| envc_k8s::file_of_node(name))
}

/// What the kustomization on the branch lists, or what is wrong with it.
enum Listing {
    Lists(BTreeSet<String>),
    Wrong(String),
}

impl Listing {
    fn of(read: &ReadBack, environment: &str) -> Listing {
        let text = match (
            &read.kustomization,
            read.files.get(kustomize::KUSTOMIZATION),
        ) {
            (Some(text), _) => text,
            (None, Some(other)) => return Listing::Wrong(format!("is {}", other.sha256())),
            (None, None) => return Listing::Wrong("is gone".into()),
        };
        match kustomize::listing(text, environment) {
            Ok(listed) => Listing::Lists(listed.into_iter().map(|(f, _)| f).collect()),
            Err(NotOurs::Foreign) => Listing::Wrong("was not written by envc".into()),
            Err(NotOurs::Environment(e)) => {
                Listing::Wrong(format!("was written by environment `{e}`"))
            }
            Err(NotOurs::Path(e)) => Listing::Wrong(e.to_string()),
        }
    }
}

/// An object's facts as the branch holds it now: `None` when its file is gone (a
/// force-push, someone's commit); else its content's sha256, and its `file` said to be
/// unlisted when the kustomization there would not deploy it. The commit is not compared:
/// history rewritten with the same content is the same delivery, and a repository's
/// head moves with every commit of others.
fn read_object(
    r: &RealizationRecord,
    file: &str,
    read: &ReadBack,
    listing: &Listing,
    spec: &GitopsSpec,
) -> Option<Facts> {
    let found = read.files.get(file)?;
    let mut facts = r.facts.clone();
    facts.insert(fact::content::SHA256.to_string(), found.sha256());
    let kustomization = kustomize::path_in(&spec.path, kustomize::KUSTOMIZATION);
    let unlisted = match listing {
        Listing::Lists(listed) if listed.contains(file) => None,
        Listing::Lists(_) => Some("does not list it".to_string()),
        Listing::Wrong(why) => Some(why.clone()),
    };
    if let Some(why) = unlisted {
        facts.insert(
            fact::delivery::FILE.to_string(),
            format!("{file}, but {kustomization} {why}"),
        );
    }
    Some(facts)
}

impl GitopsSpec {
    /// Where a repository that left the graph was, from its record.
    pub fn of_record(record: &RealizationRecord) -> Option<GitopsSpec> {
        let text = |k: &str| -> Option<String> {
            serde_json::from_str::<serde_json::Value>(record.attrs.get(k)?)
                .ok()?
                .as_str()
                .map(str::to_string)
        };
        Some(GitopsSpec {
            repo: text("repo")?,
            branch: text("branch")?,
            path: text("path")?,
        })
    }
}

impl Realize for GitopsSpec {
    fn launch(&self, cx: &Launching<'_>) -> Launch {
        Launch::OnTarget(Box::new(Read(cx.node, self.clone())))
    }
}

/// A `gitops` node's facts: as `fingerprint`, the identity its objects are recorded
/// against: the host's key and the place in the repository, so that objects delivered to
/// another repository, branch or path are delivered anew.
fn repository_facts(host_fingerprint: &str, g: &GitopsSpec) -> Facts {
    let mut h = blake3::Hasher::new();
    for part in [host_fingerprint, &g.repo, &g.branch, &g.path] {
        h.update(part.as_bytes());
        h.update(b"\0");
    }
    Facts::from([(
        fact::machine::FINGERPRINT.to_string(),
        format!("gitops:{}", &h.finalize().to_hex()[..32]),
    )])
}

/// Read a repository: it is there, and the login may read it.
struct Read(usize, GitopsSpec);

impl Step for Read {
    fn nodes(&self) -> Vec<usize> {
        vec![self.0]
    }

    fn run<'a>(
        self: Box<Self>,
        cx: StepCx<'a>,
    ) -> BoxFuture<'a, Vec<(usize, Result<Applied, StepError>)>> {
        Box::pin(async move {
            let result = remote::branch_head(cx.transport, &self.1, cx.work_dir)
                .await
                .map(|_| Applied {
                    facts: repository_facts(&cx.host_key.fingerprint, &self.1),
                    created: false,
                    note: None,
                    log: None,
                });
            vec![(self.0, result)]
        })
    }
}

/// Commit objects (node, file, YAML) to a repository and push them.
pub struct Deliver {
    pub objects: Vec<(usize, String, String)>,
    pub spec: GitopsSpec,
    pub delivery: Delivery,
}

impl Step for Deliver {
    fn nodes(&self) -> Vec<usize> {
        self.objects.iter().map(|x| x.0).collect()
    }

    fn without(self: Box<Self>, gone: &BTreeSet<usize>) -> Option<Box<dyn Step>> {
        let Deliver {
            objects,
            spec,
            delivery,
        } = *self;
        let objects: Vec<_> = objects
            .into_iter()
            .filter(|x| !gone.contains(&x.0))
            .collect();
        (!objects.is_empty()).then(|| {
            Box::new(Deliver {
                objects,
                spec,
                delivery,
            }) as Box<dyn Step>
        })
    }

    fn run<'a>(
        self: Box<Self>,
        cx: StepCx<'a>,
    ) -> BoxFuture<'a, Vec<(usize, Result<Applied, StepError>)>> {
        Box::pin(async move {
            let done = remote::deliver(cx.transport, &self.spec, &self.delivery, cx.work_dir).await;
            let done = match done {
                Ok(done) => done,
                Err(e) => return self.objects.iter().map(|x| (x.0, Err(e.clone()))).collect(),
            };
            let commit = done.commit.unwrap_or_default();
            let short = short(&commit).to_string();
            self.objects
                .into_iter()
                .map(|(i, file, yaml)| {
                    let note = match (done.committed, done.retries) {
                        (false, _) => format!("already in commit {short}"),
                        (true, 0) => format!("committed {short}"),
                        (true, n) => format!(
                            "committed {short} (the branch moved {n}× while envc pushed; it landed on top)"
                        ),
                    };
                    let facts = Facts::from([
                        (fact::delivery::COMMIT.to_string(), commit.clone()),
                        (fact::delivery::FILE.to_string(), file),
                        (
                            fact::content::SHA256.to_string(),
                            crate::script::sha256_hex(yaml.as_bytes()),
                        ),
                    ]);
                    let applied = Applied {
                        facts,
                        created: true,
                        note: Some(note),
                        log: None,
                    };
                    (i, Ok(applied))
                })
                .collect()
        })
    }
}

/// A commit as people read it.
pub fn short(commit: &str) -> &str {
    commit.get(..12).unwrap_or(commit)
}
