//! The commands that touch targets: plan, build, why, drift, destroy, log, output. They
//! compile the file, open the store beside it (or `$ENVC_STORE`), and hand the graph to
//! the executor.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use envc_executor::connect::Connections;
use envc_executor::plan::{plan, Action, DriftFacts, Plan};
use envc_executor::probe::{local_drift, probe};
use envc_executor::qemu::Machines;
use envc_executor::resolve::ProjectFiles;
use envc_executor::run::{BuildOptions, Env, Event, Reporter, Scheduler};
use envc_executor::spec::Spec;
use envc_executor::transport::SshOptions;
use envc_executor::{EnvLock, Holder, LockError, RunRecord, State, Store};
use serde_json::json;

use crate::fs_loader::FsLoader;

/// Exit codes that scripts can rely on (also in docs/cli.md).
pub mod exit {
    pub const OK: u8 = 0;
    /// Bad input: diagnostics, a missing store, a node that does not exist.
    pub const INPUT: u8 = 1;
    /// `envc drift` found targets that differ from their records; `envc store verify`
    /// found damaged objects.
    pub const DRIFT: u8 = 3;
    /// A step failed or a target could not be reached.
    pub const FAILED: u8 = 4;
    /// Another envc holds the environment's lock.
    pub const LOCKED: u8 = 5;
    pub const INTERRUPTED: u8 = 130;
}

