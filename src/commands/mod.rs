//! One module per subcommand; each returns an `exit::Outcome`. What they share: compiling
//! the file (with its lockfile's pins) and rendering its diagnostics, and the options for
//! reaching targets.

pub mod build;
pub mod check;
pub mod drift;
pub mod fmt;
pub mod graph;
pub mod history;
pub mod init;
pub mod lock;
pub mod manual;
pub mod picture;
pub mod plan;
pub mod progress;
pub mod render;
pub mod rollback;
pub mod secret;
pub mod shown;
pub mod store;
pub mod targeted;
pub mod team;
pub mod test;
pub mod verify;

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use envc_compiler::{compile, CompileOptions, Compiled};
use envc_executor::{split_root, FsLoader, Overrides, Session, Shared, Spec, TargetOptions};
use envc_lockfiles::LockedFile;

use crate::exit::{Exit, Failure};
use crate::render::Renderer;

/// What every command knows of the terminal.
#[derive(Clone, Copy)]
pub struct Ui {
    pub color: bool,
    /// Diagnostics as JSON lines on stdout, not drawn on stderr (`envc check --json`).
    pub json: bool,
}

impl Ui {
    pub fn renderer<'a>(
        &self,
        sources: &'a envc_compiler::SourceMap,
        prefix: &str,
    ) -> Renderer<'a> {
        Renderer::new(sources, prefix, self.color, 100)
    }
}

#[derive(clap::Args, Default)]
pub struct Params {
    /// Set a `param` of the environment: `--set replicas=5`.
    #[arg(long = "set", value_name = "NAME=VALUE", value_parser = parse_set)]
    pub set: Vec<(String, String)>,
    /// Judge the environment by the policies in DIR too (a policy pack: its `.env` files),
    /// besides those its envc.toml names (`[policy] packs`). Repeatable.
    #[arg(long = "policy", value_name = "DIR")]
    pub policy: Vec<PathBuf>,
}

impl Params {
    /// `--set` as name → value. A name given twice is refused, not settled by order: a
    /// script that sets it in two places has a mistake in one of them.
    pub(crate) fn values(&self) -> Result<BTreeMap<String, String>, Failure> {
        let mut values = BTreeMap::new();
        for (name, value) in &self.set {
            if let Some(first) = values.insert(name.clone(), value.clone()) {
                return Err(Failure::Input(format!(
                    "--set {name} is given twice (`{first}`, then `{value}`)\n  hint: give each parameter once"
                )));
            }
        }
        Ok(values)
    }
}

/// The `.env` files a policy pack may hold, at most, and how deep.
const MAX_PACK_FILES: usize = 1000;
const MAX_PACK_DEPTH: usize = 8;

/// The policy packs FILE is judged by: those its project's envc.toml names, then those
/// given with `--policy`, each read whole, each once (a directory named twice, by either,
/// is one pack).
pub(crate) fn policy_packs(
    file: &Path,
    params: &Params,
) -> Result<Vec<envc_compiler::PolicyPack>, Failure> {
    let project = envc_executor::project_dir(file);
    let configured =
        envc_executor::policy_packs(&project).map_err(|e| Failure::Input(e.to_string()))?;
    let own = project.canonicalize().ok();
    let mut seen = std::collections::BTreeSet::new();
    let mut packs = Vec::new();
    for dir in configured.iter().chain(&params.policy) {
        let canonical = dir.canonicalize().unwrap_or_else(|_| dir.clone());
        if own.as_ref() == Some(&canonical) {
            return Err(Failure::Input(format!(
                "policy pack `{}` is the environment's own directory\n  hint: keep the policies in a directory of their own, or write them in the environment's files",
                dir.display()
            )));
        }
        if seen.insert(canonical) {
            packs.push(read_policy_pack(dir)?);
        }
    }
    Ok(packs)
}

