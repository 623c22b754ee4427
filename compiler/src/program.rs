//! Loading a program: the root file and everything it imports, parsed, with import cycles
//! and unreadable imports reported at the `import` that names them.

use std::collections::BTreeMap;
use std::rc::Rc;

use envc_lang::ast::{self, ItemKind};
use envc_lang::{Diagnostic, FileId, Span};

use crate::source::{join_relative, LoadError, PolicyPack, ProjectRoot, SourceLoader, SourceMap};
use crate::stdlib;
use crate::types::ModuleId;

/// Source files larger than this are refused: spans are 32-bit, and no hand-written or
/// sensibly generated environment comes near it.
pub const MAX_SOURCE_BYTES: usize = 64 << 20;

/// Deeper import chains are refused rather than recursed into.
const MAX_IMPORT_DEPTH: usize = 64;

pub struct Module {
    pub file: FileId,
    /// Project-relative path (`lib/db.env`) or `std/debian`.
    pub path: String,
    pub ast: ast::Module,
    /// Alias → imported module.
    pub imports: BTreeMap<Rc<str>, (ModuleId, Span)>,
    /// Names whose definition failed and was reported (an import that did not load, an
    /// item that did not parse): uses of them are not errors again.
    pub broken_names: Vec<Rc<str>>,
    /// From the embedded standard library (whose paths may look like project paths).
    pub is_std: bool,
}

pub struct Program {
    pub sources: SourceMap,
    pub modules: Vec<Module>,
    pub root: ModuleId,
    /// Load and parse errors of every file.
    pub errors: Vec<Diagnostic>,
    /// Its `stack("…")` references, filled by [`crate::stack_load::resolve`].
    pub stacks: crate::stack::StackRefs,
}

/// How a policy pack's files are named inside the program: `PACK_PREFIX` + the pack's
/// index + `/` + the path in the pack. No project file can be named so (see `resolve`).
const PACK_PREFIX: &str = "policy pack ";

struct Loader<'l> {
    loader: &'l dyn SourceLoader,
    /// What bounds the project's paths (asked of the loader once).
    root: ProjectRoot,
    packs: &'l [PolicyPack],
    program: Program,
    by_path: BTreeMap<(bool, String), ModuleId>,
    /// The chain of imports being loaded: (path, file, span of the import) for cycles.
    stack: Vec<(String, bool, FileId, Span)>,
}

/// Loads `root` (project-relative) and its imports. Parse errors of every file are collected.
pub fn load(root: &str, loader: &dyn SourceLoader) -> Program {
    load_with_packs(root, loader, &[])
}

/// [`load`], plus the top-level files of each policy pack (and what they import).
pub fn load_with_packs(root: &str, loader: &dyn SourceLoader, packs: &[PolicyPack]) -> Program {
    let mut l = Loader {
        loader,
        root: loader.project_root(),
        packs,
        program: Program {
            sources: SourceMap::default(),
            modules: Vec::new(),
            root: 0,
            errors: Vec::new(),
            stacks: Default::default(),
        },
        by_path: BTreeMap::new(),
        stack: Vec::new(),
    };
    match l.loader.read_at_most(root, MAX_SOURCE_BYTES as u64) {
        Ok(bytes) => {
            let text = l.decode(root, bytes, None);
            let id = l.add_module(root.to_string(), text, false);
            l.program.root = id;
        }
        Err(e) => {
            // No file to point into: a label-less diagnostic; the CLI names the path.
            let fid = l.program.sources.add(root.to_string(), "".into());
            l.program.errors.push(
                Diagnostic::new("load::unreadable", format!("cannot read `{root}`: {e}"))
                    .label(fid, Span::at(0), "here")
                    .help("check the path given on the command line"),
            );
        }
    }
    for (i, pack) in packs.iter().enumerate() {
        for rel in pack.files.keys().filter(|r| !r.contains('/')) {
            let path = format!("{PACK_PREFIX}{i}/{rel}");
            if l.by_path.contains_key(&(false, path.clone())) {
                continue; // imported by an earlier file of the pack
            }
            if let Some(text) = l.read_pack_file(&path, None) {
                l.add_module(path, text, false);
            }
        }
    }
    l.program
}

impl<'l> Loader<'l> {
    /// A pack's file by its name in the program: its bytes and how it is shown (`DIR/REL`).
    fn pack_file(&self, path: &str) -> Option<(&'l [u8], String)> {
        let (i, rel) = split_pack_path(path)?;
        let pack = self.packs.get(i)?;
        Some((pack.files.get(rel)?, format!("{}/{rel}", pack.dir)))
    }

    /// The text of pack file `path` (see [`PACK_PREFIX`]); `None` (reported) if the pack
    /// has no such file.
    fn read_pack_file(&mut self, path: &str, at: Option<(FileId, Span)>) -> Option<Rc<str>> {
        match self.pack_file(path) {
            Some((bytes, shown)) => Some(self.decode(&shown, bytes.to_vec(), at)),
            None => {
                let (file, span) = at?;
                let rel = path.split_once('/').map_or(path, |(_, r)| r);
                self.program.errors.push(
                    Diagnostic::new(
                        "load::unreadable",
                        format!("cannot import `{rel}`: no such file in the policy pack"),
                    )
                    .label(file, span, "imported here")
                    .help("a policy pack imports its own `.env` files and `std/…`"),
                );
                None
            }
        }
    }

