//! The executor: the application layer of envc. Store, state and realization records, the
//! scheduler, transports (local and SSH) and node executors; the project on disk
//! (`project`), the session that plans, builds, destroys and probes an environment
//! (`session`), and the lockfile as the graph needs it (`locking`). It consumes `envc_compiler::Graph` (nodes in canonical
//! topological order, each with its blake3 id) and resolves deferred values before hashing
//! again (the resolved hash).
//!
//! Its API is what this file re-exports, grouped below: the session and what its
//! commands report, verify, the store's plain data. The modules are its own rooms; the
//! few that are `pub` are for integration tests that exercise them against real parts.

// The store's modules under their old names, so that `crate::store::…` and the
// integration tests' `envc_executor::record::…` read as before.
pub use envc_store::{envlock, record, remote, shared_state, store};
pub(crate) use envc_store::{held, names};
// The contract and what kinds are built on, under the names the engine's modules use;
// public where an integration test or the CLI uses the module.
pub(crate) use envc_contract::{beneath, checks, connect, error, machines, stack, tools};
pub use envc_contract::{cache, debs, kept, keys, kustomize, secrets, spec, substitute, transport};
// The node kinds and their registry, under the name the engine's modules use.
pub use envc_kinds as kinds;

// The crate's own rooms. Public only where an integration test (`tests/`,
// `executor/tests/`) exercises internals against real parts; the CLI goes through the
// re-exports below, and `tests/architecture.rs` holds it to them.
mod adopt;
pub(crate) mod config;
pub(crate) mod locking;
mod moved;
pub mod plan;
pub(crate) mod probe;
pub(crate) mod project;
pub mod repair;
pub mod resolve;
mod rollback;
mod rollback_to;
pub(crate) mod rollout;
pub mod run;
pub(crate) mod secret_edit;
pub(crate) mod session;
pub(crate) mod sharing;
pub(crate) mod targeting;
pub(crate) mod verify;

// The executor's public API: what the command line (and anything else driving envc)
// uses. Plain data and the application layer's entry points; no scheduler, transport or
// node kind.

// The project on disk: where an environment's files and store are, and how the compiler
// reads them.
pub use project::{project_dir, split_root, FsLoader, MAX_PROJECT_FILE_BYTES};
pub use session::store_root;
// Files beneath a directory, never through a link out of it (`envc test`'s snapshots).
pub use beneath::{Beneath, BeneathError};
// The PATH envc runs tools with: where Debian puts them, whatever PATH it was started with.
pub use tools::with_system_dirs;

// Configuration (`envc.toml`, flags): the shared store and binary cache, policy packs,
// where providers are locked from.
pub use config::{
    policy_packs, project_params, provider_source, ConfigError, Overrides, Shared, StateSettings,
    DEFAULT_LEASE, PROVIDER_MIRROR_ENV,
};

// One environment's commands: plan, build, destroy, drift, log, output, checks, and the
// team commands (`sharing.rs`), with what they report and why they fail.
pub use rollback::RollbackError;
pub use rollback_to::{RollbackItem, RollbackPlan};
pub use run::{BuildReport, Event, Reporter, RunError};
pub use session::{BuildRequest, Interrupts, PlanReport, Session, SessionError, TargetOptions};
pub use sharing::BuildOutput;
pub use stack::{facts as stack_facts, StackError};

// The graph as the executor holds it, and a plan of it.
pub use adopt::Found as AdoptFound;
pub use checks::check_failure;
pub use kinds::file::templates::check_templates;
pub use kinds::manifest::rendered as rendered_manifest;
pub use moved::{conflicts as moved_conflicts, Conflict as MovedConflict};
pub use plan::{Action, Assessment, Plan};
pub use record::RolloutOutcome;
pub use rollout::{plan as rollout_plan, RolloutPlan};
pub use spec::{on_target, Spec};
pub use substitute::{describe_decl, placeholders_in, render_template, Resolution, PLACEHOLDER};
pub use targeting::{
    matches as key_matches, restrict, select as select_nodes, NoMatch, SelectError, Targeted,
};

// `envc secret edit`: the plaintext in an editor, removed on every way out.
pub use secret_edit::{edit as edit_secrets, EditError};

// Records and state: what ran, when, with which outcome.
pub use record::{DriftFacts, Outcome as StepOutcome, RealizationRecord, RunRecord, State};

// The store and the environment lock; `envc store verify`'s repair; the binary cache's
// keys and errors.
pub use cache::{CacheError, Direction, Progress, Transfer, Transfers};
pub use envlock::{EnvLock, EnvLockError, Holder};
pub use keys::SecretKey;
pub use repair::{RepairError, StoreReport};
pub use shared_state::{LockObject, TakenOver};
pub use store::{entry_key, ObjectId, RefConflict, Store, StoreError};

// `envc lock`, and what a locked build checks first.
pub use locking::{
    lock_environment, lock_needs, locked_problems, migrate_lock, outdated_pins, LockCommandError,
    LockOutcome, LockRequest, Migrated,
};

// `envc verify`: the request, the report and its parts, the lab's stand-ins.
pub use verify::compare::{NodeStatus, Verdict};
pub use verify::rebuild::{Rebuild, RebuildOutcome, Reference};
pub use verify::stand_ins::{
    complete as complete_stand_ins, read as read_stand_ins, StandInsError,
};
pub use verify::{VerifyPhase, VerifyReport, VerifyReporter, VerifyRequest};

// Quoting for text the CLI shows as a command line.
pub use transport::shell_quote;

// Why a step failed: what operations on targets return (`kinds::*::remote`).
pub use error::StepError;
