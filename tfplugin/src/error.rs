//! What can go wrong between envc and a provider process. Each error names the provider's
//! executable and, where the process said something on stderr, its last lines: a provider
//! that fails to start says why there, not in the protocol.

use std::fmt;
use std::path::PathBuf;

/// A value that does not fit its type, or bytes that are not a value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ValueError(String);

impl ValueError {
    pub fn new(message: impl Into<String>) -> ValueError {
        ValueError(message.into())
    }
}

impl fmt::Display for ValueError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ValueError {}

/// What is wrong with starting or reaching a provider, as a sentence; [`PluginError`] adds
/// which provider it is and what it said on stderr.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem(pub String);

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[derive(Debug)]
pub enum PluginError {
    /// The executable could not be run at all.
    Start {
        executable: PathBuf,
        source: std::io::Error,
    },
    /// It ran but did not hand back an address envc can use.
    Handshake {
        executable: PathBuf,
        problem: String,
        stderr: Vec<String>,
    },
    /// The address it gave could not be reached, or TLS with it failed.
    Connect {
        executable: PathBuf,
        problem: String,
        stderr: Vec<String>,
    },
    /// A call failed in transport or was refused by the provider's gRPC server.
    Rpc {
        executable: PathBuf,
        method: &'static str,
        status: Box<tonic::Status>,
        stderr: Vec<String>,
    },
    /// A value envc sent or the provider answered does not fit the schema.
    Value {
        executable: PathBuf,
        method: &'static str,
        error: ValueError,
    },
    /// The call needs something the schema does not have (a resource type, a schema).
    Schema {
        executable: PathBuf,
        problem: String,
    },
}

impl PluginError {
    pub fn executable(&self) -> &std::path::Path {
        match self {
            PluginError::Start { executable, .. }
            | PluginError::Handshake { executable, .. }
            | PluginError::Connect { executable, .. }
            | PluginError::Rpc { executable, .. }
            | PluginError::Value { executable, .. }
            | PluginError::Schema { executable, .. } => executable,
        }
    }

    /// True where the call may succeed if made again: the provider process went away or
    /// the transport broke, not a refusal.
    pub fn is_transport(&self) -> bool {
        match self {
            PluginError::Connect { .. } => true,
            PluginError::Rpc { status, .. } => {
                matches!(
                    status.code(),
                    tonic::Code::Unavailable | tonic::Code::Cancelled
                )
            }
            _ => false,
        }
    }
}

fn write_stderr(f: &mut fmt::Formatter<'_>, stderr: &[String]) -> fmt::Result {
    if !stderr.is_empty() {
        write!(f, "\nthe provider's last words on stderr:")?;
        for line in stderr {
            write!(f, "\n  {line}")?;
        }
    }
    Ok(())
}

impl fmt::Display for PluginError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PluginError::Start { executable, source } => write!(
                f,
                "cannot run the provider {}: {source} (check that the file exists and is executable for this platform)",
                executable.display()
            ),
            PluginError::Handshake { executable, problem, stderr } => {
                write!(f, "the provider {} did not start as a plugin: {problem}", executable.display())?;
                write_stderr(f, stderr)
            }
            PluginError::Connect { executable, problem, stderr } => {
                write!(f, "cannot reach the provider {}: {problem}", executable.display())?;
                write_stderr(f, stderr)
            }
            PluginError::Rpc { executable, method, status, stderr } => {
                write!(
                    f,
                    "the provider {} failed {method}: {} ({:?})",
                    executable.display(),
                    status.message(),
                    status.code()
                )?;
                write_stderr(f, stderr)
            }
            PluginError::Value { executable, method, error } => {
                write!(f, "{method} with the provider {}: {error}", executable.display())
            }
            PluginError::Schema { executable, problem } => {
                write!(f, "the provider {}: {problem}", executable.display())
            }
        }
    }
}

impl std::error::Error for PluginError {}
