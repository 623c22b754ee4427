//! The contract every node kind meets. A kind is one module (`kinds/KIND/`) that implements
//! [`NodeType`] for the kind and [`Realize`] for its resolved payload, and one line in
//! `kinds::node_type` that registers it. The engine (resolution, the scheduler, deletion,
//! drift, the controller's tools) asks the registry and never matches on a kind itself.

use std::any::Any;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::Path;
use std::sync::Arc;

use envc_ids::{NodeKind, ResolvedHash};

use crate::cache::CacheUse;
use crate::connect::Connections;
use crate::debs::DebSource;
use crate::error::StepError;
pub use crate::future::BoxFuture;
use crate::machines::Machines;
use crate::record::{Applied, CommandLine, CommandLog, DriftFacts, Facts, RealizationRecord};
use crate::secrets::Secrets;
use crate::spec::{NodeSpec, Spec, Val};
use crate::store::{ObjectId, Store};
use crate::substitute::{Resolution, Resolving};
use crate::tools::Tool;
use crate::transport::{HostKey, HostSpec, SshOptions, Transport, TransportError};

/// A resolved node's typed payload: what executing it needs (a file's bytes and mode, a
/// package's pinned `.deb`s, a VM's size and image).
pub type Payload = Arc<dyn Realize>;

/// What the executor does for the nodes of one kind, apart from running a resolved one
/// (that is [`Realize`], on its payload).
pub trait NodeType: Sync {
    fn kind(&self) -> NodeKind;

    /// The node's payload from its substituted attributes, putting each attribute that
    /// determines it into `r`'s hashed (and shown) attributes.
    fn resolve(&self, r: &mut Resolving<'_>) -> Result<Payload, Resolution>;

    /// The value of output `output` of `producer`, a node of this kind, from the facts it
    /// reported (what a deferred value `${producer.output}` becomes). Most kinds report an
    /// output as the fact of its name.
    fn read_output(
        &self,
        producer: &NodeSpec,
        output: &str,
        facts: &Facts,
    ) -> Result<Val, Resolution> {
        crate::substitute::read_fact(producer, output, output, facts)
    }

    /// What the lockfile must pin for `node`, a node of this kind: its packages, images,
    /// cloud images and the tools that build and reach it, added to `cx.needs`; what
    /// cannot be pinned as declared goes to `cx.conflicts`.
    fn lock_needs(&self, _node: &NodeSpec, _cx: &mut LockNeeds<'_>) {}

    /// The programs this machine runs to realize a node of this kind (targets reached over
    /// SSH need only the `ssh` client, which every run already depends on).
    fn tools(&self) -> &'static [Tool] {
        &[]
    }

    /// The programs this machine runs to realize this node (a cloud machine needs no
    /// QEMU).
    fn tools_for(&self, _node: &NodeSpec) -> &'static [Tool] {
        self.tools()
    }

    /// Whether a change of the node replaces it (a new machine, so a new target identity
    /// and everything on it anew), rather than updating it in place. `old` and `new` are
    /// its attributes as recorded and as resolved now (`None`: not known yet).
    fn replaced_by(
        &self,
        _old: &BTreeMap<String, String>,
        _new: Option<&BTreeMap<String, String>>,
    ) -> bool {
        false
    }

