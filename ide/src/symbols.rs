//! A file's outline: its top-level definitions.

use envc_lang::ast::{ExprKind, ItemKind};
use envc_lang::{FileId, Span};

use crate::Snapshot;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Symbol {
    pub name: String,
    pub kind: SymbolKind,
    /// The type or, for a node, its kind.
    pub detail: String,
    /// The whole definition.
    pub span: Span,
    /// Its name.
    pub name_span: Span,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SymbolKind {
    Import,
    Value,
    /// A `let` whose value is built by a node constructor.
    Node,
    Function,
    Param,
    Type,
    Output,
    Policy,
    Rollout,
}

impl Snapshot {
    pub fn symbols(&self, file: FileId) -> Vec<Symbol> {
        let Some(m) = self.module_of(file) else {
            return Vec::new();
        };
        let text = self.text(file);
        let mut out = Vec::new();
        for it in &self.module(m).ast.items {
            let (ident, kind, detail) = match &it.kind {
                ItemKind::Import {
                    alias,
                    path,
                    path_span,
                } => {
                    let name = alias.as_ref().map_or_else(
                        || {
                            path.rsplit('/')
                                .next()
                                .unwrap_or(path)
                                .trim_end_matches(".env")
                                .to_string()
                        },
                        |a| a.name.to_string(),
                    );
                    let span = alias.as_ref().map_or(*path_span, |a| a.span);
                    out.push(Symbol {
                        name,
                        kind: SymbolKind::Import,
                        detail: path.to_string(),
                        span: it.span,
                        name_span: span,
                    });
                    continue;
                }
                ItemKind::Let(b) => {
                    let node = match &b.value.kind {
                        ExprKind::Call { callee, .. } => match &callee.kind {
                            ExprKind::Name(n) => envc_compiler::types::NodeKind::from_name(n),
                            _ => None,
                        },
                        _ => None,
                    };
                    match node {
                        Some(k) => (&b.name, SymbolKind::Node, k.name().to_string()),
                        None => (
                            &b.name,
                            SymbolKind::Value,
                            self.expr_ty(file, b.value.span)
                                .map(|t| t.to_string())
                                .unwrap_or_default(),
                        ),
                    }
                }
                ItemKind::Fn(f) => match &f.name {
                    Some(n) => (n, SymbolKind::Function, String::new()),
                    None => continue,
                },
                ItemKind::Param { name, ty, .. } => {
                    (name, SymbolKind::Param, text[ty.span.range()].to_string())
                }
                ItemKind::Type { name, .. } => (name, SymbolKind::Type, String::new()),
                ItemKind::Output { name, .. } => (name, SymbolKind::Output, String::new()),
                ItemKind::Policy(p) => {
                    out.push(Symbol {
                        name: p.name.to_string(),
                        kind: SymbolKind::Policy,
                        detail: p.level.name().to_string(),
                        span: it.span,
                        name_span: p.name_span,
                    });
                    continue;
                }
                ItemKind::Rollout(r) => {
                    let options: Vec<String> = (r.options.iter())
                        .map(|o| format!("{} = {}", o.name.name, &text[o.value.span.range()]))
                        .collect();
                    out.push(Symbol {
                        name: r.name.to_string(),
                        kind: SymbolKind::Rollout,
                        detail: options.join(", "),
                        span: it.span,
                        name_span: r.name_span,
                    });
                    continue;
                }
                ItemKind::Assert(_)
                | ItemKind::DefaultTags(_)
                | ItemKind::Moved(_)
                | ItemKind::Adopt(_)
                | ItemKind::Test(_)
                | ItemKind::Error => continue,
            };
            out.push(Symbol {
                name: ident.name.to_string(),
                kind,
                detail,
                span: it.span,
                name_span: ident.span,
            });
        }
        out
    }
}