pub(crate) fn read_policy_pack(dir: &Path) -> Result<envc_compiler::PolicyPack, Failure> {
    let shown = dir.display().to_string();
    let fail = |why: String| {
        Failure::Input(format!(
            "policy pack `{shown}`: {why}\n  hint: a policy pack is a directory of `.env` files holding `policy` items (see docs/language.md, \"Policies\")"
        ))
    };
    let mut files = BTreeMap::new();
    let mut dirs = vec![(dir.to_path_buf(), String::new(), 0)];
    while let Some((at, rel, depth)) = dirs.pop() {
        let entries = std::fs::read_dir(&at)
            .map_err(|e| fail(format!("cannot read `{}`: {e}", at.display())))?;
        for entry in entries {
            let entry = entry.map_err(|e| fail(e.to_string()))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let path = entry.path();
            let rel_name = if rel.is_empty() {
                name.clone()
            } else {
                format!("{rel}/{name}")
            };
            let kind = entry.file_type().map_err(|e| fail(e.to_string()))?;
            if kind.is_dir() && !name.starts_with('.') && depth < MAX_PACK_DEPTH {
                dirs.push((path, rel_name, depth + 1));
            } else if name.ends_with(".env") && !kind.is_dir() {
                let bytes = envc_lockfiles::file::read_bounded(
                    &path,
                    envc_compiler::program::MAX_SOURCE_BYTES as u64,
                )
                .map_err(|e| fail(format!("cannot read `{rel_name}`: {e}")))?;
                files.insert(rel_name, bytes);
                if files.len() > MAX_PACK_FILES {
                    return Err(fail(format!("more than {MAX_PACK_FILES} `.env` files")));
                }
            }
        }
    }
    if !files.keys().any(|k| !k.contains('/')) {
        return Err(fail("no `.env` file at its top level".into()));
    }
    Ok(envc_compiler::PolicyPack { dir: shown, files })
}

/// A `--set` value without a name before its `=`.
#[derive(Debug)]
pub struct BadSetting(String);

impl std::fmt::Display for BadSetting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "expected NAME=VALUE, found `{}`", self.0)
    }
}

impl std::error::Error for BadSetting {}

fn parse_set(s: &str) -> Result<(String, String), BadSetting> {
    match s.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.trim().to_string(), v.to_string())),
        _ => Err(BadSetting(s.to_string())),
    }
}

/// Options shared by the commands that reach targets.
#[derive(clap::Args, Clone, Debug)]
pub struct TargetArgs {
    /// An ssh_config file for reaching hosts (identity files, jump hosts).
    #[arg(long, env = crate::environment::SSH_CONFIG, value_name = "FILE")]
    pub ssh_config: Option<PathBuf>,
    /// Seconds to wait for a host to accept a connection.
    #[arg(long, default_value_t = 10, value_name = "SECONDS")]
    pub connect_timeout: u64,
    /// Seconds one remote command may take (package installs included).
    #[arg(long, default_value_t = 900, value_name = "SECONDS")]
    pub command_timeout: u64,
    /// Accept a changed host key for host NAME (after a reinstall), and record the new one.
    #[arg(long, value_name = "NAME")]
    pub trust_host_key: Vec<String>,
    /// Seconds a new or restarted VM may take to answer ssh.
    #[arg(long, default_value_t = 300, value_name = "SECONDS")]
    pub boot_timeout: u64,
    /// Seconds each ssh connection stays open after the command, for the next command to the
    /// same host to reuse (as Ansible's ControlPersist); 0 closes them with the command.
    #[arg(
        long,
        env = crate::environment::SSH_PERSIST,
        default_value_t = 60,
        value_name = "SECONDS"
    )]
    pub ssh_persist: u64,
    #[command(flatten)]
    pub shared: SharedArgs,
}

/// Where the project's binary cache and shared state are, over what envc.toml says.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct SharedArgs {
    /// The binary cache: s3://BUCKET/PREFIX, gs://, az://, http(s)://, file:///PATH.
    #[arg(long, env = crate::environment::CACHE, value_name = "URL")]
    pub cache: Option<String>,
    /// Neither look anything up in the binary cache nor push to it (wins over --cache,
    /// ENVC_CACHE and envc.toml).
    #[arg(long)]
    pub no_cache: bool,
    /// The shared state: s3://BUCKET/PREFIX, gs://, az://, or file:///PATH (a local store).
    #[arg(long, env = crate::environment::STATE, value_name = "URL")]
    pub state: Option<String>,
    /// The secret key that signs what is pushed to the cache (`envc key generate`).
    #[arg(long, env = crate::environment::SIGNING_KEY, value_name = "FILE")]
    pub signing_key: Option<PathBuf>,
}

impl SharedArgs {
    /// The project's shared settings for `file`: these flags over its envc.toml.
    pub fn load(&self, file: &Path) -> Result<Shared, Failure> {
        let overrides = Overrides {
            cache: self.cache.clone(),
            state: self.state.clone(),
            signing_key: self.signing_key.clone(),
            no_cache: self.no_cache,
        };
        let mut shared = Shared::load(&envc_executor::project_dir(file), &overrides)
            .map_err(|e| Failure::Session(envc_executor::SessionError::Config(e)))?;
        // The hints of missing secrets say what to run, with the file as it was typed.
        shared.secrets.env_file = Some(file.display().to_string());
        Ok(shared)
    }
}