    /// What an update in place does that a reader of the plan must know (a machine that
    /// restarts), given its attributes as recorded and as resolved now.
    fn update_note(
        &self,
        _old: &BTreeMap<String, String>,
        _new: &BTreeMap<String, String>,
    ) -> Option<&'static str> {
        None
    }

    /// Whether what it reported stands when it is updated (a host that moved is the same
    /// machine: a different key is an error unless trusted anew).
    fn update_keeps_facts(&self) -> bool {
        false
    }

    /// Whether such a node is a machine envc makes and boots (a VM): `envc verify`'s lab
    /// counts them as its boot, and a machine envc only reaches (a host) is stood in for
    /// by one.
    fn boots(&self) -> bool {
        false
    }

    /// For a machine nodes are deployed onto: how to reach it from its record, when its
    /// node is not in the graph to say (what is on it is removed, read back, rolled back).
    fn reach_record(
        &self,
        _name: &str,
        _record: &RealizationRecord,
        _cx: &Connections,
    ) -> Option<HostSpec> {
        None
    }

    /// Whether `--trust-host-key NAME` updates such a node that is otherwise unchanged:
    /// trusting a new key means contacting the machine to learn it.
    fn renews_trust(&self) -> bool {
        false
    }

    /// Whether a plan shows what such a node would be while values it needs are still
    /// pending (an object's YAML, with placeholders where they go).
    fn previewed(&self) -> bool {
        false
    }

    /// When what is on it goes with it as it leaves (a VM's disk holds it all): what is
    /// said of each such thing.
    fn takes_along(&self) -> Option<&'static str> {
        None
    }

    /// Facts that say which machine this is or where envc reaches it: a lab machine that
    /// `envc verify` boots has its own, so they are expected to differ from production's.
    fn identity_facts(&self) -> &'static [&'static str] {
        &[]
    }

    /// Facts that follow from what it ran with (a command's inputs and output): in a lab
    /// they are expected to differ wherever its attributes took the lab's own values.
    fn run_facts(&self) -> &'static [&'static str] {
        &[]
    }

    /// What envc sees of a record without contacting anything: a VM whose QEMU no longer
    /// runs, an image whose files left the store. Cheap, so plans and builds always look.
    fn local_drift(&self, _record: &RealizationRecord, _cx: &Local<'_>) -> Option<DriftFacts> {
        None
    }

    /// What asking elsewhere than a target finds differs from a record that has no target
    /// (a cloud machine, from its cloud's API): for `drift` and `--refresh`, never a plan.
    fn remote_drift<'a>(
        &'a self,
        _record: &'a RealizationRecord,
        _machines: &'a Machines,
    ) -> Option<BoxFuture<'a, Result<DriftFacts, StepError>>> {
        None
    }

    /// When records of this kind are read back from their target to find drift: how (a
    /// command leaves nothing to read; what a repository holds is read back through it,
    /// [`NodeType::holds`]).
    fn reads_back(&self) -> Option<&dyn ReadsBack> {
        None
    }

    /// When a node of this kind, without being a machine, holds what other nodes are
    /// delivered to (a repository holds the objects committed to it): how. The records on
    /// it are read back through it, not by their own kind.
    fn holds(&self) -> Option<&dyn Holds> {
        None
    }

    /// When what it put on a target is removed from there as its node leaves the graph:
    /// how.
    fn removable(&self) -> Option<&dyn Removable> {
        None
    }

    /// What is said of a record of a node envc found in place and so did not create.
    fn left_in_place(&self) -> &'static str {
        "left in place: envc did not create it"
    }

    /// For a record without a target (a machine, an image) whose node left the graph: what
    /// is done about it, or `None` to forget it once nothing envc put on it is left.
    fn retire<'a>(
        &'a self,
        _machines: &'a Machines,
        _record: &'a RealizationRecord,
    ) -> Option<BoxFuture<'a, Result<String, StepError>>> {
        None
    }

    /// For a record an `adopt` line took over whose node left the graph (and `destroy`
    /// without `--remove-adopted`): lets go of it as it was found, or `None` when the kind
    /// retires adopted records like its own.
    fn release<'a>(
        &'a self,
        _machines: &'a Machines,
        _record: &'a RealizationRecord,
    ) -> Option<BoxFuture<'a, Result<String, StepError>>> {
        None
    }

    /// On `destroy`: removes what the kind made that no record knows (a VM whose creation
    /// failed before its record), keeping the names in `recorded`.
    fn sweep<'a>(
        &'a self,
        _machines: &'a Machines,
        _recorded: &'a BTreeSet<String>,
    ) -> Option<BoxFuture<'a, Result<(), StepError>>> {
        None
    }

    /// How what it put on a target is put back as a record had it (`envc rollback --to`,
    /// the automatic rollback of a failed update), or `None` when it is not rolled back.
    fn restores(&self) -> Option<&dyn Restores> {
        None
    }

    /// How the binary cache shares what nodes of this kind build (an image), or `None` when
    /// they build nothing a cache would hold.
    fn cached(&self) -> Option<&dyn Cached> {
        None
    }

    /// A node renamed by a `moved` declaration (to `name`): what its record's facts are once
    /// what envc keeps of it here follows the new name (a QEMU VM's directory). Nothing on
    /// the target changes. Most kinds keep nothing by name: the facts as they were.
    fn moved(
        &self,
        _machines: &Machines,
        record: &RealizationRecord,
        _name: &str,
    ) -> Result<Facts, StepError> {
        Ok(record.facts.clone())
    }
}

