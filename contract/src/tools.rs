//! The programs on this machine that node kinds need, checked before a run starts: a missing
//! `qemu-img` is one clear error naming the tool and its package before anything changes,
//! not a failed VM halfway through a build.

use std::collections::BTreeMap;
use std::fmt;
use std::process::{Command, Stdio};

use envc_compiler::types::NodeKind;

/// A program envc runs on this machine: its name, an argument that makes it print its
/// version and exit 0 (`None`: it has none, and starting it is the check), and the Debian
/// package that provides it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Tool {
    pub name: &'static str,
    pub version_arg: Option<&'static str>,
    pub package: &'static str,
}

pub const fn tool(
    name: &'static str,
    version_arg: Option<&'static str>,
    package: &'static str,
) -> Tool {
    Tool {
        name,
        version_arg,
        package,
    }
}

/// A tool that did not run, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MissingTool {
    pub tool: Tool,
    pub kinds: Vec<NodeKind>,
    pub why: ToolFault,
}

/// Why a tool did not run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ToolFault {
    NotInstalled,
    /// Starting it failed for another reason than its absence (the system's message).
    CannotRun(String),
    /// It ran with its version argument and did not exit 0.
    Failed {
        name: &'static str,
        arg: &'static str,
        status: std::process::ExitStatus,
    },
}

impl fmt::Display for ToolFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ToolFault::NotInstalled => f.write_str("it is not installed"),
            ToolFault::CannotRun(e) => write!(f, "it cannot be run: {e}"),
            ToolFault::Failed { name, arg, status } => {
                write!(f, "`{name} {arg}` failed ({status})")
            }
        }
    }
}

impl fmt::Display for MissingTool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kinds: Vec<&str> = self.kinds.iter().map(|k| k.name()).collect();
        write!(
            f,
            "`{}` is needed by the {} nodes about to run, and {} (it comes with Debian's `{}`)",
            self.tool.name,
            kinds.join(" and "),
            self.why,
            self.tool.package
        )
    }
}

/// Runs once each tool that nodes of these kinds need (each kind with its tools, as
/// `kinds::of(kind).tools()` gives them); the ones that do not run.
pub fn missing_tools(
    needs: impl IntoIterator<Item = (NodeKind, &'static [Tool])>,
) -> Vec<MissingTool> {
    let needs: BTreeMap<NodeKind, &'static [Tool]> = needs.into_iter().collect();
    let mut needed: Vec<(Tool, Vec<NodeKind>)> = Vec::new();
    for (kind, tools) in &needs {
        for t in *tools {
            match needed.iter_mut().find(|(n, _)| n == t) {
                Some((_, ks)) => ks.push(*kind),
                None => needed.push((*t, vec![*kind])),
            }
        }
    }
    needed
        .into_iter()
        .filter_map(|(tool, kinds)| {
            let why = runs(&tool).err()?;
            Some(MissingTool { tool, kinds, why })
        })
        .collect()
}

fn runs(tool: &Tool) -> Result<(), ToolFault> {
    let Some(arg) = tool.version_arg else {
        return on_path(tool.name)
            .then_some(())
            .ok_or(ToolFault::NotInstalled);
    };
    let status = Command::new(tool.name)
        .arg(arg)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => ToolFault::NotInstalled,
            _ => ToolFault::CannotRun(e.to_string()),
        })?;
    if status.success() {
        Ok(())
    } else {
        Err(ToolFault::Failed {
            name: tool.name,
            arg,
            status,
        })
    }
}

/// Where Debian puts the administrator's programs envc runs, whether or not the `PATH` envc
/// was started with names them: an ordinary user's login `PATH` has no `/usr/sbin`, where
/// `mke2fs`, `debugfs` and `e2fsck` are, so a first image build there failed with "not
/// installed" (tests/machines.rs builds as such a user, with such a `PATH`).
pub const SYSTEM_DIRS: &[&str] = &["/usr/local/sbin", "/usr/sbin", "/sbin"];

/// `path` with each of [`SYSTEM_DIRS`] it lacks appended, in that order: what is already
/// there keeps its place, so a user's own choice of a tool still wins.
pub fn with_system_dirs(path: Option<&std::ffi::OsStr>) -> std::ffi::OsString {
    let mut dirs: Vec<std::path::PathBuf> = path
        .map(|p| std::env::split_paths(p).collect())
        .unwrap_or_default();
    for d in SYSTEM_DIRS {
        if !dirs.iter().any(|x| x == std::path::Path::new(d)) {
            dirs.push(d.into());
        }
    }
    std::env::join_paths(dirs).unwrap_or_else(|_| path.map(ToOwned::to_owned).unwrap_or_default())
}

/// An executable file of that name in a `$PATH` directory (for tools with no harmless
/// version argument: `ssh-keygen` with none would start making a key).
fn on_path(name: &str) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::env::var_os("PATH").is_some_and(|path| {
        std::env::split_paths(&path).any(|dir| {
            std::fs::metadata(dir.join(name))
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tool that is surely absent is reported with its package; one that surely runs is
    /// not (`sh` stands in for an installed tool).
    #[test]
    fn the_system_directories_are_added_after_what_path_has() {
        let check = |path: Option<&str>, expected: &str| {
            let got = with_system_dirs(path.map(std::ffi::OsStr::new));
            assert_eq!(got.to_str(), Some(expected), "{path:?}");
        };
        // An ordinary user's login PATH on Debian.
        check(
            Some("/usr/local/bin:/usr/bin:/bin:/usr/games"),
            "/usr/local/bin:/usr/bin:/bin:/usr/games:/usr/local/sbin:/usr/sbin:/sbin",
        );
        check(
            Some("/opt/shims:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"),
            "/opt/shims:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        );
        check(None, "/usr/local/sbin:/usr/sbin:/sbin");
    }

    #[test]
    fn reports_what_does_not_run() {
        let absent = tool("envc-no-such-tool", Some("--version"), "envc-test");
        assert_eq!(
            runs(&absent).map_err(|e| e.to_string()),
            Err("it is not installed".to_string()),
            "an absent tool"
        );
        assert_eq!(
            runs(&tool("sh", Some("-c"), "dash")).map_err(|e| e.to_string()),
            Err("`sh -c` failed (exit status: 2)".into())
        );
        assert_eq!(runs(&tool("true", Some("--version"), "coreutils")), Ok(()));
        assert_eq!(runs(&tool("sh", None, "dash")), Ok(()));
        assert_eq!(
            runs(&tool("envc-no-such-tool", None, "envc-test")).map_err(|e| e.to_string()),
            Err("it is not installed".to_string())
        );
        let m = MissingTool {
            tool: tool("qemu-img", Some("--version"), "qemu-utils"),
            kinds: vec![NodeKind::Vm],
            why: ToolFault::NotInstalled,
        };
        assert_eq!(
            m.to_string(),
            "`qemu-img` is needed by the vm nodes about to run, and it is not installed (it comes with Debian's `qemu-utils`)"
        );
    }
}
