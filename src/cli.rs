//! The command line: clap's definitions and the dispatch to one module per subcommand
//! (`commands/`). Exit codes come from `exit::Exit`; errors are rendered in
//! `exit::Failure::report`, and nowhere else.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand, ValueEnum};

use crate::commands::graph::GraphFormat;
use crate::commands::plan::PlanFormat;
use crate::commands::{self, build::BuildArgs, Params, SharedArgs, TargetArgs, Ui};
use crate::exit::{Exit, Failure};

#[derive(Parser)]
#[command(
    name = "envc",
    // The commit, its date and the target, from build.rs: `envc version --json` has them
    // as fields.
    version = env!("BUILT_VERSION_LINE"),
    about = "Reproducible environments from a typed, declarative language",
    after_help = "Exit status and environment variables: envc --help"
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

#[derive(Subcommand)]
enum KeyCommand {
    /// Make an ed25519 key that signs what is pushed to the binary cache: writes
    /// NAME.secret (keep it secret) and NAME.public, and prints the public key.
    Generate {
        name: String,
        /// The folder to write the two files in.
        #[arg(long, default_value = ".", value_name = "DIR")]
        out: PathBuf,
    },
}

#[derive(Subcommand)]
enum SecretCommand {
    /// Set secret NAME in the project's secrets file (encrypted to [secrets] recipients):
    /// the value is read from stdin, one trailing newline removed.
    Set {
        file: PathBuf,
        name: String,
        #[command(flatten)]
        shared: SharedArgs,
    },
    /// Edit the project's secrets file in $VISUAL or $EDITOR (`NAME = "VALUE"` lines): it is
    /// decrypted to a 0600 file in /dev/shm (memory, where there is one), encrypted again
    /// when the editor exits, and the plaintext removed.
    Edit {
        file: PathBuf,
        #[command(flatten)]
        shared: SharedArgs,
    },
    /// Remove secret NAME from the project's secrets file.
    Rm {
        file: PathBuf,
        name: String,
        #[command(flatten)]
        shared: SharedArgs,
    },
    /// The names of the secrets in the project's file, and of those FILE uses (never the
    /// values).
    List {
        file: PathBuf,
        #[command(flatten)]
        params: Params,
        #[command(flatten)]
        shared: SharedArgs,
    },
    /// Make an age identity: writes it to OUT (mode 0600) and prints its recipient, the
    /// line to add to [secrets] recipients in envc.toml.
    Keygen { out: PathBuf },
}

#[derive(Subcommand)]
enum CacheCommand {
    /// Push the locked images the environment's state records (needs a signing key).
    Push {
        file: PathBuf,
        #[command(flatten)]
        params: Params,
        #[command(flatten)]
        shared: SharedArgs,
    },
    /// Fetch the environment's images from the cache into the local store.
    Pull {
        file: PathBuf,
        #[command(flatten)]
        params: Params,
        #[command(flatten)]
        shared: SharedArgs,
    },
    /// Check the environment's entries (with --all: every entry) chunk by chunk against
    /// their hashes and signatures; exit 3 on damage.
    Verify {
        file: PathBuf,
        #[arg(long)]
        all: bool,
        #[command(flatten)]
        params: Params,
        #[command(flatten)]
        shared: SharedArgs,
    },
}

#[derive(Subcommand)]
enum StateCommand {
    /// Copy the environment's state and history to another state (s3://, gs://, az://,
    /// file://), leaving this one as it is.
    Migrate {
        file: PathBuf,
        #[arg(long, value_name = "URL")]
        to: String,
        #[command(flatten)]
        shared: SharedArgs,
    },
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
        /// `markdown`: a pull request's body (a title, a table of the moved packages with
        /// the CVEs and bugs their changelogs name, the pins).
        #[arg(long, value_enum, default_value_t = commands::lock::DiffFormat::Text)]
        format: commands::lock::DiffFormat,
    },
}