/// What `envc lock` gathers from every node (`NodeType::lock_needs`).
pub struct LockNeeds<'a> {
    pub spec: &'a Spec,
    pub needs: &'a mut envc_lockfiles::Needs,
    pub conflicts: &'a mut Vec<String>,
    /// The node is the lab's (a host's base, which `envc verify` rebuilds): what builds it
    /// is the lab's, not pinned for a build of production.
    pub lab: bool,
}

impl LockNeeds<'_> {
    /// A tool whose version the lock pins (`envc_lockfiles::probe`).
    pub fn tool(&mut self, name: &str) {
        self.needs.tools.insert(name.into());
    }

    /// What cannot be pinned as declared.
    pub fn conflict(&mut self, why: impl fmt::Display) {
        self.conflicts.push(why.to_string());
    }
}

/// A kind whose outputs are build products, shared through the binary cache by the
/// resolved hash that built them.
pub trait Cached: Sync {
    /// Whether a build looks `node` up in the cache: only what the lockfile pins is the
    /// same bits on every machine.
    fn looked_up(&self, node: &NodeSpec) -> bool;

    /// The store objects a record's facts name: all of them come with an entry, or none.
    fn objects(&self, facts: &Facts) -> Vec<ObjectId>;
}

/// A kind whose things on a target are read back from it to find drift (a file's bytes, a
/// package's version, a service's state).
pub trait ReadsBack: Sync {
    /// The facts of records of this kind on `t` (by node name, in order; `None` for an item
    /// that is gone), in one visit.
    fn probe<'a>(
        &'a self,
        t: &'a Transport,
        names: &'a [String],
    ) -> BoxFuture<'a, Result<Vec<Option<Facts>>, ProbeError>>;
}

/// A kind whose things are removed from their target when their node leaves the graph.
pub trait Removable: Sync {
    /// Its turn when what left the graph is removed from a target, lower first (a
    /// command's undo may need the files and services removed after it).
    fn removal_rank(&self) -> u8;

    /// Why a record it created is forgotten without reaching its target (a command without
    /// an undo), or `None` when it is removed there.
    fn forgotten(&self, _record: &RealizationRecord) -> Option<&'static str> {
        None
    }

    /// Removes from the target `cx` reaches the things of `records` (each with its node's
    /// name), in one batch where the kind can: per record, what was done or why not.
    fn remove<'a>(
        &'a self,
        cx: &'a Removing<'a>,
        records: Vec<(&'a RealizationRecord, String)>,
    ) -> BoxFuture<'a, Vec<Removal>>;
}

/// A kind whose node holds what other nodes are delivered to (a repository, the objects
/// committed to it). The engine gathers the objects of one holder and asks it for the one
/// step that delivers them all, and for their removal when they leave.
pub trait Holds: Sync {
    /// Whether every build reads back what such a node holds before it decides, not only
    /// `drift` and `--refresh`: a repository is shared with whoever may push to it (a
    /// force-push, a colleague's commit), and reading it back is one fetch.
    fn read_on_every_build(&self) -> bool {
        false
    }

    /// Reads back what the node of `record` holds (`held`: each record with its node's
    /// name), in one read through the connection to the machine the node is on: facts per
    /// item, in order, `None` for one that is gone.
    fn probe_held<'a>(
        &'a self,
        cx: &'a Probing<'a>,
        record: &'a RealizationRecord,
        held: &'a [(String, &'a RealizationRecord)],
    ) -> BoxFuture<'a, Result<Vec<Option<Facts>>, ProbeError>>;

    /// The holder as its record says it was, for one that left the graph.
    fn holder_of_record(&self, record: &RealizationRecord) -> Option<Payload>;

    /// The one step that delivers `objects` (node, file, text) to the holder `payload`.
    fn deliver(
        &self,
        payload: &Payload,
        objects: Vec<(usize, String, String)>,
        delivery: Delivery,
    ) -> Option<Box<dyn Step>>;

    /// Removes from the holder `payload`, reached by `t`, what `records` delivered: per
    /// record, what was done or why not.
    fn undeliver<'a>(
        &'a self,
        t: &'a Transport,
        payload: &'a Payload,
        delivery: &'a Delivery,
        work_dir: &'a Path,
        records: &'a [RealizationRecord],
    ) -> BoxFuture<'a, Vec<Result<String, StepError>>>;

    /// What is said of an object that left, removed by the delivery of this run that
    /// made `commit`.
    fn removed_in(&self, commit: &str) -> String;
}

