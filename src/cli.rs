//! The command line. Exit codes: 0 success; 1 the input has errors (diagnostics on
//! stderr) or `fmt --check` found unformatted files; 2 bad command-line usage; 3 drift
//! (or store damage) found; 4 a step failed or a target was unreachable; 5 the environment is locked by
//! another envc; 130 interrupted; 101 an internal error (a bug).

use std::collections::BTreeMap;
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use envc_compiler::{compile, CompileOptions, Compiled};

use crate::deploy::{self, TargetArgs};
use crate::fs_loader::{split_root, FsLoader};
use crate::render::Renderer;

#[derive(Parser)]
#[command(
    name = "envc",
    version,
    about = "Reproducible environments from a typed, declarative language"
)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
    /// Colour in diagnostics.
    #[arg(long, global = true, value_enum, default_value_t = Color::Auto)]
    color: Color,
}

#[derive(Clone, Copy, ValueEnum)]
enum Color {
    Auto,
    Always,
    Never,
}

#[derive(Clone, Copy, ValueEnum, PartialEq, Eq)]
enum GraphFormat {
    Text,
    Json,
    Dot,
}

#[derive(Clone, Copy, ValueEnum, PartialEq, Eq)]
enum PlanFormat {
    Text,
    Json,
    /// A table fit for a pull-request comment.
    Markdown,
}

#[derive(Subcommand)]
enum LockCommand {
    /// What changed between two lockfiles: pins added, removed and moved.
    Diff {
        /// The old lockfile: a path, or a git revision as `REV:PATH` (`main:prod.lock`).
        old: String,
        /// The new lockfile, the same way.
        new: String,
        /// Also list the nodes of this environment whose ids change.
        #[arg(long, value_name = "FILE")]
        env: Option<PathBuf>,
    },
}

#[derive(clap::Args)]
struct Params {
    /// Set a `param` of the environment: `--set replicas=5`.
    #[arg(long = "set", value_name = "NAME=VALUE", value_parser = parse_set)]
    set: Vec<(String, String)>,
}