#[derive(Subcommand)]
enum Command {
    /// Parse, type-check and evaluate FILE; report every problem.
    Check {
        file: PathBuf,
        /// One JSON object per problem (warnings too), then a summary (see docs/cli.md).
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        params: Params,
    },
    /// Run the `test` items of every `*_test.env` under PATH (default: here), each in
    /// isolation and in parallel: the environment it names evaluated with its parameters
    /// and mocked outputs, no store, no targets, no network. Prints a line per test and
    /// `N passed, M failed`; exit 0 when every test passed, 1 otherwise.
    Test {
        paths: Vec<PathBuf>,
        /// Only the tests whose name (or file) holds TEXT.
        #[arg(long, value_name = "TEXT")]
        filter: Option<String>,
        /// One JSON object per test, then a summary (see docs/cli.md).
        #[arg(long)]
        json: bool,
        /// Also write the results to FILE as JUnit XML, for CI systems.
        #[arg(long, value_name = "FILE")]
        junit: Option<PathBuf>,
        /// Rewrite the snapshots that differ or are missing (then review and commit them).
        #[arg(long)]
        update: bool,
    },
    /// A language server for editors (Language Server Protocol over stdin and stdout):
    /// diagnostics as you type, hover, definitions, references, completion, formatting,
    /// symbols, rename and quick fixes. See docs/editors.md.
    Lsp,
    /// Start a project in DIR (default: here): a commented prod.env (one local VM, a file,
    /// a service), envc.toml, .gitignore and, with --ci, a CI workflow. Overwrites nothing.
    Init {
        #[arg(default_value = ".")]
        dir: PathBuf,
        /// Add the CI workflow of examples/ci/ for this system.
        #[arg(long, value_enum)]
        ci: Option<commands::init::Ci>,
    },
    /// Print the completion script for SHELL: `envc completions bash >
    /// /etc/bash_completion.d/envc` (zsh, fish, elvish and powershell too).
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Write the man pages (envc.1, envc-build.1, …) into DIR: `envc man
    /// /usr/local/share/man/man1`.
    Man { dir: PathBuf },
    /// The version, the commit it was built from (`-dirty` when it had changes), the
    /// commit's date and the target (as `--version`).
    ///
    /// `--json` is here and not on `--version`, which clap answers while it parses,
    /// before any other flag is read.
    Version {
        /// One JSON object: version, commit, dirty, commit_date, commit_unix, target.
        #[arg(long)]
        json: bool,
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
        targeted: commands::targeted::TargetedArgs,
        #[command(flatten)]
        params: Params,
        #[command(flatten)]
        target: TargetArgs,
    },
    /// Realize FILE on its targets: run what changed, skip what a record shows done.
    Build {
        file: PathBuf,
        /// Steps running at once (a batch of one host's files or packages is one step).
        #[arg(short = 'j', long, default_value_t = 32,
              value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
        jobs: usize,
        /// After a failure, go on with every step that does not depend on it.
        #[arg(long)]
        keep_going: bool,
        /// When an update fails its postconditions (or its service does not restart),
        /// leave what it changed in place instead of putting the previous files and
        /// services back.
        #[arg(long)]
        no_rollback: bool,
        /// Probe the targets first and repair what drifted from its record.
        #[arg(long)]
        refresh: bool,
        /// Wait for another build of the same environment instead of failing.
        #[arg(long)]
        wait: bool,
        /// One JSON object per node as it finishes, then a summary object.
        #[arg(long)]
        json: bool,
        /// Push what is built to the binary cache, signed (needs a signing key).
        #[arg(long)]
        push: bool,
        /// Refuse to build unless the lockfile covers the environment and the tools here
        /// are the locked ones. The default when `CI` is set; `--locked=false` overrides.
        #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true", value_name = "BOOL")]
        locked: Option<bool>,
        #[command(flatten)]
        targeted: commands::targeted::TargetedArgs,
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
        /// The environment file (one; a second word here is most often a value meant
        /// for `--update`, which takes it after `=`).
        #[arg(required = true, value_name = "FILE")]
        file: Vec<PathBuf>,
        /// Change nothing: exit 3 when the lockfile does not cover the environment.
        #[arg(long)]
        check: bool,
        /// Move pins: `--update` alone, every pin to the archives' current Releases;
        /// `--update=security`, only what the security suites changed; `--update=KEY`
        /// (`package:hello`, `image:debian-12`, `source_date_epoch`), only that pin (repeat
        /// it for more). The value follows `=`, so `--update prod.env` is not read as one.
        #[arg(long, value_name = "KEY|security", num_args = 0..=1, require_equals = true,
              value_parser = commands::lock::parse_update)]
        update: Option<Vec<commands::lock::Update>>,
        /// Change nothing: list the pins that have newer versions in their suites, security
        /// updates first; exit 3 when a security update is pending. Offline, against the
        /// indices the last `envc lock` read (kept in the store).
        #[arg(long, conflicts_with_all = ["check", "update"])]
        outdated: bool,
        /// Rewrite the lockfile in the current format, every pin as it is (a lockfile of
        /// an older envc); resolves nothing.
        #[arg(long, conflicts_with_all = ["check", "update", "outdated"])]
        migrate: bool,
        /// With `--outdated`: read the archives' current indices first (and keep them).
        #[arg(long, requires = "outdated")]
        refresh: bool,
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
        /// Also run every built node's postconditions (`expect`) again; exit 3 when one
        /// does not hold.
        #[arg(long)]
        checks: bool,
        #[command(flatten)]
        params: Params,
        #[command(flatten)]
        target: TargetArgs,
    },
    /// Check that the lockfile rebuilds production: rebuild every image and compare it
    /// bit for bit, then deploy the environment onto clean stand-ins (fresh VMs; the
    /// machines --lab-hosts names for hosts) and compare every node's facts and checks with
    /// production's. Exit 0 when everything matches, 3 when something differs, 6 when a
    /// production target could not be looked at.
    Verify {
        file: PathBuf,
        /// Only the rebuild level: images against production's records.
        #[arg(long, conflicts_with = "lab_only")]
        rebuild_only: bool,
        /// Only the lab level (the lab deploys production's own image bytes).
        #[arg(long)]
        lab_only: bool,
        /// TOML naming clean machines for hosts of the environment: `web1 = "10.0.0.5"`,
        /// or a table with address, port and user. A host it does not name is stood in
        /// for by a fresh VM from its declared `base`.
        #[arg(long, value_name = "FILE")]
        lab_hosts: Option<PathBuf>,
        /// Compare with the state a production run left (a run id from `envc log`, or
        /// its start) instead of the current one.
        #[arg(long, value_name = "RUN")]
        against: Option<String>,
        /// Leave the lab standing for a look (its store's path is printed).
        #[arg(long)]
        keep: bool,
        #[arg(short = 'j', long, default_value_t = 32,
              value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
        jobs: usize,
        /// One JSON object per line (`--format json`).
        #[arg(long)]
        json: bool,
        #[arg(long, value_enum, default_value_t = commands::verify::VerifyFormat::Text)]
        format: commands::verify::VerifyFormat,
        #[command(flatten)]
        params: Params,
        #[command(flatten)]
        target: TargetArgs,
    },
    /// Put FILE's files and services back as they stood after an earlier run (ids as
    /// `envc log` prints them), from the store; recorded as a run of its own.
    Rollback {
        file: PathBuf,
        /// The run to go back to: its id, or a prefix of it that names only it.
        #[arg(long = "to", value_name = "RUN")]
        to: String,
        /// Show what it would do, and do nothing.
        #[arg(long)]
        dry_run: bool,
        /// Wait for another run of the same environment instead of failing.
        #[arg(long)]
        wait: bool,
        /// One JSON object per line: the plan's items, each node as it finishes, a summary.
        #[arg(long)]
        json: bool,
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
        /// Also remove what `adopt` lines took over (left as it was found otherwise).
        #[arg(long)]
        adopted: bool,
        #[command(flatten)]
        target: TargetArgs,
    },
    /// The environment's run history, newest first.
    Log {
        file: PathBuf,
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        shared: SharedArgs,
    },
    /// Write every Kubernetes object of the environment to DIR as canonical YAML (one file
    /// per object, and a kustomization.yaml listing them) for `kubectl apply -k` or a GitOps
    /// repository. Deferred values come from the environment's records; files a previous
    /// render listed that left the environment are removed.
    Render {
        file: PathBuf,
        #[arg(long, value_name = "DIR")]
        out: PathBuf,
        /// Write every object even before the values it reads are built, each such value
        /// as `<known after build: NODE.OUTPUT>`; exit 7 when one was written.
        #[arg(long)]
        preview: bool,
        #[command(flatten)]
        params: Params,
        #[command(flatten)]
        shared: SharedArgs,
    },
    /// The environment's outputs as of its last build.
    Output {
        file: PathBuf,
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        shared: SharedArgs,
    },
    /// The store beside FILE (or `$ENVC_STORE`).
    Store {
        #[command(subcommand)]
        command: StoreCommand,
    },
    /// Signing keys of the binary cache.
    Key {
        #[command(subcommand)]
        command: KeyCommand,
    },
    /// The binary cache of build outputs (images), shared between machines.
    Cache {
        #[command(subcommand)]
        command: CacheCommand,
    },
    /// Free an environment whose shared lock a dead runner left behind (a run with --wait
    /// also takes it over once it has seen it unrenewed for its lease).
    Unlock {
        file: PathBuf,
        /// Required: says you checked that the holder is not running (forcing the lock
        /// open under a live run lets two runs change the same targets at once).
        #[arg(long, required = true)]
        force: bool,
        #[command(flatten)]
        shared: SharedArgs,
    },
    /// The environment's deploy state.
    State {
        #[command(subcommand)]
        command: StateCommand,
    },
    /// Secrets: values the source names with `secret("NAME")` and envc never stores.
    Secret {
        #[command(subcommand)]
        command: SecretCommand,
    },
}