impl TargetArgs {
    pub fn options(&self) -> TargetOptions {
        TargetOptions {
            ssh_config: self.ssh_config.clone(),
            connect_timeout: Duration::from_secs(self.connect_timeout),
            command_timeout: Duration::from_secs(self.command_timeout),
            trust_host_key: self.trust_host_key.iter().cloned().collect(),
            boot_timeout: Duration::from_secs(self.boot_timeout),
            ssh_persist: Duration::from_secs(self.ssh_persist),
        }
    }
}

impl Default for TargetArgs {
    fn default() -> TargetArgs {
        use clap::Parser;
        #[derive(clap::Parser)]
        struct Defaults {
            #[command(flatten)]
            target: TargetArgs,
        }
        Defaults::parse_from(["envc"]).target
    }
}

/// The session of `file`'s environment.
pub fn session(file: &Path, target: &TargetArgs) -> Result<Session, Failure> {
    let shared = target.shared.load(file)?;
    Ok(Session::open(file, target.options(), shared)?)
}

/// The session of a command that reaches no target, only the store and state.
pub fn store_session(file: &Path, shared: &SharedArgs) -> Result<Session, Failure> {
    let target = TargetArgs {
        shared: shared.clone(),
        ..TargetArgs::default()
    };
    session(file, &target)
}

/// Makes `spec` ready to be resolved against its session: the secrets it uses (see
/// `Session::unseal`; `create`: a build, which may make the store's key) and what each
/// environment it references (`stack("…")`) last published, read from that environment's
/// own state, as its envc.toml (under the same flags) finds it. A referenced environment
/// whose state lacks an output read here stops the command before anything is planned or
/// run; one never built stops a build (`create`), while a plan shows what reads it waiting
/// for it, as Terraform and Pulumi plan against outputs not known yet.
pub fn prepare(
    session: &Session,
    spec: &mut Spec,
    file: &Path,
    shared: &SharedArgs,
    create: bool,
) -> Result<(), Failure> {
    session.unseal(spec, create)?;
    let dir = file.parent().unwrap_or(Path::new(""));
    let stacks: Vec<usize> = (0..spec.nodes.len())
        .filter(|&i| spec.nodes[i].kind == envc_compiler::types::NodeKind::Stack)
        .collect();
    for i in stacks {
        let node = &spec.nodes[i];
        // The node names it relative to this file's directory (`../network/core.env` when
        // it is beside it, under the project root): its state is where `envc build` of
        // that file keeps it, `.envc/` beside it (or $ENVC_STORE).
        let path = dir.join(&node.name);
        let published = store_session(&path, shared)?.published()?;
        let shown = lexical(&path).display().to_string();
        match envc_executor::stack_facts(node, &shown, published.as_ref()) {
            Ok(_) => {}
            Err(envc_executor::StackError::NeverBuilt { env }) if !create => {
                crate::output::errln!(
                    "note: `{env}` was never built: what this environment reads of it is not known yet, and `envc build` refuses until it is built"
                );
            }
            Err(e) => {
                return Err(Failure::Input(format!(
                    "{e} (read by `{}`)",
                    file.display()
                )))
            }
        }
        if let Some(p) = published {
            spec.stacks.insert(node.name.clone(), p);
        }
    }
    Ok(())
}

/// Refuses, before anything is planned, a `moved` line whose new key already has records of
/// its own beside the old key's (issue 60, item 2): carrying would keep one and delete the
/// other. `envc check` has no state; `plan`, `why`, `drift` and `build` see it here.
pub fn refuse_moved_onto_records(
    session: &Session,
    env: &CompiledEnv,
    file: &Path,
    ui: Ui,
) -> Result<(), Failure> {
    let Some(graph) = env.compiled.graph.as_ref().filter(|g| !g.moved.is_empty()) else {
        return Ok(());
    };
    let (records, intents) = session.live()?;
    let conflicts = envc_executor::moved_conflicts(&env.spec, &records, &intents);
    let problems: Vec<envc_lang::Diagnostic> = (conflicts.iter())
        .filter_map(|c| {
            let line = (graph.moved.iter())
                .find(|m| m.from.to_string() == c.from && m.to.to_string() == c.to)?;
            Some(moved_onto_records(c, line))
        })
        .collect();
    if problems.is_empty() {
        return Ok(());
    }
    Err(report_problems(
        &problems,
        &env.compiled.sources,
        &prefix(file),
        file,
        ui,
    ))
}

