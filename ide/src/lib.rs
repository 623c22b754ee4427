//! envc's editor features, over the compiler's own analysis (`envc_compiler::analyze`): the
//! same parser, checker and evaluator as `envc check`, so an editor never disagrees with the
//! command line. Pure: files come through a `SourceLoader`, positions are byte offsets, and
//! answers are spans and text; the language server (`envc lsp`) speaks the protocol.
//!
//! ```text
//! Snapshot::analyze(root) ─ Analysis { program, checked.index, diagnostics, graph, bindings }
//!   ├─ hover         (what the index and the graph say about the name or expression)
//!   ├─ navigate      (definition, references, rename: the index's name references)
//!   ├─ complete      (names in scope, fields of a known type, attributes of a call)
//!   ├─ symbols       (a file's top-level items)
//!   └─ fixes         (the "did you mean" of a diagnostic, as an edit)
//! ```

mod complete;
mod fixes;
mod hover;
mod navigate;
mod symbols;
mod walk;

use envc_compiler::check::Def;
use envc_compiler::program::Module;
use envc_compiler::types::ModuleId;
use envc_compiler::types::{ParamTy, Ty};
use envc_compiler::{Analysis, CompileOptions, SourceLoader, SourceMap};
use envc_lang::ast::{Expr, ExprKind, FnDecl, Ident, Item, ItemKind};
use envc_lang::{FileId, Span};

pub use complete::{Completion, CompletionKind};
pub use fixes::Fix;
pub use hover::Hover;
pub use navigate::RenameRefused;
pub use symbols::{Symbol, SymbolKind};

/// One analysis of one root file and everything it imports.
pub struct Snapshot {
    analysis: Analysis,
}

/// A change to make: replace `span` of `file` with `text`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Edit {
    pub file: FileId,
    pub span: Span,
    pub text: String,
}

impl Snapshot {
    /// Analyses `root` (project-relative, as `envc check` takes it) with `options`.
    pub fn analyze(root: &str, loader: &dyn SourceLoader, options: &CompileOptions) -> Snapshot {
        Snapshot {
            analysis: envc_compiler::analyze(root, loader, options),
        }
    }

    pub fn analysis(&self) -> &Analysis {
        &self.analysis
    }

    pub fn sources(&self) -> &SourceMap {
        &self.analysis.program.sources
    }

    pub fn diagnostics(&self) -> &[envc_lang::Diagnostic] {
        &self.analysis.diagnostics
    }

    /// What is likely a mistake but not an error (`envc_compiler::network`).
    pub fn warnings(&self) -> &[envc_lang::Diagnostic] {
        &self.analysis.warnings
    }

    /// The file of the module loaded from `name` (`lib/db.env`, `std/debian`).
    pub fn file(&self, name: &str) -> Option<FileId> {
        self.analysis
            .program
            .modules
            .iter()
            .find(|m| m.path == name)
            .map(|m| m.file)
    }

    /// Whether `file` is a module of the embedded standard library (read-only).
    pub fn is_std(&self, file: FileId) -> bool {
        self.module_of(file).is_some_and(|m| self.module(m).is_std)
    }

    fn module(&self, m: ModuleId) -> &Module {
        &self.analysis.program.modules[m]
    }

    fn module_of(&self, file: FileId) -> Option<ModuleId> {
        self.analysis
            .program
            .modules
            .iter()
            .position(|m| m.file == file)
    }

    fn text(&self, file: FileId) -> &str {
        &self.sources().get(file).text
    }

    /// The top-level item of module `m` that defines value or type `name`, and the span of
    /// the name in it.
    fn item_defining(&self, m: ModuleId, name: &str, as_type: bool) -> Option<(&Item, Span)> {
        self.module(m).ast.items.iter().find_map(|it| {
            let (ident, is_type) = defined_name(&it.kind)?;
            (is_type == as_type && &*ident.name == name).then_some((it, ident.span))
        })
    }

    /// A function's signature as written: its text before the body.
    fn fn_head(&self, file: FileId, f: &FnDecl) -> &str {
        self.text(file)[f.span.start as usize..f.body.span.start as usize]
            .trim_end()
            .trim_end_matches(['=', '>', '{'])
            .trim_end()
    }