#[derive(Subcommand)]
enum Command {
    /// Parse, type-check and evaluate FILE; report every problem.
    Check {
        file: PathBuf,
        #[command(flatten)]
        params: Params,
    },
    /// Format files in place (or only check that they are formatted).
    Fmt {
        /// Change nothing; exit 1 if a file is not formatted.
        #[arg(long)]
        check: bool,
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
    /// Print the derivation graph of FILE.
    Graph {
        file: PathBuf,
        #[arg(long, value_enum, default_value_t = GraphFormat::Text)]
        format: GraphFormat,
        #[command(flatten)]
        params: Params,
    },
    /// Print one derivation's canonical content: by id prefix, `kind:name` or `target/kind:name`.
    Show {
        file: PathBuf,
        node: String,
        #[command(flatten)]
        params: Params,
    },
    /// Show what `build` would do: create, update, delete or leave each node, and why.
    Plan {
        file: PathBuf,
        /// One JSON object per node, then a summary object (`--format json`).
        #[arg(long)]
        json: bool,
        #[arg(long, value_enum, default_value_t = PlanFormat::Text)]
        format: PlanFormat,
        /// Probe the targets first: drift shows as updates.
        #[arg(long)]
        refresh: bool,
        #[command(flatten)]
        params: Params,
        #[command(flatten)]
        target: TargetArgs,
    },
    /// Realize FILE on its targets: run what changed, skip what a record shows done.
    Build {
        file: PathBuf,
        /// Steps running at once (a batch of one host's files or packages is one step).
        #[arg(short = 'j', long, default_value_t = 32)]
        jobs: usize,
        /// After a failure, go on with every step that does not depend on it.
        #[arg(long)]
        keep_going: bool,
        /// Probe the targets first and repair what drifted from its record.
        #[arg(long)]
        refresh: bool,
        /// Wait for another build of the same environment instead of failing.
        #[arg(long)]
        wait: bool,
        /// One JSON object per node as it finishes, then a summary object.
        #[arg(long)]
        json: bool,
        /// Refuse to build unless the lockfile covers the environment and the tools here
        /// are the locked ones. The default when `CI` is set; `--locked=false` overrides.
        #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true", value_name = "BOOL")]
        locked: Option<bool>,
        #[command(flatten)]
        params: Params,
        #[command(flatten)]
        target: TargetArgs,
    },
    /// Pin every external input of FILE in its lockfile (`prod.env` → `prod.lock`):
    /// Debian archive state, packages with their hashes, image package sets, tools.
    #[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
    Lock {
        #[command(subcommand)]
        command: Option<LockCommand>,
        #[arg(required = true)]
        file: Option<PathBuf>,
        /// Change nothing: exit 3 when the lockfile does not cover the environment.
        #[arg(long)]
        check: bool,
        /// Move only these pins (`package:hello`, `image:debian-12`, `source_date_epoch`).
        #[arg(long, value_name = "KEY")]
        update: Vec<String>,
        #[command(flatten)]
        params: Params,
    },
    /// Explain one node: its resolved inputs, its record, and what build would do.
    Why {
        file: PathBuf,
        node: String,
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        params: Params,
    },
    /// Compare the targets with the records; exit 3 when something drifted.
    Drift {
        file: PathBuf,
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        params: Params,
        #[command(flatten)]
        target: TargetArgs,
    },
    /// Remove everything envc created for FILE's environment from its targets.
    Destroy {
        file: PathBuf,
        /// Really do it (without it, destroy shows what it would remove).
        #[arg(long)]
        yes: bool,
        #[arg(long)]
        wait: bool,
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        target: TargetArgs,
    },
    /// The environment's run history, newest first.
    Log {
        file: PathBuf,
        #[arg(long)]
        json: bool,
    },
    /// The environment's outputs as of its last build.
    Output {
        file: PathBuf,
        #[arg(long)]
        json: bool,
    },
    /// The store beside FILE (or `$ENVC_STORE`).
    Store {
        #[command(subcommand)]
        command: StoreCommand,
    },
}

#[derive(Subcommand)]
enum StoreCommand {
    /// Re-hash every object and check every environment's state; exit 3 on damage.
    Verify {
        file: PathBuf,
        /// Remove damaged objects and make every environment's state valid without them.
        #[arg(long)]
        repair: bool,
    },
}

fn parse_set(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.trim().to_string(), v.to_string())),
        _ => Err(format!("expected NAME=VALUE, found `{s}`")),
    }
}

pub fn main() -> ExitCode {
    let cli = Cli::parse();
    // Deeply nested input is bounded by the parser and the evaluator's limits; the large
    // stack makes those limits, not the platform's default stack, the ones that apply.
    let worker = std::thread::Builder::new()
        .stack_size(512 << 20)
        .spawn(move || run(cli));
    match worker.map(|h| h.join()) {
        Ok(Ok(code)) => code,
        _ => {
            eprintln!(
                "error: envc stopped on an internal error (a bug: please report it with the input)"
            );
            ExitCode::from(101)
        }
    }
}