/// One delivery to a holder: what to write, what the environment has there, and who is
/// delivering.
#[derive(Clone, Debug)]
pub struct Delivery {
    /// Objects to write: file name (relative to the holder's directory), text.
    pub write: Vec<(String, String)>,
    /// Every object the environment delivers there now, by file name, with its text where
    /// this run knows it: listed files not among them are removed, and one the holder lost
    /// is written again (`kustomize::apply`).
    pub keep: BTreeMap<String, Option<String>>,
    /// The environment (the kustomization's owner and the commit's subject).
    pub environment: String,
    pub run: String,
    /// The commit of the environment's source, when it is in a git work tree.
    pub source: Option<String>,
}

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
    /// What envc made it since, from its record (or, for a removal, its intent): a file is
    /// removed only while it holds that; the packages of a package's closure that it moved
    /// are moved back.
    pub written: Option<RealizationRecord>,
}

/// A kind whose things on a target are put back from the store alone, as records had them.
pub trait Restores: Sync {
    /// Its turn among the kinds put back on one target, lower first (packages, so that
    /// their files do not overwrite the files put back after them; services last, started
    /// again once what they read is as it was).
    fn restore_rank(&self) -> u8;

    /// Puts `items` back on `t`, in one batch where the kind can: one result per item, in
    /// the order given.
    fn restore<'a>(
        &'a self,
        t: &'a Transport,
        store: &'a Store,
        items: &'a [&'a Restore],
    ) -> BoxFuture<'a, Vec<Result<String, StepError>>>;

    /// Why the record of `name` cannot be gone back to at all (it kept nothing to put
    /// back), or `None`.
    fn not_restorable(&self, _name: &str, _record: &RealizationRecord) -> Option<String> {
        None
    }

    /// The pinned `.deb`s putting `record` back installs, once each object it names reads
    /// whole from the store (else which one does not, and why): what a rollback checks for
    /// every item before it touches a target, and `store verify` for every run.
    fn kept(&self, _: &str, _: &RealizationRecord, _: &Store) -> Result<Vec<DebSource>, StepError> {
        Ok(Vec::new())
    }

    /// Whether a failed update of it is rolled back even when no postcondition failed (a
    /// service that did not start is the failure).
    fn failure_rolls_back(&self) -> bool {
        false
    }

    /// Whether it is put back too, once it ran, when something it reads is (a service is
    /// started again on the files put back).
    fn follows_inputs(&self) -> bool {
        false
    }
}

/// A resolved node of some kind, as the scheduler runs it.
pub trait Realize: PayloadValue + fmt::Debug + Send + Sync {
    /// The facts a successful realization will observe, when they can be known beforehand
    /// (a file's content hash, a pinned package version). Plans use them to resolve
    /// dependents before anything runs.
    fn predicted_facts(&self) -> Option<Facts> {
        None
    }

    /// What an `adopt` line expects to find on the target, as the kind's probe reads it:
    /// the facts the source declares (a file's content hash, owner and mode; a pinned
    /// package's version; a service enabled and running).
    fn adopt_facts(&self) -> Option<Facts> {
        self.predicted_facts()
    }

