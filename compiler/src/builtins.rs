//! Built-in functions: the node constructors (`vm`, `host`, `package`, `file`, `service`,
//! `manifest`, `image`, `exec`), the check constructors (`tcp`, `http`, `command`, …) and a small
//! library of pure functions. Their signatures live here only; the
//! checker and the evaluator both read them.

use std::rc::Rc;

use crate::types::{CheckKind, FieldTy, FnTy, NodeKind, NodeTy, ParamTy, RecordTy, Ty};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Builtin {
    Node(NodeKind),
    Check(CheckKind),
    Len,
    Keys,
    Values,
    Join,
    Split,
    Contains,
    StartsWith,
    EndsWith,
    Upper,
    Lower,
    Trim,
    Replace,
    ToStr,
    Sort,
    Merge,
    Path,
    ToJson,
    Secret,
    All,
    Any,
    Min,
    Max,
    Read,
    Get,
    Nodes,
}

pub const FUNCTIONS: &[(&str, Builtin)] = &[
    ("len", Builtin::Len),
    ("keys", Builtin::Keys),
    ("values", Builtin::Values),
    ("join", Builtin::Join),
    ("split", Builtin::Split),
    ("contains", Builtin::Contains),
    ("starts_with", Builtin::StartsWith),
    ("ends_with", Builtin::EndsWith),
    ("upper", Builtin::Upper),
    ("lower", Builtin::Lower),
    ("trim", Builtin::Trim),
    ("replace", Builtin::Replace),
    ("str", Builtin::ToStr),
    ("sort", Builtin::Sort),
    ("merge", Builtin::Merge),
    ("path", Builtin::Path),
    ("to_json", Builtin::ToJson),
    ("all", Builtin::All),
    ("any", Builtin::Any),
    ("min", Builtin::Min),
    ("max", Builtin::Max),
    ("read", Builtin::Read),
    ("get", Builtin::Get),
    ("secret", Builtin::Secret),
    ("nodes", Builtin::Nodes),
];

pub fn lookup(name: &str) -> Option<Builtin> {
    if let Some(k) = NodeKind::from_name(name) {
        return Some(Builtin::Node(k));
    }
    if let Some(k) = CheckKind::from_name(name) {
        return Some(Builtin::Check(k));
    }
    FUNCTIONS.iter().find(|(n, _)| *n == name).map(|(_, b)| *b)
}

/// Names people reach for from other languages, and the builtin that does it: an unknown
/// name close to one of these suggests the builtin (`lenght` → `len`).
pub const ALIASES: &[(&str, &str)] = &[
    ("length", "len"),
    ("size", "len"),
    ("count", "len"),
    ("includes", "contains"),
    ("has", "contains"),
    ("startswith", "starts_with"),
    ("endswith", "ends_with"),
    ("to_upper", "upper"),
    ("to_lower", "lower"),
    ("uppercase", "upper"),
    ("lowercase", "lower"),
    ("strip", "trim"),
    ("to_string", "str"),
    ("tostring", "str"),
    ("sorted", "sort"),
    ("minimum", "min"),
    ("maximum", "max"),
    ("every", "all"),
    ("some", "any"),
    ("read_file", "read"),
    ("lookup", "get"),
    ("file_content", "read"),
];

/// The builtin an unknown `name` most likely meant through [`ALIASES`]: exactly, or a typo
/// of one.
pub fn alias_of(name: &str) -> Option<&'static str> {
    let alias = match ALIASES.iter().find(|(a, _)| *a == name) {
        Some((a, _)) => *a,
        None => envc_lang::closest(name, ALIASES.iter().map(|(a, _)| *a))?,
    };
    ALIASES.iter().find(|(a, _)| *a == alias).map(|(_, b)| *b)
}

pub fn names() -> impl Iterator<Item = &'static str> {
    NodeKind::ALL
        .iter()
        .map(|k| k.name())
        .chain(CheckKind::ALL.iter().map(|k| k.name()))
        .chain(FUNCTIONS.iter().map(|(n, _)| *n))
}

