//! Hover: what a name is (its definition, type, documentation and, for the root's
//! bindings, its value when it is known before deploy) or what type an expression has, and
//! the nodes built where the cursor is, with their derivation ids.

use envc_compiler::builtins::Builtin;
use envc_compiler::check::Def;
use envc_compiler::derivation::value_json;
use envc_compiler::types::Ty;
use envc_compiler::value::Value;
use envc_lang::ast::ItemKind;
use envc_lang::{FileId, Span};

use crate::{contains, doc_comment, Snapshot};

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hover {
    /// What the answer is about.
    pub span: Span,
    /// Markdown.
    pub text: String,
}

/// Values longer than this are cut in a hover.
const MAX_VALUE_CHARS: usize = 400;

impl Snapshot {
    pub fn hover(&self, file: FileId, offset: u32) -> Option<Hover> {
        let mut parts: Vec<String> = Vec::new();
        let mut span = None;
        if let Some((def, at)) = self.def_at(file, offset) {
            span = Some(at);
            parts.push(self.describe(&def, self.expr_ty(file, at)));
        } else if let Some((at, text)) = self.argument_at(file, offset) {
            span = Some(at);
            parts.push(text);
        } else if let Some((at, ty)) = self.innermost_expr(file, offset) {
            span = Some(at);
            parts.push(code(&ty.to_string()));
        }
        let nodes = self.nodes_at(file, offset);
        if !nodes.is_empty() {
            parts.push(nodes);
        }
        if parts.is_empty() {
            return None;
        }
        Some(Hover {
            span: span.unwrap_or(Span::at(offset as usize)),
            text: parts.join("\n\n---\n\n"),
        })
    }

    /// A named argument of a call (`content = …`): the parameter's type and what it
    /// belongs to.
    fn argument_at(&self, file: FileId, offset: u32) -> Option<(Span, String)> {
        let m = self.module_of(file)?;
        let calls = crate::walk::calls_around(&self.module(m).ast, offset);
        calls.iter().rev().find_map(|(callee, args)| {
            let name = args
                .iter()
                .filter_map(|a| a.name.as_ref())
                .find(|n| contains(n.span, offset))?;
            let (params, of) = self.parameters(file, callee)?;
            let p = params.iter().find(|p| p.name == name.name)?;
            let opt = if p.required { "" } else { "?" };
            Some((
                name.span,
                format!(
                    "{}\n\nof `{of}`",
                    code(&format!("{}{opt}: {}", p.name, p.ty))
                ),
            ))
        })
    }

    fn innermost_expr(&self, file: FileId, offset: u32) -> Option<(Span, &Ty)> {
        self.analysis
            .checked
            .index
            .exprs
            .iter()
            .filter(|(f, s, _)| *f == file && contains(*s, offset))
            .min_by_key(|(_, s, _)| s.len())
            .map(|(_, s, t)| (*s, t))
    }

    fn describe(&self, def: &Def, use_ty: Option<&Ty>) -> String {
        match def {
            Def::Local { file, span } => {
                let local = self
                    .analysis
                    .checked
                    .index
                    .locals
                    .iter()
                    .find(|l| l.file == *file && l.def == *span);
                match local {
                    Some(l) => code(&format!("{}: {}", l.name, l.ty)),
                    None => use_ty.map(|t| code(&t.to_string())).unwrap_or_default(),
                }
            }
            Def::Builtin(b) => builtin(*b),
            Def::Type { module, name } => {
                let Some((item, _)) = self.item_defining(*module, name, true) else {
                    return code(&format!("type {name}"));
                };
                let file = self.module(*module).file;
                let text = self.text(file);
                let mut out = code(&text[item.span.range()]);
                push_doc(&mut out, &doc_comment(text, item.span.start));
                out
            }
            Def::Global { module, name } => self.global(*module, name, use_ty),
        }
    }