/// Options shared by the commands that reach targets.
#[derive(clap::Args, Clone, Debug)]
pub struct TargetArgs {
    /// An ssh_config file for reaching hosts (identity files, jump hosts).
    #[arg(long, env = "ENVC_SSH_CONFIG", value_name = "FILE")]
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

/// The environment's VMs (the `qemu` provider).
fn machines(store: &Store, env: &str, args: &TargetArgs) -> Machines {
    Machines::new(store, env, Duration::from_secs(args.boot_timeout.max(1)))
}

pub fn store_root(file: &Path) -> PathBuf {
    if let Some(s) = std::env::var_os("ENVC_STORE") {
        return PathBuf::from(s);
    }
    let dir = match file.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    dir.join(".envc")
}

/// The environment's name: the file's stem (`prod.env` → `prod`).
pub fn env_name(file: &Path) -> String {
    file.file_stem()
        .map_or("env".into(), |s| s.to_string_lossy().into_owned())
}

pub fn open_store(file: &Path) -> Result<Store, String> {
    let root = store_root(file);
    Store::open(&root).map_err(|e| {
        format!(
            "cannot open the store at {}: {e}\n  hint: set ENVC_STORE to a writable directory",
            root.display()
        )
    })
}

impl ProjectFiles for FsLoader {
    fn read(&self, path: &str) -> std::io::Result<Vec<u8>> {
        envc_compiler::SourceLoader::read(self, path)
            .map_err(|e| std::io::Error::other(format!("{e:?}")))
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime starts")
}

fn connections(
    args: &TargetArgs,
    machines: &Machines,
) -> Result<(Connections, tempfile::TempDir), String> {
    // Control sockets need short paths (108 bytes): keep them under the system temp dir.
    let work = tempfile::Builder::new()
        .prefix("envc-ssh-")
        .tempdir()
        .map_err(|e| format!("cannot create a temporary directory: {e}"))?;
    let ssh = SshOptions {
        config_file: args.ssh_config.clone(),
        connect_timeout: Duration::from_secs(args.connect_timeout.max(1)),
        command_timeout: Duration::from_secs(args.command_timeout.max(1)),
        work_dir: work.path().to_path_buf(),
    };
    let trusted: BTreeSet<String> = args.trust_host_key.iter().cloned().collect();
    let mut conns = Connections::new(ssh, trusted);
    conns.vm_identity = Some(machines.key.clone());
    Ok((conns, work))
}

fn eprint_error(msg: &str) {
    eprintln!("error: {msg}");
}

/// A command's exit code; an error is printed and exits as bad input.
pub fn finish(r: Result<u8, String>) -> u8 {
    r.unwrap_or_else(|e| {
        eprint_error(&e);
        exit::INPUT
    })
}

/// Hosts by name as the graph has them now, resolved from the plan (for probes).
fn graph_hosts(p: &Plan) -> BTreeMap<String, envc_executor::transport::HostSpec> {
    p.nodes
        .iter()
        .filter_map(|n| n.assessment.resolved.as_ref().ok()?.host())
        .map(|h| (h.name.clone(), h.clone()))
        .collect()
}

fn load_records(
    store: &Store,
    env: &str,
) -> Result<BTreeMap<String, envc_executor::RealizationRecord>, String> {
    let (_, state) = State::current(store, env).map_err(|e| e.to_string())?;
    state.load_records(store).map_err(|e| e.to_string())
}

// ---------------------------------------------------------------- plan and why

pub fn print_plan(spec: &Spec, p: &Plan, json_out: bool) -> String {
    let mut out = String::new();
    if json_out {
        for n in &p.nodes {
            let node = &spec.nodes[n.index];
            let a = &n.assessment;
            out.push_str(
                &json!({
                    "node": node.key,
                    "id": node.id,
                    "action": a.action.name(),
                    "reasons": a.reasons,
                    "resolved": a.resolved.as_ref().ok().map(|r| &r.hash),
                    "error": match &a.resolved {
                        Err(envc_executor::resolve::Resolution::Failed(m)) => Some(m.clone()),
                        _ => None,
                    },
                })
                .to_string(),
            );
            out.push('\n');
        }
        for (key, r) in &p.deletions {
            out.push_str(
                &json!({"node": key, "id": r.derivation, "action": "delete", "reasons": ["no longer in the source"], "resolved": null, "error": null})
                    .to_string(),
            );
            out.push('\n');
        }
        let c = p.counts();
        let count = |a: Action| c.get(&a).copied().unwrap_or(0);
        out.push_str(
            &json!({"summary": {"create": count(Action::Create), "update": count(Action::Update), "replace": count(Action::Replace), "delete": count(Action::Delete), "unchanged": count(Action::Unchanged)}})
                .to_string(),
        );
        out.push('\n');
        return out;
    }
    for n in &p.nodes {
        let a = &n.assessment;
        if a.action == Action::Unchanged {
            continue;
        }
        let node = &spec.nodes[n.index];
        out.push_str(&format!("{:<9} {}\n", a.action.name(), node.key));
        for r in &a.reasons {
            out.push_str(&format!("          {r}\n"));
        }
        if let Err(envc_executor::resolve::Resolution::Failed(m)) = &a.resolved {
            out.push_str(&format!("          error: {m}\n"));
        }
    }
    for (key, r) in &p.deletions {
        let note = if r.created || !key.contains('/') {
            "no longer in the source"
        } else {
            "no longer in the source; envc did not create it, so it stays on the target"
        };
        out.push_str(&format!("{:<9} {key}\n          {note}\n", "delete"));
    }
    let c = p.counts();
    let count = |a: Action| c.get(&a).copied().unwrap_or(0);
    out.push_str(&format!(
        "plan: {} to create, {} to update, {} to replace, {} to delete, {} unchanged\n",
        count(Action::Create),
        count(Action::Update),
        count(Action::Replace),
        count(Action::Delete),
        count(Action::Unchanged)
    ));
    out
}

/// `envc plan --format markdown`: the changes as a table for a pull-request comment, the
/// unchanged nodes only counted. Table cells escape `|` and keep to one line.
pub fn plan_markdown(spec: &Spec, p: &Plan, env: &str) -> String {
    let cell = |s: &str| s.replace('|', "\\|").replace('\n', " ");
    let c = p.counts();
    let count = |a: Action| c.get(&a).copied().unwrap_or(0);
    let mut out = format!(
        "### envc plan: `{env}`\n\n**{} to create, {} to update, {} to replace, {} to delete**, {} unchanged\n",
        count(Action::Create),
        count(Action::Update),
        count(Action::Replace),
        count(Action::Delete),
        count(Action::Unchanged)
    );
    if !p.has_changes() {
        out.push_str("\nNo changes.\n");
        return out;
    }
    out.push_str("\n| action | node | why |\n|---|---|---|\n");
    for n in &p.nodes {
        let a = &n.assessment;
        if a.action == Action::Unchanged {
            continue;
        }
        let mut why: Vec<String> = a.reasons.iter().map(|r| cell(r)).collect();
        if let Err(envc_executor::resolve::Resolution::Failed(m)) = &a.resolved {
            why.push(format!("**error:** {}", cell(m)));
        }
        out.push_str(&format!(
            "| {} | `{}` | {} |\n",
            a.action.name(),
            cell(&spec.nodes[n.index].key),
            why.join("<br>")
        ));
    }
    for (key, r) in &p.deletions {
        let why = if r.created || !key.contains('/') {
            "no longer in the source"
        } else {
            "no longer in the source; envc did not create it, so it stays"
        };
        out.push_str(&format!("| delete | `{}` | {why} |\n", cell(key)));
    }
    out
}

/// `envc plan` (and the plan part of `why`): records, optional probes, then the plan.
pub fn compute_plan(
    spec: &Spec,
    files: &FsLoader,
    store: &Store,
    env: &str,
    refresh: Option<&TargetArgs>,
) -> Result<(Plan, BTreeMap<String, DriftFacts>), String> {
    let records = load_records(store, env)?;
    let default_args;
    let args = match refresh {
        Some(a) => a,
        None => {
            default_args = TargetArgs::default();
            &default_args
        }
    };
    let machines = machines(store, env, args);
    let mut drift = local_drift(&records, store, &machines);
    let first = plan(spec, &records, &drift, files);
    if refresh.is_none() {
        return Ok((first, drift));
    }
    let (conns, _work) = connections(args, &machines)?;
    let hosts = graph_hosts(&first);
    let probed = runtime().block_on(async {
        let p = probe(&records, &hosts, &conns).await;
        conns.close().await;
        p
    });
    for (key, e) in &probed.unreachable {
        eprintln!("warning: could not probe `{key}`: {e}");
    }
    drift.extend(probed.drift);
    let p = plan(spec, &records, &drift, files);
    Ok((p, drift))
}

pub fn why(spec: &Spec, p: &Plan, index: usize, json_out: bool) -> String {
    let node = &spec.nodes[index];
    let n = &p.nodes[index];
    let a = &n.assessment;
    let inputs: Vec<serde_json::Value> = node
        .inputs
        .iter()
        .map(
            |j| json!({"node": spec.nodes[*j].key, "action": p.nodes[*j].assessment.action.name()}),
        )
        .collect();
    if json_out {
        return json!({
            "node": node.key,
            "id": node.id,
            "action": a.action.name(),
            "reasons": a.reasons,
            "resolved": a.resolved.as_ref().ok().map(|r| &r.hash),
            "attrs": a.resolved.as_ref().ok().map(|r| &r.display),
            "inputs": inputs,
        })
        .to_string()
            + "\n";
    }
    let mut s = format!("{}\n  derivation {}\n", node.key, node.id);
    match &a.resolved {
        Ok(r) => {
            s.push_str(&format!("  resolved   {}\n", r.hash));
            for (k, v) in &r.display {
                s.push_str(&format!("    {k} = {v}\n"));
            }
        }
        Err(envc_executor::resolve::Resolution::Pending(j)) => s.push_str(&format!(
            "  resolved   not yet: needs the output of `{}`\n",
            spec.nodes[*j].key
        )),
        Err(envc_executor::resolve::Resolution::Failed(m)) => {
            s.push_str(&format!("  error      {m}\n"))
        }
    }
    s.push_str(&format!("  action     {}\n", a.action.name()));
    for r in &a.reasons {
        s.push_str(&format!("    because  {r}\n"));
    }
    if a.action == Action::Unchanged {
        s.push_str("    because  a record of this resolved hash exists for this target\n");
    }
    for i in &node.inputs {
        s.push_str(&format!(
            "  input      {} ({})\n",
            spec.nodes[*i].key,
            p.nodes[*i].assessment.action.name()
        ));
    }
    s
}

// ---------------------------------------------------------------- build and destroy

/// Progress: one bar per host on a terminal, one line per step otherwise, JSON lines
/// with `--json`.
struct Progress {
    json: bool,
    bars: Option<(
        indicatif::MultiProgress,
        Mutex<BTreeMap<String, indicatif::ProgressBar>>,
    )>,
    /// Nodes per target, for the bars' lengths.
    totals: BTreeMap<String, u64>,
    lines: Mutex<()>,
}

impl Progress {
    fn new(json: bool, spec: &Spec) -> Progress {
        let mut totals: BTreeMap<String, u64> = BTreeMap::new();
        for n in &spec.nodes {
            let t = n.target.map_or(&n.name, |t| &spec.nodes[t].name);
            *totals.entry(t.clone()).or_default() += 1;
        }
        let bars = (!json && std::io::stderr().is_terminal())
            .then(|| (indicatif::MultiProgress::new(), Mutex::new(BTreeMap::new())));
        Progress {
            json,
            bars,
            totals,
            lines: Mutex::new(()),
        }
    }