/// `moved::target-exists`, at the line's new key.
fn moved_onto_records(
    c: &envc_executor::MovedConflict,
    line: &envc_compiler::moved::Move,
) -> envc_lang::Diagnostic {
    let first = c.taken.first().map_or(c.to.as_str(), String::as_str);
    let more = match c.taken.len() {
        0 | 1 => String::new(),
        n => format!(" (and {} more on it)", n - 1),
    };
    let what = match line.to.kind {
        envc_compiler::types::NodeKind::Vm => ": a VM, with its disk",
        envc_compiler::types::NodeKind::Host => ": a machine, with what envc put on it",
        _ => "",
    };
    envc_lang::Diagnostic::new(
        "moved::target-exists",
        format!("`{first}` already has records of its own{more}"),
    )
    .label(line.file, line.to_span, "built under this name too")
    .message(format!(
        "`moved` carries what the state recorded under `{}` to `{}`, but the state has both: carrying would keep one and delete the other{what}.",
        c.from, c.to
    ))
    .help(format!(
        "remove this line: the plan then deletes `{}` and keeps `{}` as it is; to keep `{}` instead, give it its old name in the source again",
        c.from, c.to, c.from
    ))
}

/// `app/../network/core.env` as `network/core.env`: how a user (or an editor) names it. For
/// names only; a file is opened by the path as joined.
pub(crate) fn lexical(path: &Path) -> PathBuf {
    use std::path::Component;
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir
                if matches!(out.components().next_back(), Some(Component::Normal(_))) =>
            {
                out.pop();
            }
            c => out.push(c),
        }
    }
    out
}

/// A compiled environment: the graph as the executor takes it, the compiler's output (for
/// selecting nodes and rendering), the project's files and the lockfile it was compiled
/// with.
pub struct CompiledEnv {
    pub spec: Spec,
    pub compiled: Compiled,
    pub files: FsLoader,
    pub lock: Option<LockedFile>,
}

/// FILE compiled, before the executor's view of its graph is made: what `envc check`
/// needs (making the [`Spec`] of 10,000 nodes costs an eighth of a check).
pub struct CheckedEnv {
    pub compiled: Compiled,
    pub files: FsLoader,
    pub lock: Option<LockedFile>,
}

/// Compiles FILE, with the pins of the lockfile beside it when `with_lock` (every command
/// but `envc lock`, which must work when the lockfile is missing or broken). Diagnostics
/// are printed; a file with any is `Failure::Reported`.
pub fn compile_env(
    file: &Path,
    params: &Params,
    with_lock: bool,
    ui: Ui,
) -> Result<CompiledEnv, Failure> {
    compile_with(file, params, with_lock, BTreeMap::new(), ui)
}

/// [`compile_env`], with hosts replaced by stand-ins (`envc verify`'s lab).
pub fn compile_with(
    file: &Path,
    params: &Params,
    with_lock: bool,
    stand_ins: BTreeMap<String, envc_compiler::StandIn>,
    ui: Ui,
) -> Result<CompiledEnv, Failure> {
    let CheckedEnv {
        compiled,
        files,
        lock,
    } = compile_checked(file, params, with_lock, stand_ins, ui)?;
    let spec = Spec::from_graph(graph(&compiled)?, &compiled.sources)
        .with_lock(lock.as_ref().map(|l| &l.lock));
    Ok(CompiledEnv {
        spec,
        compiled,
        files,
        lock,
    })
}

/// FILE compiled and its diagnostics printed; a file with any is `Failure::Reported`.
pub fn compile_checked(
    file: &Path,
    params: &Params,
    with_lock: bool,
    stand_ins: BTreeMap<String, envc_compiler::StandIn>,
    ui: Ui,
) -> Result<CheckedEnv, Failure> {
    let lock = if with_lock {
        envc_lockfiles::read_lock(file).map_err(|e| Failure::Input(e.to_string()))?
    } else {
        None
    };
    let pins = lock.as_ref().map(|l| l.lock.pins()).unwrap_or_default();
    let (dir, name) = split_root(file);
    let files = FsLoader::new(&dir);
    // The project's `[params]`, under what the command line sets.
    let mut values = envc_executor::project_params(&envc_executor::project_dir(file))
        .map_err(|e| Failure::Input(e.to_string()))?;
    values.extend(params.values()?);
    let options = CompileOptions {
        params: values,
        pins,
        stand_ins,
        policy_packs: policy_packs(file, params)?,
        ..Default::default()
    };
    let compiled = compile(&name, &files, &options);
    report(&compiled, ui, file).ok_or(Failure::Reported(Exit::Input))?;
    Ok(CheckedEnv {
        compiled,
        files,
        lock,
    })
}

