//! Exit codes, from one enum, and the one place command errors are rendered (also in
//! docs/cli.md): 0 success; 1 the input has problems (diagnostics on stderr) or `fmt
//! --check` found unformatted files; 2 bad command-line usage (clap's); 3 drift found or a
//! stale lockfile; 4 a step failed or a target was unreachable; 5 the environment is
//! locked by another envc; 6 `drift` found nothing but could not check every node (a
//! target was unreachable); 7 `render --preview` wrote placeholders; 8 `store verify`
//! found runs that can no longer be rolled back to; 130 interrupted; 101 an internal error
//! (a bug).

use std::process::ExitCode;

use envc_executor::{RunError, SessionError, StoreError};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exit {
    Ok,
    /// Bad input: diagnostics, a missing store, a node that does not exist.
    Input,
    /// The command line is wrong: clap says so and exits with it before anything runs.
    Usage,
    /// Drift found, `lock --check` found the lockfile stale, or `lock --outdated` a
    /// pending security update.
    Drift,
    /// A step failed or a target could not be reached.
    Failed,
    /// Another envc holds the environment's lock.
    Locked,
    /// `drift` found none, but some nodes could not be checked (their target was
    /// unreachable): a check that could not run is not a pass.
    Unchecked,
    /// `render --preview` wrote objects that hold placeholders: readable, not deliverable.
    Preview,
    /// `store verify` found runs that can no longer be rolled back to (an object they would
    /// put back is gone or damaged), and nothing that repair would change: the store works
    /// for builds, but `rollback --to` those runs would be refused.
    Unrestorable,
    Interrupted,
    /// envc itself broke (a panic).
    Bug,
}

impl Exit {
    pub fn code(self) -> u8 {
        match self {
            Exit::Ok => 0,
            Exit::Input => 1,
            Exit::Usage => 2,
            Exit::Drift => 3,
            Exit::Failed => 4,
            Exit::Locked => 5,
            Exit::Unchecked => 6,
            Exit::Preview => 7,
            Exit::Unrestorable => 8,
            Exit::Interrupted => 130,
            Exit::Bug => 101,
        }
    }
}

impl Exit {
    /// Every exit code, in order: `envc --help` and the man pages (EXIT STATUS) list them.
    pub const ALL: [Exit; 11] = [
        Exit::Ok,
        Exit::Input,
        Exit::Usage,
        Exit::Drift,
        Exit::Failed,
        Exit::Locked,
        Exit::Unchecked,
        Exit::Preview,
        Exit::Unrestorable,
        Exit::Bug,
        Exit::Interrupted,
    ];

    /// What the code means, in a line (docs/cli.md has the details).
    pub fn meaning(self) -> &'static str {
        match self {
            Exit::Ok => "success",
            Exit::Input => {
                "bad input: diagnostics, an invalid lockfile or store, an unknown \
                 node; or `fmt --check` found an unformatted file"
            }
            Exit::Usage => "the command line is wrong",
            Exit::Drift => {
                "a difference: `drift` found one, `verify` found one, `lock --check` found the \
                 lockfile stale, `store verify` or `cache verify` found damage"
            }
            Exit::Failed => {
                "a step failed, a host, the shared cache or state could not be reached, or a \
                 tool the build needs is missing"
            }
            Exit::Locked => {
                "another envc holds the environment (or moved its shared state under this run)"
            }
            Exit::Unchecked => {
                "`drift` or `verify` found no difference but could not check every node"
            }
            Exit::Preview => "`render --preview` wrote objects holding placeholders",
            Exit::Unrestorable => {
                "`store verify` found runs that can no longer be rolled back to, and nothing to \
                 repair"
            }
            Exit::Bug => "an internal error (a bug: please report it with the input)",
            Exit::Interrupted => "interrupted (SIGINT)",
        }
    }
}

impl From<Exit> for ExitCode {
    fn from(e: Exit) -> ExitCode {
        ExitCode::from(e.code())
    }
}

/// Why a command stopped early.
#[derive(Debug)]
pub enum Failure {
    /// Its diagnostics are already on stderr.
    Reported(Exit),
    /// Bad input, said in one message.
    Input(String),
    /// Errors, each said on its own (`error: …`), and the exit code they mean: a stale or
    /// missing lockfile is drift (3), a lock that could not resolve is bad input (1).
    Errors {
        errors: Vec<String>,
        exit: Exit,
    },
    Session(SessionError),
}

impl From<SessionError> for Failure {
    fn from(e: SessionError) -> Failure {
        Failure::Session(e)
    }
}

impl Failure {
    /// Prints the error (unless it is already printed) and gives the exit code.
    pub fn report(self) -> Exit {
        match self {
            Failure::Reported(exit) => exit,
            Failure::Input(message) => {
                crate::output::errln!("error: {message}");
                Exit::Input
            }
            Failure::Errors { errors, exit } => {
                for e in errors {
                    crate::output::errln!("error: {e}");
                }
                exit
            }
            Failure::Session(e) => {
                crate::output::errln!("error: {e}");
                match e {
                    // Another runner holds the environment, or moved its state while this
                    // one ran (its lock forced open): the loser of a race exits 5.
                    SessionError::Locked(_) => Exit::Locked,
                    SessionError::Run { ref error, .. }
                        if matches!(
                            **error,
                            RunError::StateMoved { .. }
                                | RunError::Store(StoreError::LockLost { .. })
                        ) =>
                    {
                        Exit::Locked
                    }
                    SessionError::Run { .. }
                    | SessionError::MissingTools(_)
                    | SessionError::Remote(_)
                    | SessionError::Store {
                        error: StoreError::Remote(_) | StoreError::LockLost { .. },
                        ..
                    } => Exit::Failed,
                    SessionError::Store { .. }
                    | SessionError::State { .. }
                    | SessionError::NeverBuilt { .. }
                    | SessionError::Config(_)
                    | SessionError::Secrets(_)
                    | SessionError::Rollback(_)
                    | SessionError::Io(_) => Exit::Input,
                }
            }
        }
    }
}

/// What every command returns: how it ended, or why it stopped early.
pub type Outcome = Result<Exit, Failure>;