/// A node attribute's default, stored into the node (and so into its hash) when omitted.
#[derive(Clone, Copy, Debug)]
pub enum Default {
    Int(i64),
    Str(&'static str),
    Bool(bool),
    Size(u64),
    Mode(u32),
    EmptyList,
    EmptyRecord,
}

pub struct AttrSchema {
    pub name: &'static str,
    pub ty: fn() -> Ty,
    pub required: bool,
    pub default: Option<Default>,
}

/// An output's name and type.
pub type OutputSchema = (&'static str, fn() -> Ty);

/// What a node kind is deployed onto.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TargetSlot {
    /// Nothing: it is a target itself (`vm`, `host`) or built (`image`).
    None,
    /// A machine, `vm` or `host`: required.
    Machine,
    /// A `gitops` repository it is delivered to: optional (without one, a `manifest` is
    /// only rendered).
    Repo,
}

impl TargetSlot {
    pub fn ty(self) -> Option<Ty> {
        match self {
            TargetSlot::None => None,
            TargetSlot::Machine => Some(t_target()),
            TargetSlot::Repo => Some(Ty::Node(NodeTy::Kind(NodeKind::Gitops))),
        }
    }
}

pub struct NodeSchema {
    pub kind: NodeKind,
    /// The attribute that names the node (`path` for files).
    pub name_attr: &'static str,
    /// What it is deployed onto: its `target` attribute.
    pub target: TargetSlot,
    pub attrs: &'static [AttrSchema],
    /// Values known only after realization: `vm.address`.
    pub outputs: &'static [OutputSchema],
    /// Any other field is an output too, a deferred string: the attributes a resource's
    /// provider answers, which its schema, not envc's, names.
    pub open_outputs: bool,
    pub doc: &'static str,
}

const fn attr(
    name: &'static str,
    ty: fn() -> Ty,
    required: bool,
    default: Option<Default>,
) -> AttrSchema {
    AttrSchema {
        name,
        ty,
        required,
        default,
    }
}

fn t_str() -> Ty {
    Ty::Str
}
fn t_bool() -> Ty {
    Ty::Bool
}
fn t_path() -> Ty {
    Ty::Path
}
fn t_port() -> Ty {
    Ty::Ranged(Rc::new(Ty::Int), 1, 65535)
}
fn t_cpus() -> Ty {
    Ty::Ranged(Rc::new(Ty::Int), 1, 64)
}
fn t_memory() -> Ty {
    Ty::Ranged(Rc::new(Ty::Size), 64 << 20, 1 << 40)
}
fn t_disk() -> Ty {
    Ty::Ranged(Rc::new(Ty::Size), 256 << 20, 16 << 40)
}
fn t_mode() -> Ty {
    Ty::Mode
}
fn t_nodes() -> Ty {
    Ty::list(Ty::Node(NodeTy::Any))
}
fn t_vars() -> Ty {
    Ty::Dict(Rc::new(Ty::Unknown))
}
/// A vendor's apt archive (`debian.vendor_archive`): where it is, and the key it is signed
/// with, pinned by fingerprint.
fn t_archive() -> Ty {
    let field = |ty: Ty| FieldTy { ty, default: None };
    Ty::Record(Rc::new(RecordTy {
        name: Some("archive".into()),
        fields: [
            ("name", field(Ty::Str)),
            ("url", field(Ty::Str)),
            ("suite", field(Ty::Str)),
            ("components", field(Ty::list(Ty::Str))),
            ("key", field(Ty::Path)),
            ("fingerprint", field(Ty::Str)),
        ]
        .into_iter()
        .map(|(k, v)| (k.into(), v))
        .collect(),
    }))
}
/// Where a `vm` runs when not on this machine (`std/aws` makes it): the cloud, the region,
/// the machine's size, the image pattern the lockfile pins per region, and the network.
fn t_cloud() -> Ty {
    let field = |ty: Ty| FieldTy { ty, default: None };
    let record = |name: &str, fields: Vec<(&str, Ty)>| {
        Ty::Record(Rc::new(RecordTy {
            name: Some(name.into()),
            fields: fields
                .into_iter()
                .map(|(k, v)| (k.into(), field(v)))
                .collect(),
        }))
    };
    record(
        "cloud",
        vec![
            ("provider", Ty::Str),
            ("region", Ty::Str),
            ("instance_type", Ty::Str),
            ("public_address", Ty::Bool),
            (
                "image",
                record(
                    "cloud image",
                    vec![
                        ("name", Ty::Str),
                        ("owner", Ty::Str),
                        ("pattern", Ty::Str),
                        ("architecture", Ty::Str),
                        ("suite", Ty::Str),
                    ],
                ),
            ),
            (
                "network",
                record(
                    "cloud network",
                    vec![
                        ("name", Ty::Str),
                        ("cidr", Ty::Str),
                        ("subnet", Ty::Str),
                        ("security_groups", Ty::list(Ty::Str)),
                        ("ssh_from", Ty::list(Ty::Str)),
                    ],
                ),
            ),
        ],
    )
}
fn t_target() -> Ty {
    Ty::Node(NodeTy::Target)
}
fn t_image() -> Ty {
    Ty::Node(NodeTy::Kind(NodeKind::Image))
}
fn t_strs() -> Ty {
    Ty::list(Ty::Str)
}
pub fn t_tags() -> Ty {
    Ty::Dict(Rc::new(Ty::Str))
}
fn t_files() -> Ty {
    Ty::Dict(Rc::new(Ty::Str))
}
fn t_deferred_str() -> Ty {
    Ty::deferred(Ty::Str)
}
fn t_deferred_int() -> Ty {
    Ty::deferred(Ty::Int)
}

fn t_checks() -> Ty {
    Ty::list(Ty::Check)
}
fn t_size() -> Ty {
    Ty::Size
}
fn t_status() -> Ty {
    Ty::Ranged(Rc::new(Ty::Int), 100, 599)
}
fn t_exit() -> Ty {
    Ty::Ranged(Rc::new(Ty::Int), 0, 255)
}
fn t_timeout() -> Ty {
    Ty::Ranged(Rc::new(Ty::Int), 0, 3600)
}
fn t_exec_timeout() -> Ty {
    Ty::Ranged(Rc::new(Ty::Int), 1, 86400)
}

const AFTER: AttrSchema = attr("after", t_nodes, false, Some(Default::EmptyList));
/// Labels for people and policies (`owner`, `cost-center`), merged over the `default tags`
/// of the module and of the environment. Kept apart from the attributes (see
/// `eval.rs::node`): not part of the id, except where a target materializes them (a
/// manifest's labels).
const TAGS: AttrSchema = attr("tags", t_tags, false, None);
/// Postconditions and preconditions: taken by the nodes that change a target. They are
/// kept apart from the attributes (see `eval.rs::node`): not hashed into the id.
const EXPECT: AttrSchema = attr("expect", t_checks, false, None);
const REQUIRE: AttrSchema = attr("require", t_checks, false, None);

/// `rollback = false` opts a package, file or service out of automatic rollback. Kept
/// apart from the attributes (see `eval.rs::node`): not hashed into the id.
const ROLLBACK: AttrSchema = attr("rollback", t_bool, false, None);

/// The node attributes that hold checks.
pub const CHECK_ATTRS: [&str; 2] = ["expect", "require"];

/// A check constructor's parameters (defaults filled in, so they are part of what is
/// recorded) and what it probes.
pub struct CheckSchema {
    pub kind: CheckKind,
    pub params: &'static [AttrSchema],
    /// The arguments that may hold a secret: those `checks.sh` keeps off every command line
    /// (a script run from a file, a URL handed to `curl` on stdin, text compared in the
    /// shell). The others are connected to or compared by a program's arguments.
    pub secret_params: &'static [&'static str],
    pub doc: &'static str,
}