    /// For a machine an `adopt` line takes over: finds it where `from` says and logs in,
    /// changing nothing on it; with `cx.take`, also makes it this node's (what its
    /// provider keeps of a machine). `None`: this kind of payload is not adopted this way.
    fn find_adopted<'a>(
        &'a self,
        _from: &'a BTreeMap<String, String>,
        _cx: Adopting<'a>,
    ) -> Option<BoxFuture<'a, Result<Adopted, StepError>>> {
        None
    }

    /// For a machine whose address the source declares (a host): where it is, known
    /// before anything runs.
    fn address(&self) -> Option<&HostSpec> {
        None
    }

    /// For a machine nodes are deployed onto: how to reach it, given what it reported.
    fn reach(&self, _name: &str, _facts: Option<&Facts>, _cx: &Connections) -> Option<HostSpec> {
        None
    }

    /// Why it cannot run in a build at all (a Kubernetes object without a repository).
    fn not_run(&self, _node: &NodeSpec) -> Option<String> {
        None
    }

    /// The file name and canonical text it is written as, when it is an object delivered
    /// to a repository or rendered into a directory (a Kubernetes manifest).
    fn rendered(&self) -> Option<(String, String)> {
        None
    }

    /// How the scheduler runs it.
    fn launch(&self, cx: &Launching<'_>) -> Launch;

    /// Bytes the record cannot hold that putting the thing back needs, kept as an object
    /// in the store that the record names (`RealizationRecord::content`): a file's content,
    /// a locked package's pinned `.deb`s (`crate::debs::KeptDebs`, as JSON). `None` for
    /// kinds a record describes whole, and for what must never be stored (a secret).
    fn kept(&self) -> Option<std::borrow::Cow<'_, [u8]>> {
        None
    }

    /// What undoes it when it leaves the graph, kept in its record (a command's `undo`).
    fn undo(&self) -> Option<CommandLine> {
        None
    }
}

/// What every payload is as a value (given to each by the blanket implementation).
pub trait PayloadValue {
    fn as_any(&self) -> &dyn Any;
}

impl<T: Realize + 'static> PayloadValue for T {
    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// The payload of a node of the kind whose payload is a `T`.
pub fn payload_of<T: 'static>(p: &Payload) -> Option<&T> {
    p.as_any().downcast_ref::<T>()
}

/// What a kind knows when its node is launched.
pub struct Launching<'a> {
    pub node: usize,
    pub spec: &'a NodeSpec,
    pub hash: &'a ResolvedHash,
    /// Its resolved attributes as people read them.
    pub display: &'a BTreeMap<String, String>,
    /// Its record, wherever it was made.
    pub record: Option<&'a RealizationRecord>,
    /// Its record when it was made on the target it is on now.
    pub record_here: Option<&'a RealizationRecord>,
    /// Whether node `j` ran (changed something) in this run.
    pub ran_now: &'a dyn Fn(usize) -> bool,
    pub cache: Option<&'a CacheUse>,
    /// The `adopt` line that takes this machine over, in this run.
    pub adopt: Option<&'a crate::spec::AdoptSpec>,
}

/// What finding an adopted machine may use.
#[derive(Clone, Copy)]
pub struct Adopting<'a> {
    pub machines: &'a Machines,
    pub ssh: &'a SshOptions,
    /// The node's tags (a cloud machine is tagged with them, as if envc had made it).
    pub tags: &'a BTreeMap<String, String>,
    /// Make it the node's (at build), or only look (at plan).
    pub take: bool,
}

/// A machine an `adopt` line named, found.
pub struct Adopted {
    pub facts: Facts,
    pub transport: Transport,
    pub host_key: HostKey,
    /// (what, the source's, found): shown, not changed (a running machine is not
    /// resized or re-imaged by adopting it).
    pub differences: DriftFacts,
    /// How it was found (`QEMU pid 4242`, `instance i-0abc, running`).
    pub how: String,
}

/// How a launched node runs.
pub enum Launch {
    /// By itself, on no target: a machine, an image, a read.
    Alone(Box<dyn Unit>),
    /// On its target, in one step with others there when its kind batches.
    OnTarget(Box<dyn Step>),
    /// Committed to its repository with the other objects delivered there.
    Deliver { file: String, yaml: String },
}

/// What a node that runs alone may use.
pub struct UnitCx<'a> {
    pub conns: &'a Connections,
    pub machines: &'a Machines,
    pub store: &'a Store,
}

/// A node that runs alone.
pub trait Unit: Send {
    fn run<'a>(self: Box<Self>, cx: UnitCx<'a>) -> BoxFuture<'a, Result<Applied, StepError>>;
}

/// What a step on a target may use.
pub struct StepCx<'a> {
    pub transport: &'a Transport,
    pub host_key: &'a HostKey,
    pub store: &'a Store,
    /// Where envc keeps its own working files on this machine (clones of repositories).
    pub work_dir: &'a Path,
}

/// What every step is as a value (given to each by the blanket implementation).
pub trait StepValue {
    fn as_any(&self) -> &dyn Any;
    fn into_any(self: Box<Self>) -> Box<dyn Any + Send>;
    fn into_step(self: Box<Self>) -> Box<dyn Step>;
}