    fn global(&self, m: usize, name: &str, use_ty: Option<&Ty>) -> String {
        let file = self.module(m).file;
        let text = self.text(file);
        let from = if self.module(m).is_std || m != self.analysis.program.root {
            format!("\n\nfrom `{}`", self.module(m).path)
        } else {
            String::new()
        };
        let Some((item, _)) = self.item_defining(m, name, false) else {
            // An import's alias.
            return match self.module(m).imports.get(name) {
                Some((id, _)) => code(&format!("module {}", self.module(*id).path)),
                None => use_ty.map(|t| code(&t.to_string())).unwrap_or_default(),
            };
        };
        let mut out = match &item.kind {
            ItemKind::Fn(f) => code(self.fn_head(file, f)),
            ItemKind::Param { name, ty, .. } => {
                code(&format!("param {}: {}", name.name, &text[ty.span.range()]))
            }
            ItemKind::Let(b) => {
                let ty = match &b.ty {
                    Some(t) => text[t.span.range()].to_string(),
                    None => self
                        .expr_ty(file, b.value.span)
                        .map(Ty::to_string)
                        .unwrap_or_else(|| "any".into()),
                };
                let mut s = code(&format!("let {}: {ty}", b.name.name));
                if m == self.analysis.program.root {
                    if let Some(v) = self.binding_value(name) {
                        s.push_str(&format!("\n\n{}", code(&v)));
                    }
                }
                s
            }
            _ => String::new(),
        };
        push_doc(&mut out, &doc_comment(text, item.span.start));
        out.push_str(&from);
        out
    }

    /// A root binding's value, when it is known before deploy and not a node (nodes are
    /// shown with their ids).
    fn binding_value(&self, name: &str) -> Option<String> {
        let (_, v) = self.analysis.bindings.iter().find(|(n, _)| &**n == name)?;
        if matches!(
            v,
            Value::Node(_) | Value::Fn(_) | Value::Builtin(_) | Value::Module(_)
        ) || envc_compiler::value::contains_secret(v)
        {
            return None;
        }
        let mut json = value_json(v).to_string();
        if json.chars().count() > MAX_VALUE_CHARS {
            json = json.chars().take(MAX_VALUE_CHARS).collect::<String>() + "…";
        }
        Some(format!("= {json}"))
    }

    /// The nodes built by the innermost call around `offset` that builds any: kind, name,
    /// target and derivation id.
    fn nodes_at(&self, file: FileId, offset: u32) -> String {
        let Some(graph) = &self.analysis.graph else {
            return String::new();
        };
        let around: Vec<_> = graph
            .nodes()
            .filter(|n| n.file == file && contains(n.span, offset))
            .collect();
        let Some(inner) = around.iter().map(|n| n.span.len()).min() else {
            return String::new();
        };
        let mut lines: Vec<String> = around
            .iter()
            .filter(|n| n.span.len() == inner)
            .map(|n| {
                let on = n
                    .target
                    .as_ref()
                    .map(|t| format!(" on {} `{}`", t.kind.name(), t.name))
                    .unwrap_or_default();
                format!(
                    "- {} `{}`{on}  \n  derivation `{}`",
                    n.kind.name(),
                    n.name,
                    n.id.short()
                )
            })
            .collect();
        let total = lines.len();
        lines.truncate(20);
        if total > lines.len() {
            lines.push(format!("- and {} more", total - lines.len()));
        }
        let noun = if total == 1 { "node" } else { "nodes" };
        format!("**{total} {noun}** built here\n\n{}", lines.join("\n"))
    }
}

fn builtin(b: Builtin) -> String {
    let sig = b.signature();
    let params: Vec<String> = sig
        .params
        .iter()
        .map(|p| {
            let opt = if p.required { "" } else { "?" };
            format!("{}{opt}: {}", p.name, p.ty)
        })
        .collect();
    let mut out = code(&format!(
        "{}({}) -> {}",
        b.name(),
        params.join(", "),
        sig.ret
    ));
    push_doc(&mut out, b.doc());
    out
}

fn push_doc(out: &mut String, doc: &str) {
    if !doc.is_empty() {
        out.push_str("\n\n");
        out.push_str(doc);
    }
}

fn code(s: &str) -> String {
    format!("```envc\n{s}\n```")
}
