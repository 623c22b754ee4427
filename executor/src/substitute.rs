//! Substitution (called "resolution" of a node in plans: its *resolved* hash): put what
//! inputs produced in place of deferred values and node references, render file contents,
//! and hash again. ("Resolve" elsewhere means package resolution against an archive, in
//! `envc_lockfiles::resolve`.) The result is the *resolved hash*: with the
//! target's identity it decides whether a node has to run. Inputs enter by their output
//! hash, not their derivation id, so an input that re-ran and produced the same output does
//! not make its dependents run (early cutoff).

use envc_ids::ResolvedHash;
use std::collections::BTreeMap;

use envc_compiler::derivation::ENCODING_VERSION;
use envc_compiler::pin::{ArchiveValue, ClosureDeb, ImageValue, PackageValue, PinKey, PinValue};
use envc_compiler::types::NodeKind;
use envc_compiler::SourceLoader;
use serde_json::{json, Value as Json};

use crate::checks::Phase;
use crate::checks::{checks_hash, CheckSpec};
use crate::debs::DebSource;
use crate::kinds::exec::remote::{CommandLine, ExecSpec};
use crate::kinds::file::remote::FileSpec;
pub use crate::kinds::gitops::remote::GitopsSpec;
use crate::kinds::image::build::ImageSpec;
use crate::kinds::package::remote::PackageSpec;
use crate::kinds::vm::qemu::VmSpec;
use crate::record::Facts;
use crate::spec::{CheckDecl, NodeSpec, Sealed, Spec, Val};
use crate::store::ObjectId;
use crate::transport::HostSpec;

/// What dependents know of a node that was realized (or, in a plan, is predicted to be).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Known {
    pub facts: Facts,
    pub output_hash: String,
}

impl Known {
    pub fn new(facts: Facts) -> Known {
        Known {
            output_hash: crate::record::output_hash(&facts),
            facts,
        }
    }

    /// What a record says its node produced.
    pub fn of_record(r: &crate::record::RealizationRecord) -> Known {
        Known {
            facts: r.facts.clone(),
            output_hash: r.output_hash.clone(),
        }
    }
}

/// What executing the node needs.
#[derive(Clone, Debug)]
pub enum Payload {
    Host(HostSpec),
    Vm(VmSpec),
    Image(ImageSpec),
    File(FileSpec),
    Package(PackageSpec),
    Service {
        name: String,
        enabled: bool,
        running: bool,
        /// Nodes whose change restarts the service.
        restart_on: Vec<usize>,
    },
    Exec(ExecSpec),
    /// A Kubernetes object, whole, deferred values substituted.
    Manifest(ManifestSpec),
    /// A git repository objects are delivered to.
    Gitops(GitopsSpec),
    /// Another environment's outputs (`stack`): its facts, read from that state already.
    Stack(Facts),
}

#[derive(Clone, Debug)]
pub struct ManifestSpec {
    pub api_version: String,
    pub kind: String,
    pub name: String,
    /// Empty for a cluster-wide object.
    pub namespace: String,
    pub object: Json,
}

impl ManifestSpec {
    /// Its canonical YAML (`envc_k8s::yaml`).
    pub fn yaml(&self) -> String {
        envc_k8s::yaml::to_yaml(&self.object)
    }

    /// The file it is written to in a rendered directory or a GitOps repository.
    pub fn file_name(&self) -> String {
        envc_k8s::file_name(&self.kind, &self.name, &self.namespace)
    }
}

#[derive(Clone, Debug)]
pub struct Resolved {
    pub hash: ResolvedHash,
    /// The resolved attributes as people read them (see `RealizationRecord::attrs`).
    pub display: BTreeMap<String, String>,
    pub payload: Payload,
    /// Its checks with deferred values substituted, preconditions first; `Pending` while a
    /// node they read is not known yet (they are not part of `hash`).
    pub checks: Result<Vec<CheckSpec>, Resolution>,
}

impl Resolved {
    /// The hash of its postconditions, when they are resolved and it has any.
    pub fn checks_hash(&self) -> Option<String> {
        self.checks.as_ref().ok().and_then(|c| checks_hash(c))
    }

    /// Its resolved checks (none while they are pending).
    pub fn check_specs(&self) -> &[CheckSpec] {
        self.checks.as_deref().unwrap_or(&[])
    }
}

impl Resolved {
    /// How to reach the host, when this is a host node.
    pub fn host(&self) -> Option<&HostSpec> {
        match &self.payload {
            Payload::Host(h) => Some(h),
            _ => None,
        }
    }