fn run(cli: Cli) -> ExitCode {
    let color = match cli.color {
        Color::Always => true,
        Color::Never => false,
        Color::Auto => std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none(),
    };
    match cli.command {
        Command::Check { file, params } => {
            let Some((compiled, renderer_prefix, _)) = compile_file(&file, &params, true) else {
                return ExitCode::from(1);
            };
            let Some(graph) = report(&compiled, &renderer_prefix, color, &file) else {
                return ExitCode::from(1);
            };
            eprintln!(
                "{}: ok, {} nodes, {} outputs",
                file.display(),
                graph.order.len(),
                graph.outputs.len()
            );
            ExitCode::SUCCESS
        }
        Command::Graph {
            file,
            format,
            params,
        } => {
            let Some((compiled, prefix, _)) = compile_file(&file, &params, true) else {
                return ExitCode::from(1);
            };
            let Some(graph) = report(&compiled, &prefix, color, &file) else {
                return ExitCode::from(1);
            };
            let out = match format {
                GraphFormat::Json => graph.to_json() + "\n",
                GraphFormat::Dot => graph.to_dot(),
                GraphFormat::Text => text_graph(graph),
            };
            write_stdout(&out)
        }
        Command::Show { file, node, params } => {
            let Some((compiled, prefix, _)) = compile_file(&file, &params, true) else {
                return ExitCode::from(1);
            };
            let Some(graph) = report(&compiled, &prefix, color, &file) else {
                return ExitCode::from(1);
            };
            match graph.select(&node) {
                Ok(n) => {
                    let json = envc_compiler::derivation::node_json(n);
                    write_stdout(&format!(
                        "{}\n",
                        serde_json::to_string_pretty(&json).expect("JSON values serialise")
                    ))
                }
                Err(d) => {
                    let renderer = Renderer {
                        sources: &compiled.sources,
                        prefix,
                        color,
                        width: width(),
                    };
                    eprint!("{}", renderer.render(&d));
                    ExitCode::from(1)
                }
            }
        }
        Command::Fmt { check, files } => fmt(&files, check, color),
        Command::Plan {
            file,
            json,
            format,
            refresh,
            params,
            target,
        } => {
            let Some((spec, loader, _, _)) = compile_spec(&file, &params, color) else {
                return ExitCode::from(deploy::exit::INPUT);
            };
            let store = match deploy::open_store(&file) {
                Ok(s) => s,
                Err(e) => return fail(&e),
            };
            let refresh = refresh.then_some(&target);
            match deploy::compute_plan(&spec, &loader, &store, &deploy::env_name(&file), refresh) {
                Ok((p, _)) => {
                    let text = match (json, format) {
                        (true, _) | (_, PlanFormat::Json) => deploy::print_plan(&spec, &p, true),
                        (_, PlanFormat::Markdown) => {
                            deploy::plan_markdown(&spec, &p, &deploy::env_name(&file))
                        }
                        (_, PlanFormat::Text) => deploy::print_plan(&spec, &p, false),
                    };
                    let _ = write_stdout(&text);
                    // A node that cannot be built makes the plan fail, as the build would.
                    let broken = p.nodes.iter().any(|n| {
                        matches!(
                            n.assessment.resolved,
                            Err(envc_executor::resolve::Resolution::Failed(_))
                        )
                    });
                    if broken {
                        eprintln!("error: some nodes cannot be built (see `error:` above)");
                        ExitCode::from(deploy::exit::INPUT)
                    } else {
                        ExitCode::SUCCESS
                    }
                }
                Err(e) => fail(&e),
            }
        }
        Command::Build {
            file,
            jobs,
            keep_going,
            refresh,
            wait,
            json,
            locked,
            params,
            target,
        } => {
            let Some((spec, loader, _, lock)) = compile_spec(&file, &params, color) else {
                return ExitCode::from(deploy::exit::INPUT);
            };
            if locked.unwrap_or_else(in_ci) {
                let problems =
                    crate::lock::locked_problems(lock.as_ref().map(|l| &l.lock), &spec, &file);
                if !problems.is_empty() {
                    for p in &problems {
                        eprintln!("error: {p}");
                    }
                    eprintln!(
                        "error: a locked build refuses to start (`--locked`{}); nothing was changed",
                        if locked.is_none() { ", the default when CI is set" } else { "" }
                    );
                    return ExitCode::from(deploy::exit::INPUT);
                }
            }
            let args = deploy::BuildArgs {
                jobs,
                keep_going,
                refresh,
                wait,
                json,
                command: "build",
                target: &target,
                lock_hash: lock.map(|l| l.hash),
            };
            ExitCode::from(deploy::finish(deploy::build(&file, &spec, &loader, &args)))
        }
        Command::Lock {
            command: Some(LockCommand::Diff { old, new, env }),
            ..
        } => {
            let ids = |pins: &BTreeMap<String, String>| -> Option<BTreeMap<String, String>> {
                let file = env.as_ref()?;
                let (dir, name) = split_root(file);
                let options = CompileOptions {
                    pins: pins.clone(),
                    ..Default::default()
                };
                let compiled = compile(&name, &FsLoader::new(&dir), &options);
                let prefix = String::new();
                let graph = report(&compiled, &prefix, color, file)?;
                let spec = envc_executor::spec::Spec::from_graph(graph);
                Some(spec.nodes.into_iter().map(|n| (n.key, n.id)).collect())
            };
            let ids: Option<crate::lock::NodeIds> = if env.is_some() { Some(&ids) } else { None };
            ExitCode::from(deploy::finish(crate::lock::lock_diff(&old, &new, ids)))
        }
        Command::Lock {
            command: None,
            file,
            check,
            update,
            params,
        } => {
            let Some(file) = file else {
                return fail("give the environment file: `envc lock prod.env`");
            };
            let Some((compiled, prefix, _)) = compile_file(&file, &params, false) else {
                return ExitCode::from(deploy::exit::INPUT);
            };
            let Some(graph) = report(&compiled, &prefix, color, &file) else {
                return ExitCode::from(deploy::exit::INPUT);
            };
            let spec = envc_executor::spec::Spec::from_graph(graph);
            ExitCode::from(deploy::finish(crate::lock::lock(
                &file, &spec, check, &update,
            )))
        }
        Command::Why {
            file,
            node,
            json,
            params,
        } => {
            let Some((spec, loader, compiled, _)) = compile_spec(&file, &params, color) else {
                return ExitCode::from(deploy::exit::INPUT);
            };
            let graph = compiled
                .graph
                .as_ref()
                .expect("compile_spec returns graphs");
            let selected = match graph.select(&node) {
                Ok(n) => n.id.hex(),
                Err(d) => {
                    let renderer = Renderer {
                        sources: &compiled.sources,
                        prefix: String::new(),
                        color,
                        width: width(),
                    };
                    eprint!("{}", renderer.render(&d));
                    return ExitCode::from(deploy::exit::INPUT);
                }
            };
            let Some(index) = spec.nodes.iter().position(|n| n.id == selected) else {
                return fail("the selected node is not in the graph");
            };
            let store = match deploy::open_store(&file) {
                Ok(s) => s,
                Err(e) => return fail(&e),
            };
            match deploy::compute_plan(&spec, &loader, &store, &deploy::env_name(&file), None) {
                Ok((p, _)) => write_stdout(&deploy::why(&spec, &p, index, json)),
                Err(e) => fail(&e),
            }
        }
        Command::Drift {
            file,
            json,
            params,
            target,
        } => {
            let Some((spec, loader, _, _)) = compile_spec(&file, &params, color) else {
                return ExitCode::from(deploy::exit::INPUT);
            };
            ExitCode::from(deploy::finish(deploy::drift(
                &file, &spec, &loader, &target, json,
            )))
        }
        Command::Destroy {
            file,
            yes,
            wait,
            json,
            target,
        } => {
            let spec = envc_executor::spec::Spec::default();
            let (dir, _) = split_root(&file);
            let loader = FsLoader::new(&dir);
            if !yes {
                let store = match deploy::open_store(&file) {
                    Ok(s) => s,
                    Err(e) => return fail(&e),
                };
                return match deploy::compute_plan(
                    &spec,
                    &loader,
                    &store,
                    &deploy::env_name(&file),
                    None,
                ) {
                    Ok((p, _)) => {
                        let _ = write_stdout(&deploy::print_plan(&spec, &p, json));
                        eprintln!("error: destroy changes nothing without --yes");
                        ExitCode::from(deploy::exit::INPUT)
                    }
                    Err(e) => fail(&e),
                };
            }
            let args = deploy::BuildArgs {
                jobs: 32,
                keep_going: true,
                refresh: false,
                wait,
                json,
                command: "destroy",
                target: &target,
                lock_hash: None,
            };
            ExitCode::from(deploy::finish(deploy::build(&file, &spec, &loader, &args)))
        }
        Command::Log { file, json } => ExitCode::from(deploy::finish(deploy::log(&file, json))),
        Command::Store {
            command: StoreCommand::Verify { file, repair },
        } => ExitCode::from(deploy::finish(crate::store_cmd::verify(&file, repair))),
        Command::Output { file, json } => {
            ExitCode::from(deploy::finish(deploy::output(&file, json)))
        }
    }
}