    /// The type the checker gave the expression at exactly `span`.
    fn expr_ty(&self, file: FileId, span: Span) -> Option<&Ty> {
        self.analysis
            .checked
            .index
            .exprs
            .iter()
            .find(|(f, s, _)| *f == file && *s == span)
            .map(|(_, _, t)| t)
    }

    /// The parameters of what `callee` calls (a builtin or a function of known type), and
    /// its name.
    fn parameters(&self, file: FileId, callee: &Expr) -> Option<(Vec<ParamTy>, String)> {
        let span = match &callee.kind {
            ExprKind::Name(_) => callee.span,
            ExprKind::Field(_, f) => f.span,
            _ => return None,
        };
        let index = &self.analysis.checked.index;
        if let Some(Def::Builtin(b)) = index
            .refs
            .iter()
            .find(|r| r.file == file && r.span == span)
            .map(|r| &r.target)
        {
            return Some((b.signature().params, b.name().to_string()));
        }
        match self.expr_ty(file, callee.span)?.base() {
            Ty::Fn(f) => Some((
                f.params.clone(),
                self.text(file)[callee.span.range()].to_string(),
            )),
            _ => None,
        }
    }

    /// Where a definition is: its file and the span of the defining name (an import's
    /// alias, or its path when it has none).
    fn def_location(&self, def: &Def) -> Option<(FileId, Span)> {
        match def {
            Def::Local { file, span } => Some((*file, *span)),
            Def::Global { module, name } | Def::Type { module, name } => {
                let file = self.module(*module).file;
                let as_type = matches!(def, Def::Type { .. });
                if let Some((_, span)) = self.item_defining(*module, name, as_type) {
                    return Some((file, span));
                }
                let (_, span) = self.module(*module).imports.get(name)?;
                Some((file, *span))
            }
            Def::Builtin(_) => None,
        }
    }

    /// The definition named at `offset`: a use of a name, or a name being defined.
    fn def_at(&self, file: FileId, offset: u32) -> Option<(Def, Span)> {
        let index = &self.analysis.checked.index;
        if let Some(r) = index
            .refs
            .iter()
            .find(|r| r.file == file && contains(r.span, offset))
        {
            return Some((r.target.clone(), r.span));
        }
        if let Some(l) = index
            .locals
            .iter()
            .find(|l| l.file == file && contains(l.def, offset))
        {
            return Some((Def::Local { file, span: l.def }, l.def));
        }
        let m = self.module_of(file)?;
        for it in &self.module(m).ast.items {
            let (ident, as_type) = match &it.kind {
                ItemKind::Import { alias: Some(a), .. } => (a, false),
                kind => match defined_name(kind) {
                    Some(d) => d,
                    None => continue,
                },
            };
            if contains(ident.span, offset) {
                let name = ident.name.clone();
                let def = if as_type {
                    Def::Type { module: m, name }
                } else {
                    Def::Global { module: m, name }
                };
                return Some((def, ident.span));
            }
        }
        None
    }
}

/// The name a top-level item defines (`let`, `fn`, `param`, `type`), and whether it is a
/// type's.
fn defined_name(kind: &ItemKind) -> Option<(&Ident, bool)> {
    Some(match kind {
        ItemKind::Let(b) => (&b.name, false),
        ItemKind::Fn(f) => (f.name.as_ref()?, false),
        ItemKind::Param { name, .. } => (name, false),
        ItemKind::Type { name, .. } => (name, true),
        _ => return None,
    })
}

/// Whether the cursor at `offset` touches `span` (its end included: the cursor just after a
/// name is on it, as editors place it after typing).
fn contains(span: Span, offset: u32) -> bool {
    span.start <= offset && offset <= span.end
}

/// Reformats a whole file as `envc fmt` does; `None` while it does not parse.
pub fn format(text: &str) -> Option<String> {
    envc_lang::format::format(text).ok()
}

/// The comment lines right above `start` in `text` (a definition's documentation), without
/// their `#`.
fn doc_comment(text: &str, start: u32) -> String {
    let before = &text[..(start as usize).min(text.len())];
    let mut lines: Vec<&str> = Vec::new();
    for line in before
        .lines()
        .rev()
        .skip(usize::from(!before.ends_with('\n')))
    {
        match line.trim_start().strip_prefix('#') {
            Some(c) => lines.push(c.strip_prefix(' ').unwrap_or(c)),
            None => break,
        }
    }
    lines.reverse();
    lines.join("\n")
}

#[cfg(test)]
mod tests;