    fn bar(&self, target: &str) -> Option<indicatif::ProgressBar> {
        let (multi, bars) = self.bars.as_ref()?;
        let mut bars = bars.lock().unwrap_or_else(|e| e.into_inner());
        Some(
            bars.entry(target.to_string())
                .or_insert_with(|| {
                    let b = multi.add(indicatif::ProgressBar::new(
                        self.totals.get(target).copied().unwrap_or(0),
                    ));
                    b.set_style(
                        indicatif::ProgressStyle::with_template(
                            "{prefix:>16} {bar:24} {pos}/{len} {wide_msg}",
                        )
                        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
                    );
                    b.set_prefix(target.to_string());
                    b
                })
                .clone(),
        )
    }

    fn finish(&self) {
        if let Some((_, bars)) = &self.bars {
            for b in bars.lock().unwrap_or_else(|e| e.into_inner()).values() {
                b.finish();
            }
        }
    }
}

impl Reporter for Progress {
    fn event(&self, e: Event<'_>) {
        match e {
            Event::Started { key, target, .. } => {
                if let Some(b) = self.bar(target) {
                    b.set_message(key.to_string());
                }
            }
            Event::Finished {
                key,
                target,
                action,
                outcome,
                duration,
            } => {
                let _guard = self.lines.lock().unwrap_or_else(|e| e.into_inner());
                if self.json {
                    let mut out = std::io::stdout().lock();
                    let _ = writeln!(
                        out,
                        "{}",
                        json!({"event": "node", "node": key, "action": action.name(), "outcome": outcome, "duration_ms": duration.as_millis() as u64})
                    );
                    return;
                }
                let line = format!(
                    "{:<9} {key}: {outcome} ({} ms)",
                    action.name(),
                    duration.as_millis()
                );
                match self.bar(target) {
                    Some(b) => {
                        b.inc(1);
                        if outcome != "cached" {
                            b.set_message(line);
                        }
                    }
                    None if outcome == "cached" => {}
                    None => eprintln!("{line}"),
                }
            }
        }
    }
}

pub struct BuildArgs<'a> {
    pub jobs: usize,
    pub keep_going: bool,
    pub refresh: bool,
    pub wait: bool,
    pub json: bool,
    pub command: &'a str,
    pub target: &'a TargetArgs,
    /// blake3 of the lockfile the build used, for its run record.
    pub lock_hash: Option<String>,
}

/// `envc build` (and `envc destroy`, which builds an empty graph).
pub fn build(file: &Path, spec: &Spec, files: &FsLoader, args: &BuildArgs) -> Result<u8, String> {
    let store = open_store(file)?;
    let env_name = env_name(file);
    let lock = match EnvLock::acquire(
        &store,
        &env_name,
        args.wait,
        &Holder::current(&format!("envc {}", args.command)),
    ) {
        Ok(l) => l,
        Err(e @ LockError::Held { .. }) => {
            eprint_error(&e.to_string());
            return Ok(exit::LOCKED);
        }
        Err(e) => return Err(e.to_string()),
    };
    let mut env =
        Env::open(&store, &lock).map_err(|e| format!("the state of `{env_name}`: {e}"))?;
    let machines = Arc::new(machines(&store, &env_name, args.target));
    let (conns, _work) = connections(args.target, &machines)?;
    let conns = Arc::new(conns);
    let rt = runtime();
    let cancel = Arc::new(AtomicBool::new(false));
    {
        let cancel = cancel.clone();
        rt.spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                cancel.store(true, Ordering::SeqCst);
                eprintln!("envc: interrupted; letting running steps finish and recording them (interrupt again to stop at once)");
                if tokio::signal::ctrl_c().await.is_ok() {
                    std::process::exit(i32::from(exit::INTERRUPTED));
                }
            }
        });
    }
    let mut drift = local_drift(&env.records, &store, &machines);
    if args.refresh {
        let first = plan(spec, &env.records, &drift, files);
        let hosts = graph_hosts(&first);
        let probed = rt.block_on(probe(&env.records, &hosts, &conns));
        for (key, d) in &probed.drift {
            for (fact, was, now) in d {
                eprintln!("drift     {key}: {fact} was {was}, found {now}");
            }
        }
        for (key, e) in &probed.unreachable {
            eprintln!("warning: could not probe `{key}`: {e}");
        }
        drift.extend(probed.drift);
    }
    let opts = BuildOptions {
        jobs: args.jobs,
        keep_going: args.keep_going,
        command: args.command.to_string(),
        drift,
        lock_hash: args.lock_hash.clone(),
    };
    let progress = Progress::new(args.json, spec);
    let scheduler = Scheduler::new(
        spec,
        files,
        &opts,
        conns.clone(),
        machines,
        cancel.clone(),
        &progress,
    );
    let result = rt.block_on(async {
        let r = scheduler.run(&mut env).await;
        conns.close().await;
        r
    });
    progress.finish();
    let report = match result {
        Ok(r) => r,
        Err(e) => {
            eprint_error(&e);
            let _ = env.commit();
            return Ok(exit::FAILED);
        }
    };
    let summary = format!(
        "{}: {} ran, {} cached, {} deleted, {} failed, {} skipped",
        args.command, report.ran, report.cached, report.deleted, report.failed, report.skipped
    );
    if args.json {
        println!(
            "{}",
            json!({"summary": {"ran": report.ran, "cached": report.cached, "deleted": report.deleted, "failed": report.failed, "skipped": report.skipped, "interrupted": report.interrupted, "run": report.run.map(|r| r.hex())}})
        );
    } else {
        println!("{summary}");
    }
    Ok(if report.interrupted {
        exit::INTERRUPTED
    } else if report.failed > 0 {
        if !args.json {
            for o in &report.outcomes {
                if o.outcome.starts_with("failed") {
                    eprintln!("error: {}: {}", o.node, &o.outcome["failed: ".len()..]);
                }
            }
        }
        exit::FAILED
    } else {
        exit::OK
    })
}