    /// The facts a successful realization will observe, when they can be known beforehand
    /// (a file's content hash, a pinned package version). Plans use them to resolve
    /// dependents before anything runs.
    pub fn predicted_facts(&self) -> Option<Facts> {
        match &self.payload {
            Payload::File(f) => Some(f.facts()),
            Payload::Stack(facts) => Some(facts.clone()),
            Payload::Package(p) => p
                .version
                .as_ref()
                .map(|v| Facts::from([("version".to_string(), v.clone())])),
            Payload::Host(_)
            | Payload::Vm(_)
            | Payload::Image(_)
            | Payload::Service { .. }
            | Payload::Exec(_)
            | Payload::Manifest(_)
            | Payload::Gitops(_) => None,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Resolution {
    /// Waiting for this input's output.
    Pending(usize),
    /// The node cannot be resolved: the message says why and what to do.
    Failed(String),
}

/// The fact that a node's deferred output reads.
pub fn fact_of_output(kind: NodeKind, output: &str) -> String {
    match (kind, output) {
        (NodeKind::Stack, o) => crate::stack::fact(o),
        (NodeKind::File, "content_hash") => "sha256".into(),
        (NodeKind::Package, "installed_version") => "version".into(),
        (_, o) => o.into(),
    }
}

fn output_is_int(kind: NodeKind, output: &str) -> bool {
    envc_compiler::builtins::schema(kind)
        .outputs
        .iter()
        .any(|(n, ty)| *n == output && matches!(ty().base(), envc_compiler::types::Ty::Int))
}

struct Resolver<'a> {
    spec: &'a Spec,
    known: &'a dyn Fn(usize) -> Option<&'a Known>,
}

impl Resolver<'_> {
    fn known(&self, i: usize) -> Result<&Known, Resolution> {
        (self.known)(i).ok_or(Resolution::Pending(i))
    }

    /// A secret-bearing string, with its hash under the store's key.
    fn seal(&self, value: String) -> Result<Val, Resolution> {
        let secrets = self.spec.secrets.as_ref().ok_or_else(|| {
            Resolution::Failed(
                "a secret was used before the secrets were read (this is a bug in envc)".into(),
            )
        })?;
        Ok(Val::Sealed(Sealed {
            keyed: secrets.keyed(value.as_bytes()),
            value,
        }))
    }

    /// The value with deferred parts replaced by what their producers reported.
    fn substitute(&self, v: &Val) -> Result<Val, Resolution> {
        Ok(match v {
            Val::Output { node, output } => {
                let producer = &self.spec.nodes[*node];
                let fact = fact_of_output(producer.kind, output);
                let facts = &self.known(*node)?.facts;
                if producer.kind == NodeKind::Stack {
                    let ty = crate::stack::reads(producer)
                        .into_iter()
                        .find(|(n, _)| n == output)
                        .map(|(_, t)| t);
                    return match (facts.get(&fact), ty) {
                        (Some(s), Some(ty)) => crate::stack::value(ty, s).ok_or_else(|| {
                            Resolution::Failed(format!(
                                "`{}` read `{output}` = {s:?}, which is not {}",
                                producer.key,
                                ty.name()
                            ))
                        }),
                        _ => Err(Resolution::Failed(format!(
                            "`{}` has no `{output}` to read: `{}` was never built, and `{output}` has no default (`defaults = {{ {output} = … }}`); build `{}` first",
                            producer.key, producer.name, producer.name
                        ))),
                    };
                }
                match facts.get(&fact) {
                    // Facts are text; an output declared `deferred int` (a port) is a number.
                    Some(s) if output_is_int(producer.kind, output) => match s.parse() {
                        Ok(n) => Val::Int(n),
                        Err(_) => {
                            return Err(Resolution::Failed(format!(
                                "`{}` reported `{output}` = {s:?}, which is not a number",
                                producer.key
                            )))
                        }
                    },
                    Some(s) => Val::Str(s.clone()),
                    None => {
                        return Err(Resolution::Failed(format!(
                            "`{}` reported no `{output}`",
                            producer.key
                        )))
                    }
                }
            }
            Val::Concat(parts) => {
                let mut s = String::new();
                let mut sealed = false;
                for p in parts {
                    match self.substitute(p)? {
                        Val::Str(x) => s.push_str(&x),
                        Val::Int(n) => s.push_str(&n.to_string()),
                        // Interpolating a secret makes the whole string secret.
                        Val::Sealed(x) => {
                            sealed = true;
                            s.push_str(&x.value);
                        }
                        other => s.push_str(&to_json(&other, self).to_string()),
                    }
                }
                if sealed {
                    self.seal(s)?
                } else {
                    Val::Str(s)
                }
            }
            Val::Secret(name) => {
                let value = self
                    .spec
                    .secrets
                    .as_ref()
                    .and_then(|s| s.value(name))
                    .ok_or_else(|| {
                        Resolution::Failed(format!(
                            "secret `{name}` was not read before the run (this is a bug in envc)"
                        ))
                    })?;
                self.seal(value.to_string())?
            }
            Val::List(xs) => Val::List(
                xs.iter()
                    .map(|x| self.substitute(x))
                    .collect::<Result<_, _>>()?,
            ),
            Val::Record(r) => Val::Record(
                r.iter()
                    .map(|(k, x)| Ok((k.clone(), self.substitute(x)?)))
                    .collect::<Result<_, _>>()?,
            ),
            Val::Node(j) => {
                self.known(*j)?;
                Val::Node(*j)
            }
            other => other.clone(),
        })
    }
}

/// The hashed form of a substituted value: typed where JSON has no type, node references
/// as (node, output hash).
fn to_json(v: &Val, r: &Resolver) -> Json {
    match v {
        Val::Int(n) => json!(n),
        Val::Str(s) => json!(s),
        Val::Bool(b) => json!(b),
        Val::Size(n) => json!({ "size": n }),
        Val::Mode(m) => json!({ "mode": format!("0o{m:o}") }),
        Val::Path { path, blake3 } => json!({ "path": path, "blake3": blake3 }),
        Val::List(xs) => Json::Array(xs.iter().map(|x| to_json(x, r)).collect()),
        Val::Record(m) => Json::Object(m.iter().map(|(k, x)| (k.clone(), to_json(x, r))).collect()),
        Val::Node(j) => json!({
            "node": r.spec.nodes[*j].key,
            "output": (r.known)(*j).map(|k| k.output_hash.as_str()),
        }),
        Val::Sealed(s) => json!({ "secret": s.keyed }),
        Val::Output { .. } | Val::Concat(_) | Val::Secret(_) => json!(null),
    }
}

/// A substituted value as Kubernetes reads it (as `envc_compiler::manifest::to_json` does
/// before substitution): a size is a quantity, a mode its decimal value.
fn k8s_json(v: &Val) -> Json {
    match v {
        Val::Int(n) => json!(n),
        Val::Str(s) => json!(s),
        Val::Bool(b) => json!(b),
        Val::Size(n) => envc_k8s::quantity(*n),
        Val::Mode(m) => json!(m),
        Val::List(xs) => Json::Array(xs.iter().map(k8s_json).collect()),
        Val::Record(m) => Json::Object(m.iter().map(|(k, x)| (k.clone(), k8s_json(x))).collect()),
        // The compiler refuses these in a manifest (`eval::manifest-schema`,
        // `eval::exposed-secret`), and substitution leaves no deferred value.
        Val::Path { .. }
        | Val::Node(_)
        | Val::Output { .. }
        | Val::Concat(_)
        | Val::Secret(_)
        | Val::Sealed(_) => Json::Null,
    }
}

/// Template variables: plain JSON, as a template author expects.
fn template_json(v: &Val, spec: &Spec) -> Json {
    match v {
        Val::Int(n) => json!(n),
        Val::Str(s) => json!(s),
        Val::Bool(b) => json!(b),
        Val::Size(n) => json!(n),
        Val::Mode(m) => json!(format!("{m:04o}")),
        Val::Path { path, .. } => json!(path),
        Val::List(xs) => Json::Array(xs.iter().map(|x| template_json(x, spec)).collect()),
        Val::Record(r) => Json::Object(
            r.iter()
                .map(|(k, x)| (k.clone(), template_json(x, spec)))
                .collect(),
        ),
        Val::Node(j) => {
            let n = &spec.nodes[*j];
            json!({ "kind": n.kind.name(), "name": n.name })
        }
        // What the template renders is the secret; the file holding it is sealed.
        Val::Sealed(s) => json!(s.value),
        Val::Output { .. } | Val::Concat(_) | Val::Secret(_) => json!(null),
    }
}

/// Whether a substituted value holds a secret.
fn holds_sealed(v: &Val) -> bool {
    match v {
        Val::Sealed(_) => true,
        Val::List(xs) => xs.iter().any(holds_sealed),
        Val::Record(r) => r.values().any(holds_sealed),
        _ => false,
    }
}

/// Short values inline, long ones as a hash: what a plan shows.
fn display(v: &Json) -> String {
    let s = v.to_string();
    if s.len() <= 100 {
        s
    } else {
        format!(
            "blake3:{} ({} bytes)",
            &blake3::hash(s.as_bytes()).to_hex()[..16],
            s.len()
        )
    }
}

fn content_display(bytes: &[u8]) -> String {
    format!(
        "blake3:{} ({} bytes)",
        &blake3::hash(bytes).to_hex()[..16],
        bytes.len()
    )
}

/// Resolves node `i` of `spec`, given what is known of other nodes.
pub fn resolve<'a>(
    spec: &'a Spec,
    i: usize,
    known: &'a dyn Fn(usize) -> Option<&'a Known>,
    files: &dyn SourceLoader,
) -> Result<Resolved, Resolution> {
    let r = Resolver { spec, known };
    let node = &spec.nodes[i];
    let mut attrs: BTreeMap<String, Val> = BTreeMap::new();
    for (k, v) in &node.attrs {
        attrs.insert(k.clone(), r.substitute(v)?);
    }
    let oh = &r;
    // What is hashed, and what is shown, per attribute.
    let mut hashed: BTreeMap<String, Json> = BTreeMap::new();
    let mut shown: BTreeMap<String, String> = BTreeMap::new();
    fn put(
        hashed: &mut BTreeMap<String, Json>,
        shown: &mut BTreeMap<String, String>,
        k: &str,
        j: Json,
    ) {
        shown.insert(k.to_string(), display(&j));
        hashed.insert(k.to_string(), j);
    }
    let s = |k: &str| match attrs.get(k) {
        Some(Val::Str(s)) => s.clone(),
        _ => String::new(),
    };
    let b = |k: &str| matches!(attrs.get(k), Some(Val::Bool(true)));
    let nodes_of = |k: &str| match attrs.get(k) {
        Some(Val::List(xs)) => xs
            .iter()
            .filter_map(|x| match x {
                Val::Node(j) => Some(*j),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    };
    if let Some(after) = attrs.get("after") {
        put(&mut hashed, &mut shown, "after", to_json(after, oh));
    }
    let payload = match node.kind {
        NodeKind::Stack => {
            let facts = crate::stack::facts(node, &node.name, spec.stacks.get(&node.name))
                .map_err(Resolution::Failed)?;
            // The values read, not the run: a rebuild of it that published the same
            // outputs changes nothing here.
            for (name, _) in crate::stack::reads(node) {
                let v = facts
                    .get(&crate::stack::fact(name))
                    .cloned()
                    .unwrap_or_default();
                put(&mut hashed, &mut shown, &format!("output {name}"), json!(v));
            }
            Payload::Stack(facts)
        }
        NodeKind::Gitops => {
            let g = GitopsSpec {
                repo: s("repo"),
                branch: s("branch"),
                path: s("path"),
            };
            put(&mut hashed, &mut shown, "repo", json!(g.repo));
            put(&mut hashed, &mut shown, "branch", json!(g.branch));
            put(&mut hashed, &mut shown, "path", json!(g.path));
            Payload::Gitops(g)
        }
        NodeKind::Host => {
            let port = match attrs.get("port") {
                Some(Val::Int(p)) => u16::try_from(*p).unwrap_or(22),
                _ => 22,
            };
            let host = HostSpec {
                name: node.name.clone(),
                address: s("address"),
                port,
                user: s("user"),
                identity: None,
            };
            put(&mut hashed, &mut shown, "address", json!(host.address));
            put(&mut hashed, &mut shown, "port", json!(host.port));
            put(&mut hashed, &mut shown, "user", json!(host.user));
            Payload::Host(host)
        }
        NodeKind::File => {
            let content = file_content(node, &attrs, spec, files)?;
            let mode = match attrs.get("mode") {
                Some(Val::Mode(m)) => *m,
                _ => 0o644,
            };
            // A file that holds a secret is known by keyed hashes only, here and in its
            // record's facts.
            let secrets = spec.secrets.as_deref();
            let sealed = ["content", "vars"]
                .iter()
                .any(|k| attrs.get(*k).is_some_and(holds_sealed))
                .then(|| secrets.map(|x| x.keyed(crate::script::sha256_hex(&content).as_bytes())))
                .map(|k| k.ok_or_else(|| Resolution::Failed("a secret was used before the secrets were read (this is a bug in envc)".into())))
                .transpose()?;
            let f = FileSpec {
                path: node.name.clone(),
                owner: s("owner"),
                group: s("group"),
                mode,
                content,
                written_sha256: None,
                sealed,
            };
            match (&f.sealed, secrets) {
                (Some(_), Some(x)) => {
                    let keyed = x.keyed(&f.content);
                    shown.insert(
                        "content".into(),
                        format!("{} (secret, {} bytes)", &keyed[..22], f.content.len()),
                    );
                    hashed.insert("content".into(), json!(keyed));
                }
                _ => {
                    hashed.insert(
                        "content".into(),
                        json!(blake3::hash(&f.content).to_hex().as_str()),
                    );
                    shown.insert("content".into(), content_display(&f.content));
                }
            }
            // Shown, not hashed: they explain a content change but do not cause one.
            for k in ["template", "source", "vars"] {
                if let Some(v) = attrs.get(k) {
                    shown.insert(k.into(), display(&to_json(v, oh)));
                }
            }
            put(&mut hashed, &mut shown, "owner", json!(f.owner));
            put(&mut hashed, &mut shown, "group", json!(f.group));
            put(
                &mut hashed,
                &mut shown,
                "mode",
                json!(format!("0o{:o}", f.mode)),
            );
            Payload::File(f)
        }
        NodeKind::Package => {
            // The source's version, else the lockfile's.
            let pin = node
                .pins
                .get(&PinKey::Package(node.name.clone()))
                .and_then(|v| PackageValue::decode(v));
            let version = match attrs.get("version") {
                Some(Val::Str(v)) if !v.is_empty() => Some(v.clone()),
                _ => pin.as_ref().map(|p| p.version.clone()),
            };
            put(&mut hashed, &mut shown, "version", json!(version));
            // Locked: exactly the pinned .debs (a lock that pins another version than the
            // source asks for is stale; the target's apt installs what the source says).
            let debs = match pin.filter(|p| Some(&p.version) == version.as_ref()) {
                Some(p) => pinned_debs(spec, node, &p).map_err(Resolution::Failed)?,
                None => Vec::new(),
            };
            Payload::Package(PackageSpec {
                name: node.name.clone(),
                version,
                debs,
            })
        }
        NodeKind::Service => {
            let restart_on = nodes_of("restart_on");
            if let Some(v) = attrs.get("restart_on") {
                put(&mut hashed, &mut shown, "restart_on", to_json(v, oh));
            }
            put(&mut hashed, &mut shown, "enabled", json!(b("enabled")));
            put(&mut hashed, &mut shown, "running", json!(b("running")));
            Payload::Service {
                name: node.name.clone(),
                enabled: b("enabled"),
                running: b("running"),
                restart_on,
            }
        }
        NodeKind::Vm => {
            let fail = |m: &str| Resolution::Failed(format!("`{}`: {m}", node.key));
            let Some(Val::Node(image)) = attrs.get("image") else {
                return Err(fail("`image` is not an image node"));
            };
            let image_facts = &r.known(*image)?.facts;
            let object = |fact: &str| {
                image_facts
                    .get(fact)
                    .and_then(|h| ObjectId::parse(h))
                    .ok_or_else(|| fail(&format!("its image reported no `{fact}`")))
            };
            let int = |k: &str| match attrs.get(k) {
                Some(Val::Int(n)) => u64::try_from(*n).unwrap_or(1),
                Some(Val::Size(n)) => *n,
                _ => 0,
            };
            if s("user") != "root" {
                return Err(fail(
                    "the qemu provider logs in as root only (its key is given to root at boot); drop `user` or set it to \"root\"",
                ));
            }
            let vm = VmSpec {
                name: node.name.clone(),
                cpus: u32::try_from(int("cpus")).unwrap_or(1),
                memory_mib: int("memory") >> 20,
                disk_bytes: int("disk"),
                user: s("user"),
                disk_image: object(crate::kinds::image::build::fact::DISK)?,
                kernel: object(crate::kinds::image::build::fact::KERNEL)?,
                lan_rank: {
                    // The lab's stand-ins for hosts after the environment's own VMs: those
                    // keep production's addresses.
                    let mut names: Vec<(bool, &str)> = spec
                        .nodes
                        .iter()
                        .filter(|n| n.kind == NodeKind::Vm)
                        .map(|n| (n.stands_in, n.name.as_str()))
                        .collect();
                    names.sort_unstable();
                    let rank = names.iter().position(|(_, n)| *n == node.name).unwrap_or(0);
                    u8::try_from(rank).unwrap_or(u8::MAX)
                },
            };
            put(
                &mut hashed,
                &mut shown,
                "image",
                to_json(&attrs["image"], oh),
            );
            put(&mut hashed, &mut shown, "cpus", json!(vm.cpus));
            put(
                &mut hashed,
                &mut shown,
                "memory",
                json!({ "size": int("memory") }),
            );
            put(
                &mut hashed,
                &mut shown,
                "disk",
                json!({ "size": vm.disk_bytes }),
            );
            put(&mut hashed, &mut shown, "user", json!(vm.user));
            Payload::Vm(vm)
        }
        NodeKind::Image => {
            let mut packages = crate::spec::strings(attrs.get("packages"));
            packages.sort();
            packages.dedup();
            let files: BTreeMap<String, String> = match attrs.get("files") {
                Some(Val::Record(m)) => m
                    .iter()
                    .filter_map(|(k, v)| match v {
                        Val::Str(s) => Some((k.clone(), s.clone())),
                        _ => None,
                    })
                    .collect(),
                _ => BTreeMap::new(),
            };
            // The lockfile's package set and clock, when locked.
            let pinned = match node.pins.get(&PinKey::Image(node.name.clone())) {
                Some(v) => {
                    // A pin value that does not read is a bug, never an unlocked build.
                    let i = ImageValue::decode(v).ok_or_else(|| {
                        Resolution::Failed(format!(
                            "`{}`: its image pin does not read ({v:?}); run `envc lock FILE`",
                            node.key
                        ))
                    })?;
                    Some(
                        crate::debs::pinned(&spec.debs, &i.packages, &format!("`{}`", node.key))
                            .map_err(Resolution::Failed)?,
                    )
                }
                None => None,
            };
            let source_date_epoch = node
                .pins
                .get(&PinKey::SourceDateEpoch)
                .and_then(|v| u64::decode(v))
                .unwrap_or(crate::kinds::image::build::SOURCE_DATE_EPOCH);
            let mirror = node
                .pins
                .get(&PinKey::debian_archive(&s("suite")))
                .and_then(|v| ArchiveValue::decode(v))
                .map(|a| a.mirror);
            let img = ImageSpec {
                mirror,
                name: node.name.clone(),
                suite: s("suite"),
                packages,
                files,
                source_date_epoch,
                pinned,
            };
            put(&mut hashed, &mut shown, "suite", json!(img.suite));
            put(&mut hashed, &mut shown, "packages", json!(img.packages));
            put(&mut hashed, &mut shown, "files", json!(img.files));
            // The builder and the fixed time are inputs too: a new builder is a new image.
            put(
                &mut hashed,
                &mut shown,
                "builder",
                json!(crate::kinds::image::build::builder_hash()),
            );
            put(
                &mut hashed,
                &mut shown,
                "source_date_epoch",
                json!(img.source_date_epoch),
            );
            Payload::Image(img)
        }
        NodeKind::Exec => {
            let spec = exec_spec(node, &attrs).map_err(Resolution::Failed)?;
            // What it runs, as whom, where, with what, and what decides or undoes it: a
            // change to any of them is a change of the node. Not its timeout.
            for k in [
                "argv", "shell", "env", "user", "cwd", "creates", "unless", "only_if", "undo",
                "capture",
            ] {
                if let Some(v) = attrs.get(k) {
                    put(&mut hashed, &mut shown, k, to_json(v, oh));
                }
            }
            match attrs.get("stdin") {
                Some(v @ Val::Sealed(_)) => put(&mut hashed, &mut shown, "stdin", to_json(v, oh)),
                other => {
                    hashed.insert(
                        "stdin".into(),
                        json!(blake3::hash(&spec.stdin).to_hex().as_str()),
                    );
                    if other.is_some() {
                        shown.insert("stdin".into(), content_display(&spec.stdin));
                    }
                }
            }
            shown.insert("timeout".into(), spec.command.timeout_secs.to_string());
            Payload::Exec(spec)
        }
        NodeKind::Manifest => {
            let text = |k: &str| match attrs.get(k) {
                Some(Val::Str(s)) => s.clone(),
                _ => String::new(),
            };
            let json = |k: &str| attrs.get(k).map(k8s_json).unwrap_or(Json::Null);
            let name = envc_k8s::object_name(&node.name).to_string();
            let spec = ManifestSpec {
                api_version: text("api_version"),
                kind: text("kind"),
                namespace: text("namespace"),
                object: envc_k8s::object(
                    &text("api_version"),
                    &text("kind"),
                    &name,
                    &text("namespace"),
                    json("labels"),
                    json("annotations"),
                    json("body"),
                ),
                name,
            };
            // The object is what is hashed and shown: its YAML, as it is written.
            let yaml = spec.yaml();
            hashed.insert(
                "object".into(),
                json!(blake3::hash(yaml.as_bytes()).to_hex().as_str()),
            );
            shown.insert("object".into(), content_display(yaml.as_bytes()));
            Payload::Manifest(spec)
        }
    };
    if !node.pins.is_empty() {
        // Pins are inputs: a moved pin is a change, shown per pin.
        for (k, v) in &node.pins {
            put(&mut hashed, &mut shown, &format!("pin {k}"), json!(v));
        }
    }
    // Checks are shown (a plan says when they changed) but not hashed: they do not change
    // what is on the target.
    let checks = resolve_checks(node, &r);
    if let Err(Resolution::Failed(m)) = checks {
        return Err(Resolution::Failed(m));
    }
    for phase in [Phase::Require, Phase::Expect] {
        let of_phase: Vec<&CheckDecl> = node.checks.iter().filter(|c| c.phase == phase).collect();
        if !of_phase.is_empty() {
            let described: Vec<String> = match &checks {
                Ok(cs) => cs
                    .iter()
                    .filter(|c| c.phase == phase)
                    .map(CheckSpec::describe)
                    .collect(),
                Err(_) => of_phase.iter().map(|c| describe_decl(spec, c)).collect(),
            };
            shown.insert(phase.name().into(), display(&json!(described)));
        }
    }
    let canonical = Json::Object(hashed.into_iter().collect());
    let mut h = blake3::Hasher::new();
    h.update(b"envc-resolved\0");
    h.update(&ENCODING_VERSION.to_le_bytes());
    h.update(node.kind.name().as_bytes());
    h.update(b"\0");
    h.update(node.name.as_bytes());
    h.update(b"\0");
    h.update(canonical.to_string().as_bytes());
    Ok(Resolved {
        hash: ResolvedHash(h.finalize().to_hex().to_string()),
        display: shown,
        payload,
        checks,
    })
}

/// An `exec` node's command as the target runs it.
fn exec_spec(node: &NodeSpec, attrs: &BTreeMap<String, Val>) -> Result<ExecSpec, String> {
    let fail = |m: String| format!("`{}`: {m}", node.key);
    let strs = |k: &str| -> Result<Option<Vec<String>>, String> {
        match attrs.get(k) {
            None => Ok(None),
            Some(Val::List(xs)) => xs
                .iter()
                .map(|x| match x {
                    Val::Str(s) => Ok(s.clone()),
                    Val::Sealed(_) => Err(fail(format!(
                        "`{k}` holds a secret, which would show in the target's process list; pass it in `env` or `stdin`"
                    ))),
                    other => Err(fail(format!("`{k}` holds {other:?}, not a string"))),
                })
                .collect::<Result<_, _>>()
                .map(Some),
            Some(other) => Err(fail(format!("`{k}` is {other:?}, not a list of strings"))),
        }
    };
    let text = |k: &str| -> Result<Option<String>, String> {
        match attrs.get(k) {
            None => Ok(None),
            Some(Val::Str(s)) => Ok(Some(s.clone())),
            Some(Val::Sealed(s)) if matches!(k, "stdin") => Ok(Some(s.value.clone())),
            Some(Val::Sealed(_)) => Err(fail(format!(
                "`{k}` holds a secret; a command takes secrets in `env` or `stdin` only"
            ))),
            Some(other) => Err(fail(format!("`{k}` is {other:?}, not a string"))),
        }
    };
    let argv = match (strs("argv")?, text("shell")?) {
        (Some(argv), None) => argv,
        (None, Some(script)) => vec!["sh".into(), "-c".into(), script, "sh".into()],
        _ => {
            return Err(fail(
                "an exec takes exactly one of `argv` and `shell`".into(),
            ))
        }
    };
    let env = match attrs.get("env") {
        None => BTreeMap::new(),
        Some(Val::Record(r)) => r
            .iter()
            .map(|(k, v)| match v {
                Val::Str(s) => Ok((k.clone(), s.clone())),
                Val::Sealed(s) => Ok((k.clone(), s.value.clone())),
                other => Err(fail(format!("`env.{k}` is {other:?}, not a string"))),
            })
            .collect::<Result<_, _>>()?,
        Some(other) => Err(fail(format!("`env` is {other:?}, not a record")))?,
    };
    let timeout_secs = match attrs.get("timeout") {
        Some(Val::Int(n)) => u64::try_from(*n).unwrap_or(600),
        _ => 600,
    };
    let spec = ExecSpec {
        name: node.name.clone(),
        command: CommandLine {
            argv,
            env,
            user: text("user")?.filter(|u| !u.is_empty()),
            cwd: text("cwd")?.unwrap_or_else(|| "/".into()),
            timeout_secs,
        },
        stdin: text("stdin")?.unwrap_or_default().into_bytes(),
        creates: text("creates")?,
        unless: strs("unless")?,
        only_if: strs("only_if")?,
        capture: matches!(attrs.get("capture"), Some(Val::Bool(true))),
        undo: strs("undo")?,
        inputs: String::new(),
        previous: None,
    };
    spec.validate().map_err(fail)?;
    // The record keeps the undo with the env: it must hold no secret (the compiler says so
    // first).
    if spec.undo.is_some() && attrs.get("env").is_some_and(holds_sealed) {
        return Err(fail(
            "an exec with an `undo` cannot take a secret in `env`".into(),
        ));
    }
    Ok(spec)
}

/// A node's checks with what their deferred values read substituted.
/// Where the `.deb`s a package's pin names come from: the package itself, then its
/// closure, each found in the lockfile with the version and hash the node was compiled with.
fn pinned_debs(spec: &Spec, node: &NodeSpec, pin: &PackageValue) -> Result<Vec<DebSource>, String> {
    let root = ClosureDeb {
        name: node.name.clone(),
        version: pin.version.clone(),
        sha256: pin.sha256.clone(),
    };
    let what = format!("`{}`", node.key);
    crate::debs::pinned(
        &spec.debs,
        std::iter::once(&root).chain(&pin.closure),
        &what,
    )
}

fn resolve_checks(node: &NodeSpec, r: &Resolver) -> Result<Vec<CheckSpec>, Resolution> {
    node.checks
        .iter()
        .map(|c| {
            Ok(CheckSpec {
                phase: c.phase,
                kind: c.kind,
                args: c
                    .args
                    .iter()
                    .map(|(k, v)| Ok((k.clone(), r.substitute(v)?)))
                    .collect::<Result<_, Resolution>>()?,
                location: c.location.clone(),
            })
        })
        .collect()
}

/// A check as written, its deferred values named (`${web-0.address}`): what a plan shows
/// before they are known.
pub fn describe_decl(spec: &Spec, c: &CheckDecl) -> String {
    fn name(spec: &Spec, v: &Val) -> String {
        match v {
            Val::Output { node, output } => format!("${{{}.{output}}}", spec.nodes[*node].name),
            Val::Concat(parts) => parts
                .iter()
                .map(|p| match p {
                    Val::Str(s) => s.clone(),
                    Val::Int(n) => n.to_string(),
                    other => name(spec, other),
                })
                .collect(),
            other => format!("{other:?}"),
        }
    }
    crate::checks::describe(c.kind, &c.args, &|v| name(spec, v))
}

fn file_content(
    node: &NodeSpec,
    attrs: &BTreeMap<String, Val>,
    spec: &Spec,
    files: &dyn SourceLoader,
) -> Result<Vec<u8>, Resolution> {
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
                    fail(e)
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

/// Renders a minijinja template strictly: an undefined variable is an error, not an empty
/// string.
pub fn render_template(path: &str, text: &str, vars: &Json) -> Result<Vec<u8>, String> {
    let mut env = minijinja::Environment::new();
    env.set_undefined_behavior(minijinja::UndefinedBehavior::Strict);
    // An undefined value's error names it only in debug mode, which minijinja turns on
    // only in debug builds: the binary that ships must say `missing`, not just "undefined".
    env.set_debug(true);
    // Fuel bounds loops, so a template cannot hang a build.
    env.set_fuel(Some(50_000_000));
    if let Ok(syntax) = minijinja::syntax::SyntaxConfig::builder()
        .keep_trailing_newline(true)
        .build()
    {
        env.set_syntax(syntax);
    }
    let describe = |e: minijinja::Error| {
        let line = e.line().map_or(String::new(), |l| format!(":{l}"));
        format!(
            "template `{path}{line}`: {}",
            e.detail().unwrap_or(&e.kind().to_string())
        )
    };
    env.add_template(path, text).map_err(describe)?;
    let t = env.get_template(path).map_err(describe)?;
    t.render(jinja_value(vars))
        .map(String::into_bytes)
        .map_err(describe)
}

fn jinja_value(j: &Json) -> minijinja::Value {
    use minijinja::Value as V;
    match j {
        Json::Null => V::from(()),
        Json::Bool(b) => V::from(*b),
        Json::Number(n) => n.as_i64().map_or_else(|| V::from(n.to_string()), V::from),
        Json::String(s) => V::from(s.as_str()),
        Json::Array(xs) => V::from(xs.iter().map(jinja_value).collect::<Vec<_>>()),
        Json::Object(m) => V::from(
            m.iter()
                .map(|(k, v)| (k.clone(), jinja_value(v)))
                .collect::<BTreeMap<String, V>>(),
        ),
    }
}

/// An output of the environment as JSON, deferred values substituted where their producer
/// is known (`null` where it is not).
pub fn output_json<'a>(
    spec: &'a Spec,
    v: &Val,
    known: &'a dyn Fn(usize) -> Option<&'a Known>,
) -> Json {
    let r = Resolver { spec, known };
    match r.substitute(v) {
        Ok(v) => shown_json(&v, spec),
        Err(_) => Json::Null,
    }
}

/// [`template_json`], for people: a secret shows as `<secret>`.
fn shown_json(v: &Val, spec: &Spec) -> Json {
    match v {
        Val::Sealed(_) => json!("<secret>"),
        Val::List(xs) => Json::Array(xs.iter().map(|x| shown_json(x, spec)).collect()),
        Val::Record(r) => Json::Object(
            r.iter()
                .map(|(k, x)| (k.clone(), shown_json(x, spec)))
                .collect(),
        ),
        other => template_json(other, spec),
    }
}