/// Whether this runs in CI (`CI` set, and not to `false` or `0`): builds are locked then.
fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false" && v != "0")
}

fn fail(msg: &str) -> ExitCode {
    ExitCode::from(deploy::finish(Err(msg.to_string())))
}

/// Compiles FILE for the commands that reach targets; diagnostics are printed. Also gives
/// the lockfile it was compiled with.
fn compile_spec(
    file: &Path,
    params: &Params,
    color: bool,
) -> Option<(
    envc_executor::spec::Spec,
    FsLoader,
    Compiled,
    Option<crate::lock::LockedFile>,
)> {
    let (compiled, prefix, lock) = compile_file(file, params, true)?;
    let spec = envc_executor::spec::Spec::from_graph(report(&compiled, &prefix, color, file)?);
    let (dir, _) = split_root(file);
    Some((spec, FsLoader::new(&dir), compiled, lock))
}

fn width() -> usize {
    100
}

fn write_stdout(s: &str) -> ExitCode {
    let mut out = std::io::stdout().lock();
    // A closed pipe (`envc graph x | head`) is not an error worth a message.
    let _ = out.write_all(s.as_bytes()).and_then(|_| out.flush());
    ExitCode::SUCCESS
}

/// Compiles FILE, with the pins of the lockfile beside it when `with_lock` (every command
/// but `envc lock`, which must work when the lockfile is missing or broken), and gives that
/// lockfile back. A broken lockfile is reported and gives `None`.
fn compile_file(
    file: &Path,
    params: &Params,
    with_lock: bool,
) -> Option<(Compiled, String, Option<crate::lock::LockedFile>)> {
    let lock = if with_lock {
        match crate::lock::read_lock(file) {
            Ok(lock) => lock,
            Err(e) => {
                eprintln!("error: {e}");
                return None;
            }
        }
    } else {
        None
    };
    let pins = lock
        .as_ref()
        .map(|l| crate::lock::pins_of(&l.lock))
        .unwrap_or_default();
    let (dir, name) = split_root(file);
    let loader = FsLoader::new(&dir);
    let options = CompileOptions {
        params: params.set.iter().cloned().collect::<BTreeMap<_, _>>(),
        pins,
        ..Default::default()
    };
    let prefix = match file.parent() {
        Some(p) if !p.as_os_str().is_empty() => format!("{}/", p.display()),
        _ => String::new(),
    };
    Some((compile(&name, &loader, &options), prefix, lock))
}