/// Seconds a check is retried before it fails; probes of what waiting cannot change
/// (the OS release, free space, an empty directory) try once.
const TIMEOUT_30: AttrSchema = attr("timeout", t_timeout, false, Some(Default::Int(30)));
const TIMEOUT_0: AttrSchema = attr("timeout", t_timeout, false, Some(Default::Int(0)));

pub const CHECKS: &[CheckSchema] = &[
    CheckSchema {
        kind: CheckKind::Tcp,
        params: &[
            attr("port", t_port, true, None),
            attr("host", t_str, false, Some(Default::Str("127.0.0.1"))),
            TIMEOUT_30,
        ],
        secret_params: &[],
        doc: "a TCP port accepts connections, seen from the target",
    },
    CheckSchema {
        kind: CheckKind::Http,
        params: &[
            attr("url", t_str, true, None),
            attr("status", t_status, false, Some(Default::Int(200))),
            attr("body_contains", t_str, false, Some(Default::Str(""))),
            TIMEOUT_30,
        ],
        secret_params: &["url", "body_contains"],
        doc: "an HTTP GET from the target answers with this status (and body text)",
    },
    CheckSchema {
        kind: CheckKind::Command,
        params: &[
            attr("cmd", t_str, true, None),
            attr("exit", t_exit, false, Some(Default::Int(0))),
            attr("stdout_contains", t_str, false, Some(Default::Str(""))),
            TIMEOUT_30,
        ],
        secret_params: &["cmd"],
        doc: "a shell command on the target exits with this status (and prints this text)",
    },
    CheckSchema {
        kind: CheckKind::Installed,
        params: &[
            attr("package", t_str, true, None),
            attr("at_least", t_str, false, Some(Default::Str(""))),
            attr("below", t_str, false, Some(Default::Str(""))),
            TIMEOUT_30,
        ],
        secret_params: &[],
        doc: "a Debian package is installed, its version in [at_least, below)",
    },
    CheckSchema {
        kind: CheckKind::OsRelease,
        params: &[
            attr("id", t_str, true, None),
            attr("version_id", t_str, false, Some(Default::Str(""))),
            TIMEOUT_0,
        ],
        secret_params: &[],
        doc: "the target's /etc/os-release names this ID (and VERSION_ID)",
    },
    CheckSchema {
        kind: CheckKind::FreeSpace,
        params: &[
            attr("path", t_str, true, None),
            attr("at_least", t_size, true, None),
            TIMEOUT_0,
        ],
        secret_params: &[],
        doc: "the filesystem holding a path has this much space available",
    },
    CheckSchema {
        kind: CheckKind::EmptyDir,
        params: &[attr("path", t_str, true, None), TIMEOUT_0],
        secret_params: &[],
        doc: "a directory is empty or absent",
    },
];