/// The command line as clap parses it, with the exit codes and environment variables after
/// the top-level `--help`.
pub fn command() -> clap::Command {
    Cli::command().after_long_help(crate::help::after_long_help())
}

pub fn main() -> ExitCode {
    let cli = Cli::from_arg_matches(&command().get_matches()).unwrap_or_else(|e| e.exit());
    // Before any thread starts (so no one reads the environment as it changes): the tools
    // envc runs are found where Debian puts them, even from a PATH without /usr/sbin.
    std::env::set_var(
        "PATH",
        envc_executor::with_system_dirs(std::env::var_os("PATH").as_deref()),
    );
    // Deeply nested input is bounded by the parser and the evaluator's limits; the large
    // stack makes those limits, not the platform's default stack, the ones that apply.
    let worker = std::thread::Builder::new()
        .stack_size(512 << 20)
        .spawn(move || run(cli));
    match worker.map(|h| h.join()) {
        Ok(Ok(exit)) => exit.into(),
        _ => {
            crate::output::errln!(
                "error: envc stopped on an internal error (a bug: please report it with the input)"
            );
            Exit::Bug.into()
        }
    }
}

fn run(cli: Cli) -> Exit {
    let ui = Ui {
        json: false,
        color: match cli.color {
            Color::Always => true,
            Color::Never => false,
            Color::Auto => {
                std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none()
            }
        },
    };
    let outcome = match cli.command {
        Command::Check { file, json, params } => commands::check::check(&file, json, &params, ui),
        Command::Test {
            paths,
            filter,
            json,
            junit,
            update,
        } => commands::test::test(
            &commands::test::TestArgs {
                paths,
                filter,
                json,
                junit,
                update,
            },
            ui,
        ),
        Command::Graph {
            file,
            format,
            params,
        } => commands::graph::graph_command(&file, format, &params, ui),
        Command::Show { file, node, params } => commands::graph::show(&file, &node, &params, ui),
        Command::Init { dir, ci } => commands::init::init(&dir, ci),
        Command::Completions { shell } => commands::manual::completions(command(), shell),
        // The pages have the exit codes and variables as sections of their own.
        Command::Man { dir } => commands::manual::man(Cli::command(), &dir),
        Command::Version { json } => Ok(crate::version::print(json)),
        Command::Fmt { check, files } => commands::fmt::fmt(&files, check, ui),
        Command::Lsp => crate::lsp::run()
            .map(|()| Exit::Ok)
            .map_err(|e| Failure::Input(format!("envc lsp: {e}"))),
        Command::Plan {
            file,
            json,
            format,
            refresh,
            targeted,
            params,
            target,
        } => {
            let format = if json { PlanFormat::Json } else { format };
            commands::plan::plan_command(&file, format, refresh, &targeted, &params, &target, ui)
        }
        Command::Build {
            file,
            jobs,
            keep_going,
            no_rollback,
            refresh,
            wait,
            json,
            push,
            locked,
            targeted,
            params,
            target,
        } => {
            let args = BuildArgs {
                jobs,
                keep_going,
                no_rollback,
                refresh,
                wait,
                json,
                push,
                locked,
                targeted,
            };
            commands::build::build(&file, &args, &params, &target, ui)
        }
        Command::Lock {
            command:
                Some(LockCommand::Diff {
                    old,
                    new,
                    env,
                    format,
                }),
            ..
        } => commands::lock::lock_diff(&old, &new, env.as_deref(), format, ui),
        Command::Lock {
            command: None,
            file,
            check,
            update,
            outdated,
            migrate,
            refresh,
            params,
        } => match commands::lock::one_file(&file) {
            Ok(file) if migrate => commands::lock::migrate(file),
            Ok(file) if outdated => commands::lock::outdated(file, refresh, &params, ui),
            Ok(file) => commands::lock::lock(file, check, update.as_deref(), &params, ui),
            Err(e) => Err(e),
        },
        Command::Why {
            file,
            node,
            json,
            params,
        } => commands::plan::why(&file, &node, json, &params, ui),
        Command::Drift {
            file,
            json,
            checks,
            params,
            target,
        } => commands::drift::drift(&file, json, checks, &params, &target, ui),
        Command::Verify {
            file,
            rebuild_only,
            lab_only,
            lab_hosts,
            against,
            keep,
            jobs,
            json,
            format,
            params,
            target,
        } => {
            let args = commands::verify::VerifyArgs {
                rebuild: !lab_only,
                lab: !rebuild_only,
                lab_hosts,
                against,
                keep,
                jobs,
                format: if json {
                    commands::verify::VerifyFormat::Json
                } else {
                    format
                },
            };
            commands::verify::verify(&file, &args, &params, &target, ui)
        }
        Command::Destroy {
            file,
            yes,
            wait,
            json,
            adopted,
            target,
        } => commands::build::destroy(&file, yes, wait, json, adopted, &target),
        Command::Rollback {
            file,
            to,
            dry_run,
            wait,
            json,
            target,
        } => commands::rollback::rollback(&file, &to, dry_run, wait, json, &target),
        Command::Log { file, json, shared } => commands::history::log(&file, json, &shared),
        Command::Output { file, json, shared } => commands::history::output(&file, json, &shared),
        Command::Render {
            file,
            out,
            preview,
            params,
            shared,
        } => commands::render::render(&file, &out, preview, &params, &shared, ui),
        Command::Key {
            command: KeyCommand::Generate { name, out },
        } => commands::team::key_generate(&name, &out),
        Command::Secret { command } => match command {
            SecretCommand::Set { file, name, shared } => {
                commands::secret::set(&file, &name, &shared)
            }
            SecretCommand::Rm { file, name, shared } => commands::secret::rm(&file, &name, &shared),
            SecretCommand::Edit { file, shared } => commands::secret::edit(&file, &shared),
            SecretCommand::List {
                file,
                params,
                shared,
            } => commands::secret::list(&file, &params, &shared, ui),
            SecretCommand::Keygen { out } => commands::secret::keygen(&out),
        },
        Command::Cache { command } => match command {
            CacheCommand::Push {
                file,
                params,
                shared,
            } => commands::team::cache_push(&file, &params, &shared, ui),
            CacheCommand::Pull {
                file,
                params,
                shared,
            } => commands::team::cache_pull(&file, &params, &shared, ui),
            CacheCommand::Verify {
                file,
                all,
                params,
                shared,
            } => commands::team::cache_verify(&file, all, &params, &shared, ui),
        },
        Command::Unlock { file, shared, .. } => commands::team::unlock(&file, &shared),
        Command::State {
            command: StateCommand::Migrate { file, to, shared },
        } => commands::team::migrate(&file, &to, &shared),
        Command::Store {
            command: StoreCommand::Verify { file, repair },
        } => commands::store::verify(&file, repair),
    };
    outcome.unwrap_or_else(Failure::report)
}