/// Prints the diagnostics; the graph when there were none.
fn report<'c>(
    compiled: &'c Compiled,
    prefix: &str,
    color: bool,
    file: &Path,
) -> Option<&'c envc_compiler::Graph> {
    if compiled.diagnostics.is_empty() {
        return compiled.graph.as_ref();
    }
    let renderer = Renderer {
        sources: &compiled.sources,
        prefix: prefix.to_string(),
        color,
        width: width(),
    };
    let mut err = std::io::stderr().lock();
    let _ = write!(err, "{}", renderer.render_all(&compiled.diagnostics));
    let n = compiled.diagnostics.len();
    let _ = writeln!(
        err,
        "error: envc found {n} problem{} in {}",
        if n == 1 { "" } else { "s" },
        file.display()
    );
    None
}

fn text_graph(graph: &envc_compiler::Graph) -> String {
    let mut s = String::new();
    for n in graph.nodes() {
        let on = n
            .target
            .as_ref()
            .map_or(String::new(), |t| format!(" on {}", t.name));
        s.push_str(&format!(
            "{}  {} {}{on}\n",
            n.id.short(),
            n.kind.name(),
            n.name
        ));
        let inputs: Vec<String> = n.inputs.iter().map(|i| i.id.short()).collect();
        if !inputs.is_empty() {
            s.push_str(&format!("              <- {}\n", inputs.join(" ")));
        }
    }
    for (k, v) in &graph.outputs {
        s.push_str(&format!("output {k} = {}\n", human(v)));
    }
    s
}