pub fn check_schema(kind: CheckKind) -> &'static CheckSchema {
    CHECKS
        .iter()
        .find(|s| s.kind == kind)
        .expect("every check kind has a schema")
}

pub const SCHEMAS: &[NodeSchema] = &[
    NodeSchema {
        kind: NodeKind::Vm,
        name_attr: "name",
        target: TargetSlot::None,
        attrs: &[
            attr("name", t_str, true, None),
            // Required unless `cloud` says where the machine runs (eval checks it): a
            // cloud machine boots the cloud's image, which the lockfile pins.
            attr("image", t_image, false, None),
            attr("cpus", t_cpus, false, Some(Default::Int(1))),
            attr("memory", t_memory, false, Some(Default::Size(1 << 30))),
            attr("disk", t_disk, false, Some(Default::Size(8 << 30))),
            attr("user", t_str, false, Some(Default::Str("root"))),
            attr("cloud", t_cloud, false, None),
            AFTER,
            TAGS,
        ],
        outputs: &[
            ("address", t_deferred_str),
            ("port", t_deferred_int),
            ("host_key", t_deferred_str),
            // The address the machine is reached at from outside its network (a QEMU
            // VM's only address), and the provider's id of it.
            ("public_address", t_deferred_str),
            ("instance_id", t_deferred_str),
        ],
        open_outputs: false,
        doc: "a virtual machine created by envc",
    },
    NodeSchema {
        kind: NodeKind::Host,
        name_attr: "name",
        target: TargetSlot::None,
        attrs: &[
            attr("name", t_str, true, None),
            attr("address", t_str, true, None),
            attr("port", t_port, false, Some(Default::Int(22))),
            attr("user", t_str, false, Some(Default::Str("root"))),
            // What the host was provisioned from: `envc verify`'s lab boots a fresh VM
            // from it to stand in for the host. Locked, not built, not part of the id.
            attr("base", t_image, false, None),
            // The Debian suite it runs, which its packages are locked from: its base's
            // when it has one, else bookworm.
            attr("suite", t_str, false, None),
            // Its suite's `-updates` and `-security` suites are locked with it unless false.
            attr("updates", t_bool, false, None),
            AFTER,
            TAGS,
        ],
        outputs: &[("host_key", t_deferred_str)],
        open_outputs: false,
        doc: "an existing machine reached over SSH",
    },
    NodeSchema {
        kind: NodeKind::Package,
        name_attr: "name",
        target: TargetSlot::Machine,
        attrs: &[
            attr("name", t_str, true, None),
            attr("version", t_str, false, None),
            // A vendor's archive it comes from; Debian's (its target's suite) when absent.
            attr("archive", t_archive, false, None),
            AFTER,
            TAGS,
            EXPECT,
            REQUIRE,
            ROLLBACK,
        ],
        outputs: &[("installed_version", t_deferred_str)],
        open_outputs: false,
        doc: "a Debian package installed with apt, its version pinned",
    },
    NodeSchema {
        kind: NodeKind::File,
        name_attr: "path",
        target: TargetSlot::Machine,
        attrs: &[
            attr("path", t_str, true, None),
            attr("content", t_str, false, None),
            attr("template", t_path, false, None),
            attr("vars", t_vars, false, None),
            attr("source", t_path, false, None),
            attr("owner", t_str, false, Some(Default::Str("root"))),
            attr("group", t_str, false, Some(Default::Str("root"))),
            attr("mode", t_mode, false, Some(Default::Mode(0o644))),
            AFTER,
            TAGS,
            EXPECT,
            REQUIRE,
            ROLLBACK,
        ],
        outputs: &[("content_hash", t_deferred_str)],
        open_outputs: false,
        doc: "a file placed on the target: inline content, a template, or a project file",
    },
    NodeSchema {
        kind: NodeKind::Service,
        name_attr: "name",
        target: TargetSlot::Machine,
        attrs: &[
            attr("name", t_str, true, None),
            attr("enabled", t_bool, false, Some(Default::Bool(true))),
            attr("running", t_bool, false, Some(Default::Bool(true))),
            attr("restart_on", t_nodes, false, Some(Default::EmptyList)),
            AFTER,
            TAGS,
            EXPECT,
            REQUIRE,
            ROLLBACK,
        ],
        outputs: &[],
        open_outputs: false,
        doc: "a systemd service, enabled and started, restarted when what it depends on changes",
    },
    NodeSchema {
        kind: NodeKind::Manifest,
        name_attr: "name",
        target: TargetSlot::Repo,
        attrs: &[
            attr("name", t_str, true, None),
            attr("api_version", t_str, true, None),
            attr("kind", t_str, true, None),
            // Empty: `default` for a namespaced kind; none for a cluster-wide one.
            attr("namespace", t_str, false, Some(Default::Str(""))),
            attr("labels", t_files, false, Some(Default::EmptyRecord)),
            attr("annotations", t_files, false, Some(Default::EmptyRecord)),
            // Every other top-level field of the object: `spec`, `data`, `rules`, …
            attr("body", t_vars, false, Some(Default::EmptyRecord)),
            AFTER,
            TAGS,
        ],
        outputs: &[],
        open_outputs: false,
        doc: "a Kubernetes object, checked against the API schema and written as canonical YAML",
    },
    NodeSchema {
        kind: NodeKind::Gitops,
        name_attr: "name",
        target: TargetSlot::Machine,
        attrs: &[
            attr("name", t_str, true, None),
            // The repository's path on its host, as `git clone HOST:REPO` takes it:
            // `/srv/git/fleet.git`, or `org/fleet.git` on a git service.
            attr("repo", t_str, true, None),
            attr("branch", t_str, false, Some(Default::Str("main"))),
            // The directory of the repository the objects are written under; empty: its
            // top.
            attr("path", t_str, false, Some(Default::Str(""))),
            AFTER,
            TAGS,
        ],
        outputs: &[],
        open_outputs: false,
        doc: "a git repository on a host that `manifest`s are committed to, for Argo CD or Flux to apply",
    },
    NodeSchema {
        kind: NodeKind::Image,
        name_attr: "name",
        target: TargetSlot::None,
        attrs: &[
            attr("name", t_str, true, None),
            attr("suite", t_str, false, Some(Default::Str("bookworm"))),
            // Its suite's `-updates` and `-security` suites are locked with it unless false.
            attr("updates", t_bool, false, None),
            attr("packages", t_strs, false, Some(Default::EmptyList)),
            attr("files", t_files, false, Some(Default::EmptyRecord)),
            AFTER,
            TAGS,
        ],
        outputs: &[("digest", t_deferred_str), ("kernel", t_deferred_str)],
        open_outputs: false,
        doc: "a bootable Debian disk image built reproducibly with mmdebstrap (a build derivation)",
    },
    NodeSchema {
        kind: NodeKind::Stack,
        name_attr: "file",
        target: TargetSlot::None,
        attrs: &[
            attr("file", t_str, true, None),
            // What to read until the other environment publishes an output: how two
            // environments that read each other are built the first time.
            attr("defaults", t_vars, false, None),
        ],
        // Its outputs are the referenced environment's: `stack_load.rs` types them.
        outputs: &[],
        open_outputs: false,
        doc: "another environment's outputs, read from its state: `let core = stack(\"core.env\")`, then `core.db_address`",
    },
    NodeSchema {
        kind: NodeKind::Exec,
        name_attr: "name",
        target: TargetSlot::Machine,
        attrs: &[
            attr("name", t_str, true, None),
            // The command: a program and its arguments, no shell (`argv`), or a script for
            // `sh -c` when a shell is wanted (`shell`). Exactly one.
            attr("argv", t_strs, false, None),
            attr("shell", t_str, false, None),
            attr("env", t_files, false, Some(Default::EmptyRecord)),
            attr("stdin", t_str, false, None),
            // Whom it runs as: the connection's user when absent.
            attr("user", t_str, false, None),
            attr("cwd", t_str, false, Some(Default::Str("/"))),
            // Guards, decided on the target each time the node has to run: a path that
            // makes the command unnecessary, a command whose success does, a command whose
            // failure does (Ansible's and pyinfra's `creates`, `unless`, `only_if`).
            attr("creates", t_str, false, None),
            attr("unless", t_strs, false, None),
            attr("only_if", t_strs, false, None),
            // Run when the node leaves the source (with the same user, cwd and env); without
            // it, leaving the source forgets the command.
            attr("undo", t_strs, false, None),
            // Keep its standard output as the `stdout` output.
            attr("capture", t_bool, false, Some(Default::Bool(false))),
            attr("timeout", t_exec_timeout, false, Some(Default::Int(600))),
            AFTER,
            TAGS,
            EXPECT,
            REQUIRE,
        ],
        outputs: &[("stdout", t_deferred_str)],
        open_outputs: false,
        doc: "a command run on the target when its inputs change, unless a guard finds it unnecessary",
    },
    NodeSchema {
        kind: NodeKind::Resource,
        name_attr: "name",
        target: TargetSlot::None,
        attrs: &[
            attr("name", t_str, true, None),
            // The provider, by its source address (`hashicorp/google`,
            // `registry.example.com/acme/cloud`), and the versions it may be locked at
            // (`~> 6.0`): the lockfile pins one, by its bytes.
            attr("provider", t_str, true, None),
            attr("version", t_str, true, None),
            // The provider's own configuration (its region, its endpoint).
            attr("provider_config", t_vars, false, Some(Default::EmptyRecord)),
            // The resource type, as the provider names it: `google_compute_instance`.
            attr("resource_type", t_str, true, None),
            // The resource's arguments, as the provider's schema has them.
            attr("body", t_vars, false, Some(Default::EmptyRecord)),
            AFTER,
            TAGS,
        ],
        // Its outputs are the resource's attributes: any name the provider's schema has.
        outputs: &[],
        open_outputs: true,
        doc: "a resource of a Terraform/OpenTofu provider, planned and applied by the provider itself",
    },
];

