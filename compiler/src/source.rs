//! Sources: the loader trait through which the compiler reads the project's files (the only
//! way it does I/O), the source map used to render diagnostics, and project paths.

use std::rc::Rc;

use envc_lang::FileId;

/// Reads files of the project. Paths are relative to the root file's directory,
/// `/`-separated and normalised by [`join_relative`]: no `.`, and `..` only leading, for a
/// file beside that directory but still under the project root ([`ProjectRoot`]).
/// The executor reads templates and `source` files through the same trait, from its
/// worker threads (hence `Sync`).
pub trait SourceLoader: Sync {
    fn read(&self, path: &str) -> Result<Vec<u8>, LoadError>;

    /// Where the project root is, which bounds the paths: by default the root file's
    /// directory. Finding it on disk is the loader's I/O (the executor's `FsLoader`).
    fn project_root(&self) -> ProjectRoot {
        ProjectRoot::default()
    }

    /// `read`, for a file that may hold at most `limit` bytes. Loaders over real files stop
    /// reading past the limit (a device or a huge sparse file would otherwise be read whole);
    /// an in-memory loader already holds the bytes, and the caller checks their length.
    fn read_at_most(&self, path: &str, limit: u64) -> Result<Vec<u8>, LoadError> {
        let _ = limit;
        self.read(path)
    }
}

/// How the project root was found: named when a path leaves it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RootFoundBy {
    /// The nearest directory at or above the root file's that holds an `envc.toml`.
    EnvcToml,
    /// Else the git work tree the root file is in (its directory holds `.git`).
    Git,
    /// Else the root file's directory itself.
    #[default]
    RootFile,
}

/// The directory every file of an environment lies under, and where the root file's
/// directory is in it. Paths stay relative to the root file's directory (so that a project
/// whose root file sits at its root names, and hashes, every file as before); they may go
/// up (`../lib/x.env`) as far as the project root.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProjectRoot {
    /// The root file's directory below the project root, segment by segment (empty: the
    /// root file sits in the project root).
    pub base: Vec<String>,
    /// The project root as messages show it (a directory on disk).
    pub shown: String,
    pub found_by: RootFoundBy,
}

impl ProjectRoot {
    /// Where the project root is and how it was found, as a sentence.
    pub fn describe(&self) -> String {
        match self.found_by {
            RootFoundBy::EnvcToml => format!(
                "The project root is `{}`, the nearest directory above the root file that holds an envc.toml.",
                self.shown
            ),
            RootFoundBy::Git => format!(
                "The project root is `{}`, the git work tree the root file is in (no envc.toml above it).",
                self.shown
            ),
            RootFoundBy::RootFile => "The project root is the root file's directory: there is no envc.toml or .git above it.".into(),
        }
    }

    /// What to do about a path that leaves it.
    pub fn hint(&self) -> &'static str {
        match self.found_by {
            RootFoundBy::RootFile => "put an envc.toml in a directory that holds both files (it marks the project root), or move the file under the root file's directory",
            _ => "move the file under the project root, or mark a higher directory as the root with an envc.toml",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LoadError {
    NotFound,
    /// The path resolves (through a symlink) outside the project.
    OutsideProject,
    Other(String),
}

impl std::fmt::Display for LoadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LoadError::NotFound => f.write_str("no such file"),
            LoadError::OutsideProject => f.write_str("it resolves outside the project directory"),
            LoadError::Other(e) => f.write_str(e),
        }
    }
}

/// An in-memory project, for tests, benchmarks and fuzzing.
#[derive(Default, Clone)]
pub struct MemoryLoader {
    /// By path relative to the root file's directory (`../lib/x.env` when `project` puts
    /// that directory below the project root).
    pub files: std::collections::BTreeMap<String, Vec<u8>>,
    pub project: ProjectRoot,
}

impl MemoryLoader {
    pub fn new<'a>(files: impl IntoIterator<Item = (&'a str, &'a str)>) -> MemoryLoader {
        MemoryLoader {
            files: files
                .into_iter()
                .map(|(p, s)| (p.to_string(), s.as_bytes().to_vec()))
                .collect(),
            project: ProjectRoot::default(),
        }
    }
}

impl SourceLoader for MemoryLoader {
    fn read(&self, path: &str) -> Result<Vec<u8>, LoadError> {
        self.files.get(path).cloned().ok_or(LoadError::NotFound)
    }

    fn project_root(&self) -> ProjectRoot {
        self.project.clone()
    }
}

#[derive(Clone, Debug)]
pub struct SourceFile {
    /// Project-relative path, or `std/<name>` for the embedded library.
    pub name: String,
    pub text: Rc<str>,
    /// Named as the user gave it, not relative to the project (a policy pack's files): a
    /// renderer shows the name as it is.
    pub verbatim: bool,
    /// The byte offset where each line starts: a place's line and column without a scan
    /// from the top of the file (thousands of diagnostics in a long file cost linear time).
    line_starts: Rc<[usize]>,
}

