//! Completion: after `x.`, the fields of `x`'s type (a record's fields, a node's attributes
//! and outputs, a module's definitions); among a call's arguments, its parameter names;
//! after `:` or `->`, types; in an `import`, the standard library; elsewhere every name in
//! scope: locals, the module's definitions, builtins and keywords.

use std::collections::BTreeMap;

use envc_compiler::builtins::{self, Builtin};
use envc_compiler::check::Global;
use envc_compiler::types::{NodeTy, Ty, BUILTIN_TYPE_NAMES};
use envc_lang::FileId;

use crate::{contains, Snapshot};

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Completion {
    pub label: String,
    pub kind: CompletionKind,
    /// A type or signature.
    pub detail: String,
    pub doc: String,
    /// What to insert, when it differs from the label (`port = `).
    pub insert: Option<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CompletionKind {
    Local,
    Value,
    Function,
    Field,
    Argument,
    Module,
    Type,
    Keyword,
}

const KEYWORDS: &[&str] = &[
    "let", "fn", "if", "else", "for", "in", "import", "as", "type", "param", "output", "assert",
    "true", "false", "and", "or", "not",
];

impl Snapshot {
    /// What may be written at `offset`, filtered by the word being typed there.
    pub fn completions(&self, file: FileId, offset: u32) -> Vec<Completion> {
        let text = self.text(file);
        let offset = (offset as usize).min(text.len());
        if !text.is_char_boundary(offset) {
            return Vec::new();
        }
        let before = &text[..offset];
        let word_start = before
            .char_indices()
            .rfind(|(_, c)| !(c.is_ascii_alphanumeric() || *c == '_'))
            .map_or(0, |(i, c)| i + c.len_utf8());
        let prefix = &before[word_start..];
        let lead = before[..word_start].trim_end();
        let line = before.rsplit('\n').next().unwrap_or("");
        let mut out = if line.trim_start().starts_with("import") && line.matches('"').count() == 1 {
            envc_compiler::stdlib::MODULES
                .iter()
                .map(|(p, _)| item(p, CompletionKind::Module, "", ""))
                .collect()
        } else if let Some(dot) = before[..word_start].strip_suffix('.') {
            self.members(file, dot.len() as u32)
        } else if lead.ends_with(':') || lead.ends_with("->") {
            self.types(file)
        } else {
            let mut v = self.arguments(file, offset as u32, lead);
            if v.is_empty() {
                v = self.in_scope(file, offset as u32);
            }
            v
        };
        out.retain(|c| c.label.starts_with(prefix));
        out
    }

    /// The fields of the expression that ends at `end` (just before a `.`).
    fn members(&self, file: FileId, end: u32) -> Vec<Completion> {
        let index = &self.analysis.checked.index;
        let Some((_, _, ty)) = index
            .exprs
            .iter()
            .filter(|(f, s, _)| *f == file && s.end == end)
            .max_by_key(|(_, s, _)| s.len())
        else {
            return Vec::new();
        };
        match ty.base() {
            Ty::Record(r) => r
                .fields
                .iter()
                .map(|(k, f)| item(k, CompletionKind::Field, &f.ty.to_string(), ""))
                .collect(),
            Ty::Node(NodeTy::Kind(k)) => {
                let schema = builtins::schema(*k);
                let mut v: Vec<Completion> = schema
                    .field_names()
                    .into_iter()
                    .map(|n| {
                        let t = schema
                            .field_ty(n)
                            .map(|t| t.to_string())
                            .unwrap_or_default();
                        item(n, CompletionKind::Field, &t, "")
                    })
                    .collect();
                v.push(item("name", CompletionKind::Field, "str", ""));
                v
            }
            Ty::Node(_) => vec![item("name", CompletionKind::Field, "str", "")],
            Ty::Module(m) => self.globals_of(*m, false),
            _ => Vec::new(),
        }
    }

    /// Parameter names of the innermost call whose argument list the cursor is in, where
    /// an argument's name may start (after `(` or `,`), minus those already given.
    fn arguments(&self, file: FileId, offset: u32, lead: &str) -> Vec<Completion> {
        if !(lead.ends_with('(') || lead.ends_with(',')) {
            return Vec::new();
        }
        let Some(m) = self.module_of(file) else {
            return Vec::new();
        };
        let calls = crate::walk::calls_around(&self.module(m).ast, offset);
        let Some((callee, args)) = calls
            .iter()
            .rev()
            .find(|(callee, _)| callee.span.end < offset)
        else {
            return Vec::new();
        };
        let given: Vec<&str> = args
            .iter()
            .filter_map(|a| a.name.as_ref().map(|n| &*n.name))
            .collect();
        let Some((params, _)) = self.parameters(file, callee) else {
            return Vec::new();
        };
        params
            .iter()
            .filter(|p| !given.contains(&&*p.name))
            .map(|p| Completion {
                insert: Some(format!("{} = ", p.name)),
                ..item(
                    &p.name,
                    CompletionKind::Argument,
                    &p.ty.to_string(),
                    if p.required { "required" } else { "" },
                )
            })
            .collect()
    }

    fn types(&self, file: FileId) -> Vec<Completion> {
        let mut v: Vec<Completion> = BUILTIN_TYPE_NAMES
            .iter()
            .map(|t| item(t, CompletionKind::Type, "", ""))
            .collect();
        if let Some(m) = self.module_of(file) {
            v.extend(self.globals_of(m, true));
        }
        v
    }

    /// Locals visible at `offset` (the innermost of a name), the module's definitions,
    /// builtins and keywords.
    fn in_scope(&self, file: FileId, offset: u32) -> Vec<Completion> {
        let mut seen: BTreeMap<String, Completion> = BTreeMap::new();
        let index = &self.analysis.checked.index;
        let text = self.text(file);
        // A scope reaches over the blanks after it: `fn f(x) => ` with the body not
        // written yet ends before the cursor.
        let reaches = |scope: envc_lang::Span| {
            contains(scope, offset)
                || (scope.start <= offset
                    && text
                        .get(scope.end as usize..offset as usize)
                        .is_some_and(|gap| gap.trim().is_empty()))
        };
        let mut locals: Vec<_> = index
            .locals
            .iter()
            .filter(|l| l.file == file && reaches(l.scope) && l.def.end <= offset)
            .collect();
        locals.sort_by_key(|l| std::cmp::Reverse(l.scope.start));
        for l in locals {
            seen.entry(l.name.to_string())
                .or_insert_with(|| item(&l.name, CompletionKind::Local, &l.ty.to_string(), ""));
        }
        if let Some(m) = self.module_of(file) {
            for c in self.globals_of(m, false) {
                seen.entry(c.label.clone()).or_insert(c);
            }
        }
        for name in builtins::names() {
            if let Some(b) = builtins::lookup(name) {
                seen.entry(name.to_string())
                    .or_insert_with(|| builtin_item(name, b));
            }
        }
        for k in KEYWORDS {
            seen.entry(k.to_string())
                .or_insert_with(|| item(k, CompletionKind::Keyword, "", ""));
        }
        seen.into_values().collect()
    }

    /// The values (or, with `types`, the types) a module defines.
    fn globals_of(&self, m: usize, types: bool) -> Vec<Completion> {
        let file = self.module(m).file;
        self.analysis.checked.globals[m]
            .iter()
            .filter_map(|(key, g)| {
                let name = match (types, key.strip_prefix("type ")) {
                    (true, Some(n)) => n,
                    (false, None) if !key.contains(' ') => key,
                    _ => return None,
                };
                let (kind, detail) = match g {
                    Global::Fn(_) => (CompletionKind::Function, self.signature_line(m, name)),
                    Global::Import(id) => (CompletionKind::Module, self.module(*id).path.clone()),
                    Global::Type(_) => (CompletionKind::Type, String::new()),
                    _ => (
                        CompletionKind::Value,
                        self.item_defining(m, name, false)
                            .and_then(|(it, _)| match &it.kind {
                                envc_lang::ast::ItemKind::Let(b) => {
                                    self.expr_ty(file, b.value.span).map(Ty::to_string)
                                }
                                _ => None,
                            })
                            .unwrap_or_default(),
                    ),
                };
                let doc = self
                    .item_defining(m, name, types)
                    .map(|(it, _)| crate::doc_comment(self.text(file), it.span.start))
                    .unwrap_or_default();
                Some(item(name, kind, &detail, &doc))
            })
            .collect()
    }

    fn signature_line(&self, m: usize, name: &str) -> String {
        match self.item_defining(m, name, false) {
            Some((
                envc_lang::ast::Item {
                    kind: envc_lang::ast::ItemKind::Fn(f),
                    ..
                },
                _,
            )) => self.fn_head(self.module(m).file, f).to_string(),
            _ => String::new(),
        }
    }
}

fn builtin_item(name: &str, b: Builtin) -> Completion {
    let signature = Ty::Fn(std::rc::Rc::new(b.signature())).to_string();
    item(name, CompletionKind::Function, &signature, b.doc())
}

fn item(label: &str, kind: CompletionKind, detail: &str, doc: &str) -> Completion {
    Completion {
        label: label.to_string(),
        kind,
        detail: detail.to_string(),
        doc: doc.to_string(),
        insert: None,
    }
}