pub fn schema(kind: NodeKind) -> &'static NodeSchema {
    SCHEMAS
        .iter()
        .find(|s| s.kind == kind)
        .expect("every kind has a schema")
}

impl NodeSchema {
    pub fn signature(&self) -> FnTy {
        let mut params: Vec<ParamTy> = self
            .attrs
            .iter()
            .map(|a| ParamTy {
                name: a.name.into(),
                ty: (a.ty)(),
                required: a.required,
                known: a.name == self.name_attr,
            })
            .collect();
        if let Some(ty) = self.target.ty() {
            params.insert(
                1,
                ParamTy {
                    name: "target".into(),
                    ty,
                    required: self.target == TargetSlot::Machine,
                    known: false,
                },
            );
        }
        FnTy {
            params,
            ret: Ty::Node(NodeTy::Kind(self.kind)),
        }
    }

    /// The type of `node.field`: an attribute (known) or an output (deferred).
    pub fn field_ty(&self, field: &str) -> Option<Ty> {
        if field == "target" {
            if let Some(ty) = self.target.ty() {
                return Some(ty);
            }
        }
        if let Some(a) = self.attrs.iter().find(|a| a.name == field) {
            return Some((a.ty)());
        }
        self.outputs
            .iter()
            .find(|(n, _)| *n == field)
            .map(|(_, t)| t())
    }