// ---------------------------------------------------------------- drift, log, output

pub fn drift(
    file: &Path,
    spec: &Spec,
    files: &FsLoader,
    target: &TargetArgs,
    json_out: bool,
) -> Result<u8, String> {
    let store = open_store(file)?;
    let (_, drift) = compute_plan(spec, files, &store, &env_name(file), Some(target))?;
    let mut out = std::io::stdout().lock();
    for (key, d) in &drift {
        for (fact, was, now) in d {
            if json_out {
                let _ = writeln!(
                    out,
                    "{}",
                    json!({"node": key, "fact": fact, "recorded": was, "found": now})
                );
            } else {
                let _ = writeln!(out, "drift     {key}: {fact} was {was}, found {now}");
            }
        }
    }
    Ok(if drift.is_empty() {
        if !json_out {
            let _ = writeln!(out, "drift: none; every target matches its records");
        }
        exit::OK
    } else {
        if !json_out {
            let _ = writeln!(
                out,
                "drift: {} nodes differ from their records; `envc build --refresh` repairs them",
                drift.len()
            );
        }
        exit::DRIFT
    })
}

pub fn log(file: &Path, json_out: bool) -> Result<u8, String> {
    let store = open_store(file)?;
    let envc_executor::repair::History {
        states: history,
        end,
    } = envc_executor::repair::readable_history(&store, &env_name(file))
        .map_err(|e| e.to_string())?;
    // A damaged entry is reported and skipped: the rest of the history is still worth showing.
    let hint = format!("`envc store verify --repair {}`", file.display());
    let mut out = std::io::stdout().lock();
    let mut seen = BTreeSet::new();
    for (_, state) in history {
        let Some(run_id) = state.run else { continue };
        if !seen.insert(run_id) {
            continue; // intermediate commits of one run share its record
        }
        let run: RunRecord = match store.get_json(&run_id) {
            Ok(run) => run,
            Err(e) => {
                let d = envc_executor::repair::Damage::of(e).map_err(|e| e.to_string())?;
                eprintln!("run {run_id}: damaged: {d}; {hint}");
                continue;
            }
        };
        let count = |f: &dyn Fn(&str) -> bool| run.nodes.iter().filter(|n| f(&n.outcome)).count();
        let ran = count(&|o| o == "ok" || o.starts_with("ok:"));
        let cached = count(&|o| o == "cached");
        let failed = count(&|o| o.starts_with("failed"));
        if json_out {
            let _ = writeln!(
                out,
                "{}",
                json!({"run": run.run, "command": run.command, "result": run.result, "started_unix": run.started_unix, "finished_unix": run.finished_unix, "graph": run.graph_hash, "ran": ran, "cached": cached, "failed": failed})
            );
        } else {
            let _ = writeln!(
                out,
                "run {}  {:<7} {:<11} started {} took {} s: {ran} ran, {cached} cached, {failed} failed",
                run.run,
                run.command,
                run.result,
                run.started_unix,
                run.finished_unix.saturating_sub(run.started_unix)
            );
            for n in run.nodes.iter().filter(|n| n.outcome != "cached") {
                let _ = writeln!(out, "    {:<9} {}: {}", n.action, n.node, n.outcome);
            }
        }
    }
    if let Some((state, d)) = end {
        let at = state.map_or("the ref".to_string(), |s| format!("state {s}"));
        eprintln!("{at}: damaged: {d}; the history before it cannot be read; {hint}");
    }
    Ok(exit::OK)
}

pub fn output(file: &Path, json_out: bool) -> Result<u8, String> {
    let store = open_store(file)?;
    let (_, state) = State::current(&store, &env_name(file)).map_err(|e| e.to_string())?;
    if state.run.is_none() {
        return Err(format!(
            "`{}` was never built; run `envc build {}` first",
            env_name(file),
            file.display()
        ));
    }
    let mut out = std::io::stdout().lock();
    if json_out {
        let _ = writeln!(
            out,
            "{}",
            serde_json::Value::Object(state.outputs.into_iter().collect())
        );
    } else {
        for (k, v) in state.outputs {
            let _ = writeln!(out, "{k} = {v}");
        }
    }
    Ok(exit::OK)
}