/// `dir/` for files of the project in `dir`, so diagnostics name files as the user typed.
pub fn prefix(file: &Path) -> String {
    match file.parent() {
        Some(p) if !p.as_os_str().is_empty() => format!("{}/", p.display()),
        _ => String::new(),
    }
}

/// Prints `problems` found in FILE (paths shown under `prefix`) and how many there were;
/// the failure a command returns then.
pub fn report_problems(
    problems: &[envc_lang::Diagnostic],
    sources: &envc_compiler::SourceMap,
    prefix: &str,
    file: &Path,
    ui: Ui,
) -> Failure {
    let renderer = ui.renderer(sources, prefix);
    let mut err = std::io::stderr().lock();
    let _ = write!(err, "{}", renderer.render_all(problems));
    let n = problems.len();
    let _ = writeln!(
        err,
        "error: envc found {n} problem{} in {}",
        if n == 1 { "" } else { "s" },
        file.display()
    );
    Failure::Reported(Exit::Input)
}

/// Prints the diagnostics; the graph when there were none.
pub fn report<'c>(compiled: &'c Compiled, ui: Ui, file: &Path) -> Option<&'c envc_compiler::Graph> {
    let renderer = ui.renderer(&compiled.sources, &prefix(file));
    if ui.json {
        let warnings = renderer.json_lines(&compiled.warnings, true);
        let errors = renderer.json_lines(&compiled.diagnostics, false);
        for line in warnings.into_iter().chain(errors) {
            crate::output::json_line(line);
        }
        if compiled.diagnostics.is_empty() {
            return compiled.graph.as_ref();
        }
        crate::output::json_line(check_summary(
            compiled.diagnostics.len(),
            compiled.warnings.len(),
        ));
        return None;
    }
    let mut err = std::io::stderr().lock();
    let _ = write!(err, "{}", renderer.render_warnings(&compiled.warnings));
    if compiled.diagnostics.is_empty() {
        return compiled.graph.as_ref();
    }
    let _ = write!(err, "{}", renderer.render_all(&compiled.diagnostics));
    let n = compiled.diagnostics.len();
    let _ = writeln!(
        err,
        "error: envc found {n} problem{} in {}",
        if n == 1 { "" } else { "s" },
        where_problems_are(compiled, file)
    );
    None
}

/// The last line of `envc check --json` when it found problems.
pub fn check_summary(errors: usize, warnings: usize) -> serde_json::Value {
    serde_json::json!({"type": "summary", "ok": false, "errors": errors, "warnings": warnings})
}

/// The environment file, or the policy pack files the problems are in: a pack's broken
/// policy is not the environment's problem (a policy the environment breaks still is).
fn where_problems_are(compiled: &Compiled, file: &Path) -> String {
    let in_pack = |d: &envc_lang::Diagnostic| {
        d.code != "policy::violation"
            && d.primary()
                .is_some_and(|l| compiled.sources.get(l.file).verbatim)
    };
    let packs: std::collections::BTreeSet<&str> = (compiled.diagnostics.iter())
        .filter(|d| in_pack(d))
        .filter_map(|d| d.primary())
        .map(|l| compiled.sources.get(l.file).name.as_str())
        .collect();
    let packs: Vec<&str> = packs.into_iter().collect();
    let env_too = compiled.diagnostics.iter().any(|d| !in_pack(d));
    match (packs.is_empty(), env_too) {
        (true, _) => file.display().to_string(),
        (false, false) => format!("the policy pack ({})", packs.join(", ")),
        (false, true) => format!(
            "{} and the policy pack ({})",
            file.display(),
            packs.join(", ")
        ),
    }
}

/// The graph of a compiled environment (present whenever it compiled without diagnostics).
pub fn graph(compiled: &Compiled) -> Result<&envc_compiler::Graph, Failure> {
    (compiled.graph.as_ref()).ok_or_else(|| Failure::Input("the environment has no graph".into()))
}

/// The index in the spec of NODE (`kind:name`, `target/kind:name` or an id prefix); a
/// miss is a diagnostic with "did you mean".
pub fn select(env: &CompiledEnv, node: &str, ui: Ui, file: &Path) -> Result<usize, Failure> {
    let id = match graph(&env.compiled)?.select(node) {
        Ok(n) => n.id.hex(),
        Err(d) => {
            crate::output::eprint_rendered(
                &ui.renderer(&env.compiled.sources, &prefix(file)).render(&d),
            );
            return Err(Failure::Reported(Exit::Input));
        }
    };
    env.spec
        .nodes
        .iter()
        .position(|n| n.id == id)
        .ok_or_else(|| Failure::Input("the selected node is not in the graph".into()))
}
