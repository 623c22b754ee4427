//! Go to definition, find references and rename, from the checker's name references: the
//! same resolution that type-checks the file, so scopes and shadowing agree with it.

use envc_compiler::check::Def;
use envc_lang::ast::ItemKind;
use envc_lang::{FileId, Span};

use crate::{contains, Edit, Snapshot};

/// Why a rename is refused; its text is what the editor shows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RenameRefused {
    NoName,
    Builtin,
    Std,
    NotAName(String),
    /// Something visible where the binding is already has the new name.
    Taken {
        new_name: String,
        old_name: String,
    },
}

impl std::fmt::Display for RenameRefused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RenameRefused::NoName => f.write_str("there is no name here to rename"),
            RenameRefused::Builtin => f.write_str("a built-in cannot be renamed"),
            RenameRefused::Std => f.write_str("a name of the standard library cannot be renamed"),
            RenameRefused::NotAName(n) => write!(f, "`{n}` is not a name: letters, digits and `_`, not starting with a digit, and not a keyword"),
            RenameRefused::Taken { new_name, old_name } => write!(
                f,
                "`{new_name}` is already defined where `{old_name}` is visible"
            ),
        }
    }
}

impl std::error::Error for RenameRefused {}

impl Snapshot {
    /// Where the name at `offset` is defined; an import's path leads to the module.
    pub fn definition(&self, file: FileId, offset: u32) -> Option<(FileId, Span)> {
        if let Some((def, _)) = self.def_at(file, offset) {
            return self.def_location(&def);
        }
        let m = self.module_of(file)?;
        self.module(m)
            .ast
            .items
            .iter()
            .find_map(|it| match &it.kind {
                ItemKind::Import { path_span, .. } if contains(*path_span, offset) => {
                    let (_, (id, _)) = self.module(m).imports.iter().find(|(_, (_, span))| {
                        span.start >= it.span.start && span.end <= it.span.end
                    })?;
                    Some((self.module(*id).file, Span::at(0)))
                }
                _ => None,
            })
    }

    /// Every use of the definition named at `offset`, in the files this analysis loaded,
    /// in file and position order; its definition too with `with_definition`.
    pub fn references(
        &self,
        file: FileId,
        offset: u32,
        with_definition: bool,
    ) -> Vec<(FileId, Span)> {
        let Some((def, _)) = self.def_at(file, offset) else {
            return Vec::new();
        };
        let mut out: Vec<(FileId, Span)> = self
            .analysis
            .checked
            .index
            .refs
            .iter()
            .filter(|r| r.target == def)
            .map(|r| (r.file, r.span))
            .collect();
        if with_definition {
            out.extend(self.def_location(&def));
        }
        out.sort_by_key(|(f, s)| (*f, s.start));
        out.dedup();
        out
    }

    /// The edits that rename the binding at `offset` to `new_name`, or why it cannot be.
    /// Only names defined in the project (not the standard library or a builtin), and only
    /// to a name that nothing visible there already has.
    pub fn rename(
        &self,
        file: FileId,
        offset: u32,
        new_name: &str,
    ) -> Result<Vec<Edit>, RenameRefused> {
        let (def, _) = self.def_at(file, offset).ok_or(RenameRefused::NoName)?;
        let (def_file, _) = self.def_location(&def).ok_or(RenameRefused::Builtin)?;
        if self.is_std(def_file) {
            return Err(RenameRefused::Std);
        }
        if !envc_lang::lexer::is_name(new_name) {
            return Err(RenameRefused::NotAName(new_name.to_string()));
        }
        if self.visible_at(&def, new_name) {
            return Err(RenameRefused::Taken {
                new_name: new_name.to_string(),
                old_name: self.def_name(&def),
            });
        }
        Ok(self
            .references(file, offset, true)
            .into_iter()
            .map(|(file, span)| Edit {
                file,
                span,
                text: new_name.to_string(),
            })
            .collect())
    }

    fn def_name(&self, def: &Def) -> String {
        match self.def_location(def) {
            Some((f, s)) => self.text(f)[s.range()].to_string(),
            None => String::new(),
        }
    }

    /// Whether `name` is already a name where `def` is visible: a global of its module, a
    /// local in scope there, or a builtin that the new name would shadow.
    fn visible_at(&self, def: &Def, name: &str) -> bool {
        if envc_compiler::builtins::lookup(name).is_some() {
            return true;
        }
        let index = &self.analysis.checked.index;
        match def {
            Def::Local { file, span } => {
                let scope = index
                    .locals
                    .iter()
                    .find(|l| l.file == *file && l.def == *span)
                    .map(|l| l.scope);
                let module = self.module_of(*file);
                index.locals.iter().any(|l| {
                    l.file == *file
                        && &*l.name == name
                        && scope.is_some_and(|s| overlaps(s, l.scope))
                }) || module.is_some_and(|m| self.analysis.checked.globals[m].contains_key(name))
            }
            Def::Global { module, .. } => {
                self.analysis.checked.globals[*module].contains_key(name)
                    || index
                        .locals
                        .iter()
                        .any(|l| self.module_of(l.file) == Some(*module) && &*l.name == name)
            }
            Def::Type { module, .. } => {
                self.analysis.checked.globals[*module].contains_key(format!("type {name}").as_str())
            }
            Def::Builtin(_) => true,
        }
    }
}

fn overlaps(a: Span, b: Span) -> bool {
    a.start < b.end && b.start < a.end
}