    /// The text of a file about to be added by `add_module` (which will give it the next
    /// file id: diagnostics here point into it).
    fn decode(&mut self, path: &str, bytes: Vec<u8>, at: Option<(FileId, Span)>) -> Rc<str> {
        if bytes.len() > MAX_SOURCE_BYTES {
            let mut d = Diagnostic::new("load::too-large", format!("`{path}` is too large to be a source file"))
                .message(format!("It has {} bytes; envc reads source files of up to {MAX_SOURCE_BYTES} bytes.", bytes.len()))
                .help("generate large inventories with comprehensions, or keep data in files named with path(…)");
            if let Some((f, s)) = at {
                d = d.label(f, s, "imported here");
            }
            self.program.errors.push(d);
            return "".into();
        }
        match String::from_utf8(bytes) {
            Ok(s) => s.into(),
            Err(e) => {
                let offset = e.utf8_error().valid_up_to();
                // Invalid bytes become U+FFFD here; the label covers that character.
                let text: Rc<str> = String::from_utf8_lossy(e.as_bytes()).into();
                let fid = self.program.sources.files.len() as FileId;
                let mut d =
                    Diagnostic::new("load::not-utf8", format!("`{path}` is not UTF-8 text"))
                        .label(
                            fid,
                            Span::new(offset, offset + char::REPLACEMENT_CHARACTER.len_utf8()),
                            format!("invalid UTF-8 at byte {offset}"),
                        )
                        .help("envc files are UTF-8; re-save the file with that encoding");
                if let Some((f, s)) = at {
                    d = d.label(f, s, "imported here");
                }
                self.program.errors.push(d);
                // Parse the lossy text anyway so that other errors still show.
                text
            }
        }
    }

    fn add_module(&mut self, path: String, text: Rc<str>, is_std: bool) -> ModuleId {
        let file = match self.pack_file(&path) {
            Some((_, shown)) => self.program.sources.add_verbatim(shown, text.clone()),
            None => self.program.sources.add(path.clone(), text.clone()),
        };
        let parsed = envc_lang::parse(&text, file);
        self.program.errors.extend(parsed.errors);
        let id = self.program.modules.len();
        self.by_path.insert((is_std, path.clone()), id);
        self.program.modules.push(Module {
            file,
            path: path.clone(),
            ast: parsed.module,
            imports: BTreeMap::new(),
            broken_names: parsed.broken,
            is_std,
        });
        self.stack
            .push((path.clone(), is_std, file, Span::default()));
        let imports: Vec<(Rc<str>, Span, Option<ast::Ident>)> = self.program.modules[id]
            .ast
            .items
            .iter()
            .filter_map(|it| match &it.kind {
                ItemKind::Import {
                    path,
                    path_span,
                    alias,
                } => Some((path.clone(), *path_span, alias.clone())),
                _ => None,
            })
            .collect();
        for (spec, span, alias) in imports {
            let alias_name: Rc<str> = match &alias {
                Some(a) => a.name.clone(),
                None => default_alias(&spec).into(),
            };
            let child = match self.resolve(&path, is_std, &spec, file, span) {
                Some((target, target_std)) => self.import(&target, target_std, file, span),
                None => None,
            };
            if child.is_none() {
                self.program.modules[id]
                    .broken_names
                    .push(alias_name.clone());
            }
            if let Some(child) = child {
                let m = &mut self.program.modules[id];
                if let Some((_, first)) = m.imports.get(&alias_name) {
                    let first = *first;
                    self.program.errors.push(
                        Diagnostic::new(
                            "load::duplicate-alias",
                            format!("two imports are both named `{alias_name}`"),
                        )
                        .label(
                            file,
                            alias.as_ref().map_or(span, |a| a.span),
                            "second import",
                        )
                        .label(file, first, "first import")
                        .help("give one of them another name with `as`"),
                    );
                } else {
                    m.imports.insert(alias_name, (child, span));
                }
            }
        }
        self.stack.pop();
        id
    }