impl<T: Step + 'static> StepValue for T {
    fn as_any(&self) -> &dyn Any {
        self
    }

    fn into_any(self: Box<Self>) -> Box<dyn Any + Send> {
        self
    }

    fn into_step(self: Box<Self>) -> Box<dyn Step> {
        self
    }
}

/// One remote operation on a target, for one node or a batch of them.
pub trait Step: StepValue + Send + 'static {
    /// The nodes it realizes.
    fn nodes(&self) -> Vec<usize>;

    /// The step without the nodes in `gone` (`None` when none is left); a step of one node
    /// needs no more than this.
    fn without(self: Box<Self>, gone: &BTreeSet<usize>) -> Option<Box<dyn Step>> {
        let left = !self.nodes().iter().any(|i| gone.contains(i));
        left.then(|| self.into_step())
    }

    /// Takes `other` into this step (one remote operation for both), or hands it back.
    fn absorb(&mut self, other: Box<dyn Step>) -> Option<Box<dyn Step>> {
        Some(other)
    }

    /// Whether its nodes are first looked for on the target when envc does not know them
    /// as its own: one found absent gets an intent before the step may create it.
    fn probes(&self) -> bool {
        false
    }

    /// Which of `nodes` are absent from the target, and the step to run then (one that
    /// keeps what it learnt, so that it does not ask again).
    fn absent<'a>(
        self: Box<Self>,
        _t: &'a Transport,
        _nodes: &'a [usize],
    ) -> BoxFuture<'a, Result<Absent, StepError>> {
        Box::pin(async move { Ok((Vec::new(), self.into_step())) })
    }

    /// What the intent of node `i`, found absent, records of it.
    fn intent_facts(&self, _i: usize) -> Facts {
        Facts::new()
    }

    fn run<'a>(
        self: Box<Self>,
        cx: StepCx<'a>,
    ) -> BoxFuture<'a, Vec<(usize, Result<Applied, StepError>)>>;
}

/// The nodes of a step found absent, and the step to run then.
pub type Absent = (Vec<usize>, Box<dyn Step>);

/// `Step::absorb` for a kind whose steps of one type merge by `merge`.
pub fn absorb_same<T: Step + 'static>(
    this: &mut T,
    other: Box<dyn Step>,
    merge: impl FnOnce(&mut T, T),
) -> Option<Box<dyn Step>> {
    if !other.as_any().is::<T>() {
        return Some(other);
    }
    match other.into_any().downcast::<T>() {
        Ok(o) => {
            merge(this, *o);
            None
        }
        // `is` said it is a `T`.
        Err(_) => None,
    }
}

/// Why a probe of some records could not look.
#[derive(Clone, Debug)]
pub enum ProbeError {
    /// The target: nothing more is asked of it.
    Target(TransportError),
    /// Only the records of this kind (no systemd on the host, for services).
    Kind(String),
}

impl From<TransportError> for ProbeError {
    fn from(e: TransportError) -> ProbeError {
        ProbeError::Target(e)
    }
}

impl From<StepError> for ProbeError {
    fn from(e: StepError) -> ProbeError {
        ProbeError::Kind(e.to_string())
    }
}

/// What reading back what a node holds may use.
pub struct Probing<'a> {
    /// The connection to the machine the node is on.
    pub transport: &'a Transport,
    /// Where envc keeps its own working files on this machine (scratch repositories).
    pub work_dir: &'a Path,
    /// The environment (a kustomization names the one that wrote it).
    pub environment: &'a str,
}

/// What local drift may look at.
pub struct Local<'a> {
    pub store: &'a Store,
    pub machines: &'a Machines,
}

/// What removing from a target may use.
pub struct Removing<'a> {
    pub transport: &'a Transport,
    pub secrets: Option<&'a Secrets>,
}

/// What removing one record did, or why it did not.
pub struct Removal {
    pub node: String,
    pub result: Result<String, StepError>,
    pub log: Option<CommandLog>,
}

impl Removal {
    pub fn said(r: &RealizationRecord, said: &str) -> Removal {
        Removal {
            node: r.node.clone(),
            result: Ok(said.to_string()),
            log: None,
        }
    }

    pub fn of(r: &RealizationRecord, result: Result<String, StepError>) -> Removal {
        Removal {
            node: r.node.clone(),
            result,
            log: None,
        }
    }
}
