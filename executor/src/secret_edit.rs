//! `envc secret edit`: the secrets' plaintext in a file an editor can open, for as short a
//! time as can be. The file is 0600 in a directory of its own in `/dev/shm` (memory, where
//! there is one), held while the editor runs; it goes when the editor ends, and when envc
//! is told to stop (SIGTERM, SIGHUP: the editor is stopped too). SIGINT is left to the
//! editor, as git leaves it: a Ctrl-C typed into an editor is the editor's. A run killed
//! outright (SIGKILL) cannot clean up; the next `secret edit` removes what it left.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::held::HeldDir;

const PREFIX: &str = "envc-secrets-";

/// Why an edit changed nothing.
#[derive(Debug)]
pub enum EditError {
    /// The file for the editor could not be made or read back.
    File(std::io::Error),
    /// The editor could not be started.
    Start {
        editor: String,
        error: std::io::Error,
    },
    /// The editor ended without success.
    Editor { editor: String, status: String },
    /// envc was told to stop while the editor ran (`SIGTERM`, `SIGHUP`).
    Stopped { signal: &'static str },
}

impl std::fmt::Display for EditError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EditError::File(e) => write!(f, "cannot prepare the file to edit: {e}"),
            EditError::Start { editor, error } => {
                write!(f, "cannot start the editor `{editor}`: {error}")
            }
            EditError::Editor { editor, status } => write!(
                f,
                "the editor `{editor}` exited with {status}; the secrets file was not changed"
            ),
            EditError::Stopped { signal } => write!(
                f,
                "stopped by {signal} while the editor ran: the editor was stopped, the plaintext removed, and the secrets file not changed"
            ),
        }
    }
}

impl std::error::Error for EditError {}

/// The editor people asked for: `$VISUAL`, else `$EDITOR`, else `vi` (an empty variable
/// is no choice).
pub fn editor() -> String {
    ["VISUAL", "EDITOR"]
        .into_iter()
        .filter_map(|v| std::env::var(v).ok())
        .find(|e| !e.trim().is_empty())
        .unwrap_or_else(|| "vi".into())
}

/// Where the plaintext goes: memory when the machine has a `/dev/shm`.
fn parent() -> PathBuf {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    }
}

/// Opens `text` in the editor and returns what it holds when the editor ends well.
pub fn edit(text: &str) -> Result<String, EditError> {
    let dir = HeldDir::new(&parent(), PREFIX).map_err(EditError::File)?;
    let path = dir.path().join("secrets.toml");
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
        .map_err(EditError::File)?;
    file.write_all(text.as_bytes()).map_err(EditError::File)?;
    file.sync_all().map_err(EditError::File)?;
    drop(file);
    let editor = editor();
    run_editor(&editor, &path)?;
    // `dir` goes when this returns, whichever way: with it, the plaintext.
    std::fs::read_to_string(&path).map_err(EditError::File)
}

fn run_editor(editor: &str, path: &Path) -> Result<(), EditError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(EditError::File)?;
    runtime.block_on(async {
        use tokio::signal::unix::{signal, SignalKind};
        // Handlers first: from here on these signals come to this loop, not the default
        // action that would end envc with the plaintext on disk.
        let mut term = signal(SignalKind::terminate()).map_err(EditError::File)?;
        let mut hup = signal(SignalKind::hangup()).map_err(EditError::File)?;
        let mut int = signal(SignalKind::interrupt()).map_err(EditError::File)?;
        let mut child = tokio::process::Command::new("sh")
            .args(["-c", "exec $0 \"$1\"", editor])
            .arg(path)
            .kill_on_drop(true)
            .spawn()
            .map_err(|error| EditError::Start {
                editor: editor.to_string(),
                error,
            })?;
        let stopped = loop {
            tokio::select! {
                status = child.wait() => {
                    let status = status.map_err(EditError::File)?;
                    return if status.success() {
                        Ok(())
                    } else {
                        Err(EditError::Editor { editor: editor.to_string(), status: status.to_string() })
                    };
                }
                _ = term.recv() => break ("SIGTERM", libc::SIGTERM),
                _ = hup.recv() => break ("SIGHUP", libc::SIGHUP),
                // The editor's: it stops or goes on as it decides.
                _ = int.recv() => {}
            }
        };
        // The editor gets the same signal (it may restore the terminal), then, if it
        // lingers, SIGKILL.
        if let Some(pid) = child.id().and_then(|p| i32::try_from(p).ok()) {
            // SAFETY: kill has no memory preconditions; `pid` is our own child, not reaped.
            unsafe { libc::kill(pid, stopped.1) };
        }
        if tokio::time::timeout(Duration::from_secs(5), child.wait())
            .await
            .is_err()
        {
            let _ = child.kill().await;
        }
        Err(EditError::Stopped { signal: stopped.0 })
    })
}