    fn resolve(
        &mut self,
        from: &str,
        from_std: bool,
        spec: &str,
        file: FileId,
        span: Span,
    ) -> Option<(String, bool)> {
        if spec.starts_with("std/") {
            if stdlib::get(spec).is_some() {
                return Some((spec.to_string(), true));
            }
            let names = stdlib::MODULES.iter().map(|(p, _)| *p);
            let mut d = Diagnostic::new(
                "load::unknown-std-module",
                format!("no standard module `{spec}`"),
            )
            .label(file, span, "not in the standard library");
            d = d.help(match envc_lang::did_you_mean(spec, names) {
                Some(s) => s,
                None => format!(
                    "the standard library has: {}",
                    stdlib::MODULES
                        .iter()
                        .map(|(p, _)| *p)
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            });
            self.program.errors.push(d);
            return None;
        }
        if !(spec.starts_with("./") || spec.starts_with("../")) {
            self.program.errors.push(
                Diagnostic::new("load::bad-import-path", format!("cannot tell where `{spec}` is"))
                    .label(file, span, "neither relative nor standard")
                    .help(format!("write `./{spec}` for a file beside this one, or `std/…` for the standard library")),
            );
            return None;
        }
        if from_std {
            return None; // the standard library imports only itself
        }
        // A pack's file imports only from its pack; a project's never names a pack's.
        let pack = split_pack_path(from).map(|(i, _)| format!("{PACK_PREFIX}{i}/"));
        // A pack is a tree of its own, apart from where the project root is.
        let root = match pack {
            Some(_) => ProjectRoot::default(),
            None => self.root.clone(),
        };
        match join_relative(&root, from, spec) {
            Some(p) if pack.as_ref().is_some_and(|pk| !p.starts_with(pk.as_str())) => {
                self.program.errors.push(
                    Diagnostic::new("load::outside-project", format!("`{spec}` is outside the policy pack"))
                        .label(file, span, "leaves the policy pack's directory")
                        .help("a policy pack imports its own files and `std/…`; move what it needs into the pack"),
                );
                None
            }
            Some(p) if pack.is_none() && p.starts_with(PACK_PREFIX) => {
                self.program.errors.push(
                    Diagnostic::new("load::bad-import-path", format!("cannot import `{spec}`"))
                        .label(file, span, "names a policy pack's file")
                        .help("policy packs are given with `--policy DIR`, not imported"),
                );
                None
            }
            Some(p) => Some((p, false)),
            None => {
                self.program.errors.push(
                    Diagnostic::new("load::outside-project", format!("`{spec}` is outside the project"))
                        .label(file, span, "leaves the project root")
                        .message(format!("Every file of an environment lives under the project root, so that the environment is one self-contained, hashable tree. {}", self.root.describe()))
                        .help(self.root.hint()),
                );
                None
            }
        }
    }

    fn import(&mut self, target: &str, is_std: bool, file: FileId, span: Span) -> Option<ModuleId> {
        if let Some(top) = self.stack.last_mut() {
            top.3 = span;
        }
        if let Some(pos) = self
            .stack
            .iter()
            .position(|(p, std, _, _)| p == target && *std == is_std)
        {
            let chain: Vec<String> = self.stack[pos..]
                .iter()
                .map(|(p, _, _, _)| p.clone())
                .chain([target.to_string()])
                .collect();
            let mut d = Diagnostic::new("load::import-cycle", "import cycle")
                .message(format!(
                    "Modules import each other in a circle: {}.",
                    chain.join(" → ")
                ))
                .help("move what both need into a third module that imports neither");
            for (_, _, f, s) in self.stack[pos..].iter().rev() {
                d = d.label(*f, *s, "imports the next module of the cycle");
            }
            self.program.errors.push(d);
            return None;
        }
        if let Some(&id) = self.by_path.get(&(is_std, target.to_string())) {
            return Some(id);
        }
        if self.stack.len() >= MAX_IMPORT_DEPTH {
            self.program.errors.push(
                Diagnostic::new("load::too-deep", "imports nested too deeply")
                    .label(
                        file,
                        span,
                        format!("more than {MAX_IMPORT_DEPTH} modules deep"),
                    )
                    .help("flatten the module structure"),
            );
            return None;
        }
        let text: Rc<str> = if is_std {
            stdlib::get(target)
                .expect("resolve() checked the std module exists")
                .into()
        } else if target.starts_with(PACK_PREFIX) {
            self.read_pack_file(target, Some((file, span)))?
        } else {
            match self.loader.read_at_most(target, MAX_SOURCE_BYTES as u64) {
                Ok(bytes) => self.decode(target, bytes, Some((file, span))),
                Err(e) => {
                    let help = match e {
                        LoadError::NotFound => {
                            "check the path: it is relative to the importing file"
                        }
                        _ => "imports must be readable files inside the project",
                    };
                    self.program.errors.push(
                        Diagnostic::new(
                            "load::unreadable",
                            format!("cannot import `{target}`: {e}"),
                        )
                        .label(file, span, "imported here")
                        .help(help),
                    );
                    return None;
                }
            }
        };
        Some(self.add_module(target.to_string(), text, is_std))
    }
}

/// Whether `path` names a policy pack's file (a tree of its own, apart from the project).
pub(crate) fn is_pack_path(path: &str) -> bool {
    split_pack_path(path).is_some()
}

/// `policy pack N/REL` → (N, REL).
fn split_pack_path(path: &str) -> Option<(usize, &str)> {
    let (i, rel) = path.strip_prefix(PACK_PREFIX)?.split_once('/')?;
    Some((i.parse().ok()?, rel))
}

/// `std/debian` → `debian`, `./lib/db-tools.env` → `db_tools`.
fn default_alias(path: &str) -> String {
    let file = path.rsplit('/').next().unwrap_or(path);
    let stem = file.strip_suffix(".env").unwrap_or(file);
    stem.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect()
}