/// A directory of policies kept apart from the environments it judges (`envc check
/// --policy DIR`), read by the caller: its top-level `.env` files are loaded as modules
/// of the program, so their policies apply to the graph; files below are for them to
/// import.
#[derive(Clone, Debug, Default)]
pub struct PolicyPack {
    /// As the user named it: its files are shown as `DIR/FILE`.
    pub dir: String,
    /// Its `.env` files by `/`-separated path relative to `dir`.
    pub files: std::collections::BTreeMap<String, Vec<u8>>,
}

#[derive(Clone, Debug, Default)]
pub struct SourceMap {
    pub files: Vec<SourceFile>,
}

impl SourceMap {
    pub fn add(&mut self, name: String, text: Rc<str>) -> FileId {
        let line_starts = std::iter::once(0)
            .chain(text.match_indices('\n').map(|(i, _)| i + 1))
            .collect();
        self.files.push(SourceFile {
            name,
            text,
            verbatim: false,
            line_starts,
        });
        (self.files.len() - 1) as FileId
    }

    /// [`SourceMap::add`] for a file not named relative to the project.
    pub fn add_verbatim(&mut self, name: String, text: Rc<str>) -> FileId {
        let id = self.add(name, text);
        self.files[id as usize].verbatim = true;
        id
    }

    pub fn get(&self, id: FileId) -> &SourceFile {
        &self.files[id as usize]
    }

    /// Line and column (1-based, columns in characters) of byte `offset` in `file`: the one
    /// computation behind every `FILE:LINE:COL`, in diagnostics and in check results.
    pub fn line_col(&self, file: FileId, offset: usize) -> (usize, usize) {
        let f = self.get(file);
        let text = &f.text;
        let mut offset = offset.min(text.len());
        while offset > 0 && !text.is_char_boundary(offset) {
            offset -= 1;
        }
        // Lines that start at or before it: its line, 1-based (the first starts at 0).
        let line = f.line_starts.partition_point(|&s| s <= offset);
        let start = f.line_starts[line - 1];
        let col = text[start..offset].chars().count() + 1;
        (line, col)
    }

    /// `NAME:LINE:COL` (the project-relative name) of byte `offset` in `file`.
    pub fn location(&self, file: FileId, offset: usize) -> String {
        let (line, col) = self.line_col(file, offset);
        format!("{}:{line}:{col}", self.get(file).name)
    }
}

/// Joins `rel` (`./x.env`, `../lib/y.env`) onto the directory of `from` and normalises it,
/// relative to the root file's directory as every path is: a file under that directory is
/// named as it always was, one beside it with leading `..`. `None` when the result would
/// leave the project root.
pub fn join_relative(root: &ProjectRoot, from: &str, rel: &str) -> Option<String> {
    // From the project root, then back relative to the root file's directory.
    let mut parts: Vec<&str> = root.base.iter().map(String::as_str).collect();
    let mut from: Vec<&str> = from.split('/').collect();
    from.pop(); // the file name
    for seg in from.into_iter().chain(rel.split('/')) {
        match seg {
            "" | "." => {}
            ".." => {
                parts.pop()?;
            }
            s => parts.push(s),
        }
    }
    let common = (root.base.iter().zip(&parts))
        .take_while(|(a, b)| a.as_str() == **b)
        .count();
    let ups = std::iter::repeat_n("..", root.base.len() - common);
    Some(
        ups.chain(parts[common..].iter().copied())
            .collect::<Vec<_>>()
            .join("/"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_paths() {
        let check = |base: &str, from, rel, expected: Option<&str>| {
            let root = ProjectRoot {
                base: base
                    .split('/')
                    .filter(|s| !s.is_empty())
                    .map(String::from)
                    .collect(),
                ..ProjectRoot::default()
            };
            assert_eq!(
                join_relative(&root, from, rel).as_deref(),
                expected,
                "{base:?} {from:?} {rel:?}"
            )
        };
        // The root file in the project root: nothing leaves it.
        check("", "prod.env", "./lib.env", Some("lib.env"));
        check("", "a/b/prod.env", "../c.env", Some("a/c.env"));
        check("", "a/prod.env", "./x/./y.env", Some("a/x/y.env"));
        check("", "prod.env", "../escape.env", None);
        check("", "a/prod.env", "../../escape.env", None);
        // The root file in `app/`: files under it are named as before, those beside it
        // with `..`, and nothing leaves the project root.
        check("app", "prod.env", "./lib.env", Some("lib.env"));
        check(
            "app",
            "prod.env",
            "../network/core.env",
            Some("../network/core.env"),
        );
        check("app", "prod.env", "../../escape.env", None);
        check(
            "app",
            "../network/core.env",
            "./lib.env",
            Some("../network/lib.env"),
        );
        check(
            "app",
            "../network/core.env",
            "../app/prod.env",
            Some("prod.env"),
        );
        check("app", "../network/core.env", "../../x.env", None);
        check("a/b", "prod.env", "../../c/d.env", Some("../../c/d.env"));
        check("a/b", "prod.env", "../c.env", Some("../c.env"));
        check("a/b", "../../c/d.env", "../a/b/x/y.env", Some("x/y.env"));
    }
}