    pub fn field_names(&self) -> Vec<&'static str> {
        let mut v: Vec<&'static str> = self.attrs.iter().map(|a| a.name).collect();
        v.extend(self.outputs.iter().map(|(n, _)| *n));
        if self.target != TargetSlot::None {
            v.push("target");
        }
        v
    }
}

fn p(name: &str, ty: Ty) -> ParamTy {
    ParamTy {
        name: name.into(),
        ty,
        required: true,
        known: false,
    }
}

impl Builtin {
    /// One line on what it does, for an editor's hover and completion.
    pub fn doc(self) -> &'static str {
        match self {
            Builtin::Node(k) => schema(k).doc,
            Builtin::Check(k) => check_schema(k).doc,
            Builtin::Len => "elements of a list, characters of a string, fields of a record",
            Builtin::Keys => "a record's keys, sorted",
            Builtin::Values => "a record's values, in the order of its sorted keys",
            Builtin::Join => "joins strings with a separator (deferred parts stay deferred)",
            Builtin::Split => "splits a string at each separator",
            Builtin::Contains => "an element of a list, a substring, a key of a record",
            Builtin::StartsWith => "whether a string starts with a prefix",
            Builtin::EndsWith => "whether a string ends with a suffix",
            Builtin::Upper => "the string in upper case",
            Builtin::Lower => "the string in lower case",
            Builtin::Trim => "the string without leading and trailing white space",
            Builtin::Replace => "the string with every `from` replaced by `to`",
            Builtin::ToStr => "a number, size, mode or bool as text",
            Builtin::Sort => "ints, strings or sizes in ascending order",
            Builtin::Merge => "a record with the second's fields over the first's",
            Builtin::Path => "a project file, relative to the file that names it, hashed by content",
            Builtin::ToJson => "canonical JSON (sorted keys)",
            Builtin::Secret => "a secret, by name: its value is read by envc at deploy, never written in the source",
            Builtin::All => "whether every element of a list of bools is true (true for none)",
            Builtin::Any => "whether some element of a list of bools is true (false for none)",
            Builtin::Min => "the least of a non-empty list of ints, strings or sizes",
            Builtin::Max => "the greatest of a non-empty list of ints, strings or sizes",
            Builtin::Read => "a project file's content as text (`read(path(\"motd.txt\"))`)",
            Builtin::Get => "a record's field by key, or a default when it has none (`get(n.tags, \"owner\", \"\")`)",
            Builtin::Nodes => "in a policy: the graph's nodes of a kind (`nodes(\"vm\")`), or all of them",
        }
    }

    /// The signature; `Unknown` stands for the polymorphic parts, whose result types the
    /// checker refines from the arguments (`sort(list[T]) -> list[T]`).
    pub fn signature(self) -> FnTy {
        let any = Ty::Unknown;
        let s = Ty::Str;
        let (params, ret) = match self {
            Builtin::Node(k) => return schema(k).signature(),
            Builtin::Check(k) => {
                let params = check_schema(k)
                    .params
                    .iter()
                    .map(|a| ParamTy {
                        name: a.name.into(),
                        ty: (a.ty)(),
                        required: a.required,
                        known: false,
                    })
                    .collect();
                return FnTy {
                    params,
                    ret: Ty::Check,
                };
            }
            Builtin::Len => (vec![p("value", any)], Ty::Int),
            Builtin::Keys => (vec![p("record", any)], Ty::list(Ty::Str)),
            Builtin::Values => (vec![p("record", any)], Ty::list(Ty::Unknown)),
            Builtin::Join => (
                vec![p("items", Ty::list(Ty::Str)), p("separator", s.clone())],
                Ty::Str,
            ),
            Builtin::Split => (
                vec![p("text", s.clone()), p("separator", s)],
                Ty::list(Ty::Str),
            ),
            Builtin::Contains => (vec![p("haystack", any.clone()), p("needle", any)], Ty::Bool),
            Builtin::StartsWith | Builtin::EndsWith => {
                (vec![p("text", s.clone()), p("affix", s)], Ty::Bool)
            }
            Builtin::Upper | Builtin::Lower | Builtin::Trim => (vec![p("text", s.clone())], s),
            Builtin::Replace => (
                vec![
                    p("text", s.clone()),
                    p("from", s.clone()),
                    p("to", s.clone()),
                ],
                s,
            ),
            Builtin::ToStr => (vec![p("value", any)], s),
            Builtin::Sort => (
                vec![p("items", Ty::list(Ty::Unknown))],
                Ty::list(Ty::Unknown),
            ),
            Builtin::Merge => (
                vec![p("base", any.clone()), p("overrides", any)],
                Ty::Unknown,
            ),
            Builtin::Path => (vec![p("file", s)], Ty::Path),
            Builtin::ToJson => (vec![p("value", any)], s),
            Builtin::Secret => (vec![p("name", s)], Ty::deferred(Ty::Secret)),
            Builtin::All | Builtin::Any => (vec![p("items", Ty::list(Ty::Bool))], Ty::Bool),
            Builtin::Min | Builtin::Max => (vec![p("items", Ty::list(Ty::Unknown))], Ty::Unknown),
            Builtin::Read => (vec![p("file", Ty::Path)], s),
            Builtin::Get => (
                vec![p("record", any.clone()), p("key", s), p("default", any)],
                Ty::Unknown,
            ),
            Builtin::Nodes => (
                vec![ParamTy {
                    required: false,
                    ..p("kind", s)
                }],
                Ty::list(Ty::Node(NodeTy::Any)),
            ),
        };
        FnTy { params, ret }
    }

    pub fn name(self) -> &'static str {
        match self {
            Builtin::Node(k) => k.name(),
            Builtin::Check(k) => k.name(),
            b => FUNCTIONS
                .iter()
                .find(|(_, x)| *x == b)
                .map(|(n, _)| *n)
                .expect("listed"),
        }
    }
}
