//! Sources: the loader trait through which the compiler reads the project's files (the only
//! way it does I/O), the source map used to render diagnostics, and project paths.

use std::rc::Rc;

use envc_lang::FileId;

/// Reads files of the project. Paths are project-relative, `/`-separated and normalised
/// (no `.`/`..`, never leaving the project); the project root is the root file's directory.
/// The executor reads templates and `source` files through the same trait, from its
/// worker threads (hence `Sync`).
pub trait SourceLoader: Sync {
    fn read(&self, path: &str) -> Result<Vec<u8>, LoadError>;

    /// `read`, for a file that may hold at most `limit` bytes. Loaders over real files stop
    /// reading past the limit (a device or a huge sparse file would otherwise be read whole);
    /// an in-memory loader already holds the bytes, and the caller checks their length.
    fn read_at_most(&self, path: &str, limit: u64) -> Result<Vec<u8>, LoadError> {
        let _ = limit;
        self.read(path)
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
    pub files: std::collections::BTreeMap<String, Vec<u8>>,
}

impl MemoryLoader {
    pub fn new<'a>(files: impl IntoIterator<Item = (&'a str, &'a str)>) -> MemoryLoader {
        MemoryLoader {
            files: files
                .into_iter()
                .map(|(p, s)| (p.to_string(), s.as_bytes().to_vec()))
                .collect(),
        }
    }
}

impl SourceLoader for MemoryLoader {
    fn read(&self, path: &str) -> Result<Vec<u8>, LoadError> {
        self.files.get(path).cloned().ok_or(LoadError::NotFound)
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

/// Joins `rel` (`./x.env`, `../lib/y.env`) onto the directory of `from` and normalises it.
/// `None` when the result would leave the project.
pub fn join_relative(from: &str, rel: &str) -> Option<String> {
    let mut parts: Vec<&str> = from.split('/').collect();
    parts.pop(); // the file name
    for seg in rel.split('/') {
        match seg {
            "" | "." => {}
            ".." => {
                parts.pop()?;
            }
            s => parts.push(s),
        }
    }
    Some(parts.join("/"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_paths() {
        let check = |from, rel, expected: Option<&str>| {
            assert_eq!(join_relative(from, rel).as_deref(), expected)
        };
        check("prod.env", "./lib.env", Some("lib.env"));
        check("a/b/prod.env", "../c.env", Some("a/c.env"));
        check("a/prod.env", "./x/./y.env", Some("a/x/y.env"));
        check("prod.env", "../escape.env", None);
    }
}