fn fmt(files: &[PathBuf], check: bool, color: bool) -> ExitCode {
    let mut failed = false;
    for f in files {
        let limit = envc_compiler::program::MAX_SOURCE_BYTES as u64;
        let text = match crate::fs_loader::read_bounded(f, limit) {
            Ok(b) => match String::from_utf8(b) {
                Ok(t) => t,
                Err(_) => {
                    eprintln!("error: {} is not UTF-8 text", f.display());
                    failed = true;
                    continue;
                }
            },
            Err(e) => {
                eprintln!("error: cannot read {}: {e}", f.display());
                failed = true;
                continue;
            }
        };
        match envc_lang::format::format(&text) {
            Ok(formatted) if formatted == text => {}
            Ok(formatted) => {
                if check {
                    eprintln!(
                        "{}: not formatted (run `envc fmt {}`)",
                        f.display(),
                        f.display()
                    );
                    failed = true;
                } else if let Err(e) = write_atomically(f, formatted.as_bytes()) {
                    eprintln!("error: cannot write {}: {e}", f.display());
                    failed = true;
                } else {
                    eprintln!("formatted {}", f.display());
                }
            }
            Err(diagnostics) => {
                let mut sources = envc_compiler::SourceMap::default();
                sources.add(f.display().to_string(), text.as_str().into());
                let renderer = Renderer {
                    sources: &sources,
                    prefix: String::new(),
                    color,
                    width: width(),
                };
                eprint!("{}", renderer.render_all(&diagnostics));
                eprintln!("error: {} has syntax errors; not formatted", f.display());
                failed = true;
            }
        }
    }
    if failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

/// Writes beside the file and renames over it, so a crash never leaves half a file.
fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
    tmp.write_all(bytes)?;
    tmp.as_file().sync_all()?;
    if let Ok(meta) = std::fs::metadata(path) {
        let _ = std::fs::set_permissions(tmp.path(), meta.permissions());
    }
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

/// A value as a person reads it; deferred parts show where they will come from.
fn human(v: &envc_compiler::value::Value) -> String {
    use envc_compiler::value::{Deferred, Value};
    match v {
        Value::Deferred(d) => match &**d {
            Deferred::Output { node, output } => {
                format!("({}.{output}, known after deploy)", node.name)
            }
            Deferred::Concat(parts) => {
                let text: String = parts
                    .iter()
                    .map(|p| match p {
                        Value::Str(s) => s.to_string(),
                        Value::Deferred(d) => match &**d {
                            Deferred::Output { node, output } => {
                                format!("${{{}.{output}}}", node.name)
                            }
                            Deferred::Concat(_) => human(p),
                        },
                        other => human(other),
                    })
                    .collect();
                format!("{text:?} (known after deploy)")
            }
        },
        Value::List(xs) => format!("[{}]", xs.iter().map(human).collect::<Vec<_>>().join(", ")),
        other => envc_compiler::derivation::value_json(other).to_string(),
    }
}
