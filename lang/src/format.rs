//! The canonical formatter. Layout depends only on the tree (and on where blank lines and
//! comments were), so formatting is idempotent. Comments are re-attached at sequence points
//! (items, statements, list elements, fields, arguments); a comment inside an expression
//! that has no such point moves to the nearest one after it, and is never dropped.
//! String and number literals are printed exactly as written.

use crate::ast::*;
use crate::diag::Diagnostic;
use crate::parser::parse;
use crate::span::Span;
use crate::token::Comment;

const WIDTH: usize = 100;
/// Room assumed for the text before an expression on its line when the caller does not
/// say (`expr_after` says exactly).
const UNKNOWN_LEAD: usize = 20;
const INDENT: &str = "  ";

/// Formats a whole file. A file with syntax errors is not formatted: its errors come back.
pub fn format(src: &str) -> Result<String, Vec<Diagnostic>> {
    let parsed = parse(src, 0);
    if !parsed.errors.is_empty() {
        return Err(parsed.errors);
    }
    let mut f = Fmt {
        src,
        comments: &parsed.comments,
        next: 0,
        last_end: 0,
    };
    Ok(f.module(&parsed.module))
}

struct Fmt<'a> {
    src: &'a str,
    comments: &'a [Comment],
    /// Index of the first comment not yet printed.
    next: usize,
    /// End of the last thing printed in the current sequence (for blank-line keeping).
    last_end: u32,
}

fn indent(n: usize) -> String {
    INDENT.repeat(n)
}

impl<'a> Fmt<'a> {
    fn text(&self, span: Span) -> &'a str {
        &self.src[span.range()]
    }

    fn has_comment_in(&self, span: Span) -> bool {
        self.comments[self.next..]
            .iter()
            .any(|c| c.span.start >= span.start && c.span.start < span.end)
    }

    fn blank_between(&self, a: u32, b: u32) -> bool {
        a < b
            && self
                .src
                .get(a as usize..b as usize)
                .is_some_and(|s| s.matches('\n').count() >= 2)
    }

    /// Prints pending comments that start before `pos`, each on its own line.
    fn leading_comments(&mut self, pos: u32, ind: usize, out: &mut String, first: &mut bool) {
        while let Some(c) = self.comments.get(self.next).filter(|c| c.span.start < pos) {
            if !*first && self.blank_between(self.last_end, c.span.start) {
                out.push('\n');
            }
            out.push_str(&indent(ind));
            out.push_str(self.text(c.span).trim_end());
            out.push('\n');
            self.last_end = c.span.end;
            self.next += 1;
            *first = false;
        }
    }

    /// A comment on the same line right after `end` (before `limit`) stays at the line end,
    /// or goes on a line of its own at `own_line` when the line already ends in a comment.
    fn trailing_comment(
        &mut self,
        end: u32,
        limit: u32,
        out: &mut String,
        own_line: Option<usize>,
    ) {
        if let Some(c) = self.comments.get(self.next) {
            let gap = &self.src[end as usize..(c.span.start as usize).max(end as usize)];
            if c.span.start >= end && c.span.start < limit && !gap.contains('\n') {
                match own_line {
                    Some(ind) => {
                        out.push('\n');
                        out.push_str(&indent(ind));
                    }
                    None => out.push_str("  "),
                }
                out.push_str(self.text(c.span).trim_end());
                self.last_end = c.span.end;
                self.next += 1;
            }
        }
    }

    /// Comments that fell inside an element without a sequence point of its own.
    /// Returns whether it printed any: then the line already ends in a comment.
    fn inner_comments(&mut self, end: u32, ind: usize, out: &mut String) -> bool {
        let mut first = true;
        while let Some(c) = self.comments.get(self.next).filter(|c| c.span.start < end) {
            if first {
                out.push_str("  ");
            } else {
                out.push('\n');
                out.push_str(&indent(ind));
            }
            out.push_str(self.text(c.span).trim_end());
            self.next += 1;
            first = false;
        }
        !first
    }

    /// One element per line, each followed by `sep`, comments kept in place.
    fn seq<T>(
        &mut self,
        items: &[T],
        span_of: impl Fn(&T) -> Span,
        render: &mut dyn FnMut(&mut Self, &T, usize) -> String,
        ind: usize,
        sep: &str,
        close: u32,
    ) -> String {
        let mut out = String::new();
        let mut first = true;
        for (i, item) in items.iter().enumerate() {
            let span = span_of(item);
            self.leading_comments(span.start, ind, &mut out, &mut first);
            if !first && self.blank_between(self.last_end, span.start) {
                out.push('\n');
            }
            out.push_str(&indent(ind));
            out.push_str(&render(self, item, ind));
            out.push_str(sep);
            self.last_end = span.end;
            let moved = self.inner_comments(span.end, ind, &mut out);
            let limit = items.get(i + 1).map_or(close, |n| span_of(n).start);
            self.trailing_comment(span.end, limit, &mut out, moved.then_some(ind));
            out.push('\n');
            first = false;
        }
        self.leading_comments(close, ind, &mut out, &mut first);
        out
    }

    fn module(&mut self, m: &Module) -> String {
        let out = self.seq(
            &m.items,
            |i| i.span,
            &mut |f, item, ind| f.item(item, ind),
            0,
            "",
            m.span.end,
        );
        let trimmed = out.trim_start_matches('\n');
        if trimmed.is_empty() {
            String::new()
        } else {
            trimmed.to_string()
        }
    }

    fn item(&mut self, item: &Item, ind: usize) -> String {
        match &item.kind {
            ItemKind::Import {
                path_span, alias, ..
            } => {
                let mut s = format!("import {}", self.text(*path_span));
                if let Some(a) = alias {
                    s.push_str(&format!(" as {}", a.name));
                }
                s
            }
            ItemKind::Let(b) => self.binding(b, ind),
            ItemKind::Fn(f) => self.fn_decl(f, ind),
            ItemKind::Type { name, ty } => {
                format!("type {} = {}", name.name, self.type_expr(ty, ind))
            }
            ItemKind::Param { name, ty, default } => {
                let mut s = format!("param {}: {}", name.name, self.type_expr(ty, ind));
                if let Some(d) = default {
                    s.push_str(" = ");
                    s.push_str(&self.expr(d, ind));
                }
                s
            }
            ItemKind::Output { name, value } => {
                self.expr_after(&format!("output {} = ", name.name), value, ind)
            }
            ItemKind::Assert(a) => self.assertion(a, ind),
            ItemKind::Policy(p) => self.policy(p, ind),
            ItemKind::DefaultTags(value) => self.expr_after("default tags = ", value, ind),
            ItemKind::Moved(m) => format!(
                "moved {} -> {}",
                self.text(m.from_span),
                self.text(m.to_span)
            ),
            ItemKind::Rollout(r) => self.rollout(r, ind),
            ItemKind::Adopt(a) => {
                let head = format!("adopt {}", self.text(a.node_span));
                match &a.from {
                    Some(from) => self.expr_after(&format!("{head} from "), from, ind),
                    None => head,
                }
            }
            ItemKind::Test(t) => self.test(t, ind),
            ItemKind::Error => self.text(item.span).to_string(),
        }
    }

    /// `test "NAME" {`, a line per field and `expect`, `}`.
    fn test(&mut self, t: &Test, ind: usize) -> String {
        let span_of = |l: &TestLine| match l {
            TestLine::Field(f) => f.name.span.to(f.value.span),
            TestLine::Expect(a) => a.span,
        };
        let body = self.seq(
            &t.body,
            span_of,
            &mut |f, l, i| match l {
                TestLine::Field(field) => {
                    f.expr_after(&format!("{} = ", field.name.name), &field.value, i)
                }
                TestLine::Expect(a) => f.keyword_assertion("expect", a, i),
            },
            ind + 1,
            "",
            t.body_span.end,
        );
        format!(
            "test {} {{\n{body}{}}}",
            self.text(t.name_span),
            indent(ind)
        )
    }

    fn binding(&mut self, b: &Binding, ind: usize) -> String {
        let mut s = format!("let {}", b.name.name);
        if let Some(t) = &b.ty {
            s.push_str(": ");
            s.push_str(&self.type_expr(t, ind));
        }
        s.push_str(" = ");
        self.expr_after(&s, &b.value, ind)
    }

    fn assertion(&mut self, a: &Assertion, ind: usize) -> String {
        self.keyword_assertion("assert", a, ind)
    }

    /// `assert COND [, MESSAGE]`, or a test's `expect` line.
    fn keyword_assertion(&mut self, keyword: &str, a: &Assertion, ind: usize) -> String {
        let mut s = format!("{keyword} {}", self.expr(&a.cond, ind));
        if let Some(m) = &a.message {
            s.push_str(", ");
            s.push_str(&self.expr(m, ind));
        }
        s
    }

    fn rollout(&mut self, r: &Rollout, ind: usize) -> String {
        let head = format!("rollout {}: ", self.text(r.name_span));
        let mut s = self.expr_after(&head, &r.targets, ind);
        for o in &r.options {
            s.push_str(", ");
            s.push_str(&format!("{} = {}", o.name.name, self.expr(&o.value, ind)));
        }
        s
    }

    fn policy(&mut self, p: &Policy, ind: usize) -> String {
        let level = match p.level_span {
            Some(_) => format!(" {}", p.level.name()),
            None => String::new(),
        };
        let head = format!(
            "policy {}{level}: {} ",
            self.text(p.name_span),
            self.clauses(&p.clauses, ind)
        );
        let mut s = self.expr_after(&head, &p.cond, ind);
        if let Some(m) = &p.message {
            // The message on a line of its own when it does not fit after the condition.
            let last = s.rsplit('\n').next().map_or(0, |l| l.chars().count());
            // A condition that broke into lines ends in its last conjunct: the message
            // reads apart from it.
            let flat = self
                .flat(m)
                .filter(|f| last + 2 + f.chars().count() <= WIDTH && !s.contains('\n'));
            match flat {
                Some(f) => {
                    s.push_str(", ");
                    s.push_str(&f);
                }
                None => {
                    s.push_str(",\n");
                    s.push_str(&indent(ind + 1));
                    s.push_str(&self.expr(m, ind + 1));
                }
            }
        }
        s
    }

    /// `(…)` of `f`; on one line when that line, with the `head` columns around it (`fn
    /// NAME`, ` -> TYPE {`), fits.
    fn params(&mut self, f: &FnDecl, ind: usize, head: usize) -> String {
        // From after the name to the return type or body: the parentheses and all inside.
        let params_span = Span::new(
            f.name.as_ref().map_or(f.span.start, |n| n.span.end) as usize,
            f.ret.as_ref().map_or(f.body.span.start, |r| r.span.start) as usize,
        );
        let flat: Option<Vec<String>> = f.params.iter().map(|p| self.flat_param(p)).collect();
        if let Some(flat) = flat.filter(|_| !self.has_comment_in(params_span)) {
            let s = flat.join(", ");
            let line = ind * INDENT.len() + head + s.len() + 2;
            // An `=>` body follows on the same line: leave it room.
            let room = !f.arrow || ind * INDENT.len() + s.len() < WIDTH - 20;
            if line <= WIDTH && room {
                return format!("({s})");
            }
        }
        let body = self.seq(
            &f.params,
            |p| p.name.span.to(param_end(p)),
            &mut |fm, p, i| fm.param(p, i),
            ind + 1,
            ",",
            params_span.end + 1,
        );
        format!("(\n{body}{})", indent(ind))
    }

    fn param(&mut self, p: &ParamDecl, ind: usize) -> String {
        let mut s = p.name.name.to_string();
        if let Some(t) = &p.ty {
            s.push_str(": ");
            s.push_str(&self.type_expr(t, ind));
        }
        if let Some(d) = &p.default {
            s.push_str(" = ");
            s.push_str(&self.expr(d, ind));
        }
        s
    }

    fn flat_param(&self, p: &ParamDecl) -> Option<String> {
        let mut s = p.name.name.to_string();
        if let Some(t) = &p.ty {
            s.push_str(": ");
            s.push_str(&self.flat_type(t)?);
        }
        if let Some(d) = &p.default {
            s.push_str(" = ");
            s.push_str(&self.flat(d)?);
        }
        Some(s)
    }

    fn fn_decl(&mut self, f: &FnDecl, ind: usize) -> String {
        let mut s = String::from("fn");
        if let Some(n) = &f.name {
            s.push(' ');
            s.push_str(&n.name);
        }
        let ret = f
            .ret
            .as_ref()
            .map(|r| self.flat_type(r).map_or(WIDTH, |t| t.len() + 4));
        let head = s.len() + ret.unwrap_or(0) + if f.arrow { 3 } else { 2 };
        s.push_str(&self.params(f, ind, head));
        if let Some(r) = &f.ret {
            s.push_str(" -> ");
            s.push_str(&self.type_expr(r, ind));
        }
        if f.arrow {
            s.push_str(" => ");
            s.push_str(&self.expr(&f.body, ind));
        } else {
            s.push(' ');
            // A body on the head's line only when the whole line fits.
            let column = match s.rsplit_once('\n') {
                Some((_, last)) => last.len(),
                None => ind * INDENT.len() + s.len(),
            };
            let compact = f.name.is_some()
                && self
                    .flat_block(&f.body)
                    .is_some_and(|b| column + b.len() <= WIDTH);
            s.push_str(&self.block(&f.body, ind, compact));
        }
        s
    }

    // ---- types ------------------------------------------------------------------------

    fn flat_type(&self, t: &TypeExpr) -> Option<String> {
        if self.has_comment_in(t.span) {
            return None;
        }
        Some(match &t.kind {
            TypeExprKind::Name(path) => path.iter().map(|i| &*i.name).collect::<Vec<_>>().join("."),
            TypeExprKind::Apply { name, arg } => format!("{}[{}]", name.name, self.flat_type(arg)?),
            TypeExprKind::Range {
                base,
                lo,
                hi,
                inclusive,
            } => format!(
                "{}({}{}{})",
                self.flat_type(base)?,
                self.flat(lo)?,
                if *inclusive { "..=" } else { ".." },
                self.flat(hi)?
            ),
            TypeExprKind::Record(fields) => {
                if fields.is_empty() {
                    return Some("{}".into());
                }
                let fs: Option<Vec<String>> =
                    fields.iter().map(|fd| self.flat_field_decl(fd)).collect();
                format!("{{ {} }}", fs?.join(", "))
            }
            TypeExprKind::Error => self.text(t.span).to_string(),
        })
    }

    fn flat_field_decl(&self, fd: &FieldDecl) -> Option<String> {
        let mut s = format!("{}: {}", self.field_name(&fd.name), self.flat_type(&fd.ty)?);
        if let Some(d) = &fd.default {
            s.push_str(" = ");
            s.push_str(&self.flat(d)?);
        }
        Some(s)
    }

    fn type_expr(&mut self, t: &TypeExpr, ind: usize) -> String {
        if let Some(s) = self.flat_type(t) {
            if ind * 2 + s.len() < WIDTH - 20 && !s.contains('\n') {
                return s;
            }
        }
        match &t.kind {
            TypeExprKind::Record(fields) => {
                let body = self.seq(
                    fields,
                    |fd| {
                        fd.name
                            .span
                            .to(fd.default.as_ref().map_or(fd.ty.span, |d| d.span))
                    },
                    &mut |fm, fd, i| {
                        let mut s =
                            format!("{}: {}", fm.field_name(&fd.name), fm.type_expr(&fd.ty, i));
                        if let Some(d) = &fd.default {
                            s.push_str(" = ");
                            s.push_str(&fm.expr(d, i));
                        }
                        s
                    },
                    ind + 1,
                    ",",
                    t.span.end,
                );
                format!("{{\n{body}{}}}", indent(ind))
            }
            TypeExprKind::Apply { name, arg } => {
                format!("{}[{}]", name.name, self.type_expr(arg, ind))
            }
            _ => self
                .flat_type(t)
                .unwrap_or_else(|| self.text(t.span).to_string()),
        }
    }

    // ---- expressions ------------------------------------------------------------------

    /// The one-line form, if the expression has one (no comments, no multi-line strings,
    /// no blocks with statements inside).
    fn flat(&self, e: &Expr) -> Option<String> {
        if self.has_comment_in(e.span) {
            return None;
        }
        Some(match &e.kind {
            ExprKind::Int(_)
            | ExprKind::Size(_)
            | ExprKind::Mode(_)
            | ExprKind::Bool(_)
            | ExprKind::Name(_)
            | ExprKind::Error => self.text(e.span).to_string(),
            ExprKind::Str(_) => {
                let t = self.text(e.span);
                if t.contains('\n') {
                    return None;
                }
                t.to_string()
            }
            ExprKind::List(items) => {
                let xs: Option<Vec<String>> = items.iter().map(|x| self.flat(x)).collect();
                format!("[{}]", xs?.join(", "))
            }
            ExprKind::Record(fields) => {
                if fields.is_empty() {
                    return Some("{}".into());
                }
                let xs: Option<Vec<String>> = fields
                    .iter()
                    .map(|f| {
                        Some(format!(
                            "{} = {}",
                            self.field_name(&f.name),
                            self.flat(&f.value)?
                        ))
                    })
                    .collect();
                format!("{{ {} }}", xs?.join(", "))
            }
            ExprKind::ListComp { clauses, body } => {
                format!("[{} {}]", self.flat_clauses(clauses)?, self.flat(body)?)
            }
            ExprKind::RecordComp {
                clauses,
                key,
                value,
            } => {
                format!(
                    "{{{} {} = {}}}",
                    self.flat_clauses(clauses)?,
                    self.flat(key)?,
                    self.flat(value)?
                )
            }
            ExprKind::Field(base, f) => format!("{}.{}", self.flat(base)?, f.name),
            ExprKind::Index(base, i) => format!("{}[{}]", self.flat(base)?, self.flat(i)?),
            ExprKind::Call { callee, args } => {
                let xs: Option<Vec<String>> = args.iter().map(|a| self.flat_arg(a)).collect();
                format!("{}({})", self.flat(callee)?, xs?.join(", "))
            }
            ExprKind::Unary(UnaryOp::Neg, x) => format!("-{}", self.flat(x)?),
            ExprKind::Unary(UnaryOp::Not, x) => format!("not {}", self.flat(x)?),
            ExprKind::Binary(op, l, r) => {
                format!("{} {} {}", self.flat(l)?, op.symbol(), self.flat(r)?)
            }
            ExprKind::Range { lo, hi, inclusive } => {
                format!(
                    "{}{}{}",
                    self.flat(lo)?,
                    if *inclusive { "..=" } else { ".." },
                    self.flat(hi)?
                )
            }
            ExprKind::If { cond, then, else_ } => {
                format!(
                    "if {} {} else {}",
                    self.flat(cond)?,
                    self.flat_block(then)?,
                    self.flat_else(else_)?
                )
            }
            ExprKind::Block { .. } => self.flat_block(e)?,
            ExprKind::Lambda(f) => {
                if !f.arrow {
                    return None;
                }
                let ps: Option<Vec<String>> = f.params.iter().map(|p| self.flat_param(p)).collect();
                let mut s = format!("fn({})", ps?.join(", "));
                if let Some(r) = &f.ret {
                    s.push_str(&format!(" -> {}", self.flat_type(r)?));
                }
                format!("{s} => {}", self.flat(&f.body)?)
            }
            ExprKind::Paren(x) => format!("({})", self.flat(x)?),
        })
    }

    fn flat_else(&self, e: &Expr) -> Option<String> {
        match &e.kind {
            ExprKind::If { .. } => self.flat(e),
            _ => self.flat_block(e),
        }
    }

    fn flat_block(&self, e: &Expr) -> Option<String> {
        match &e.kind {
            ExprKind::Block { stmts, value } if stmts.is_empty() => {
                Some(format!("{{ {} }}", self.flat(value)?))
            }
            ExprKind::Error => Some("{ }".into()),
            _ => None,
        }
    }

    fn flat_arg(&self, a: &Arg) -> Option<String> {
        Some(match &a.name {
            Some(n) => format!("{} = {}", n.name, self.flat(&a.value)?),
            None => self.flat(&a.value)?,
        })
    }

    fn field_name(&self, name: &Ident) -> String {
        if crate::lexer::is_name(&name.name) {
            name.name.to_string()
        } else {
            self.text(name.span).to_string()
        }
    }

    fn fits(&self, s: &str, ind: usize) -> bool {
        self.fits_after(UNKNOWN_LEAD, s, ind)
    }

    fn fits_after(&self, lead: usize, s: &str, ind: usize) -> bool {
        !s.contains('\n') && ind * INDENT.len() + lead + s.len() <= WIDTH
    }

    fn expr(&mut self, e: &Expr, ind: usize) -> String {
        self.expr_lead(UNKNOWN_LEAD, e, ind)
    }

    /// `lead` followed by `e`, where `lead` is the text before `e` on its line.
    fn expr_after(&mut self, lead: &str, e: &Expr, ind: usize) -> String {
        let text = self.expr_lead(lead.chars().count(), e, ind);
        format!("{lead}{text}")
    }

    fn expr_lead(&mut self, lead: usize, e: &Expr, ind: usize) -> String {
        if let Some(s) = self.flat(e) {
            if self.fits_after(lead, &s, ind) {
                return s;
            }
        }
        self.broken(e, ind, lead)
    }

    /// The multi-line layout of `e` (the same as the flat one for what cannot break).
    fn broken(&mut self, e: &Expr, ind: usize, lead: usize) -> String {
        match &e.kind {
            ExprKind::List(items) => {
                let body = self.seq(
                    items,
                    |x| x.span,
                    &mut |f, x, i| f.expr(x, i),
                    ind + 1,
                    ",",
                    e.span.end,
                );
                format!("[\n{body}{}]", indent(ind))
            }
            ExprKind::Record(fields) => {
                let body = self.seq(
                    fields,
                    |fl| fl.name.span.to(fl.value.span),
                    &mut |f, fl, i| {
                        f.expr_after(&format!("{} = ", f.field_name(&fl.name)), &fl.value, i)
                    },
                    ind + 1,
                    ",",
                    e.span.end,
                );
                format!("{{\n{body}{}}}", indent(ind))
            }
            ExprKind::ListComp { clauses, body } => {
                let head = self.clauses(clauses, ind);
                let hug = matches!(
                    body.kind,
                    ExprKind::Record(_) | ExprKind::Call { .. } | ExprKind::List(_)
                ) && !self
                    .has_comment_in(Span::new(e.span.start as usize, body.span.start as usize))
                    && !self.has_comment_in(Span::new(body.span.end as usize, e.span.end as usize));
                if hug {
                    // `[for x in xs => {` … `}]`: the body opens on the clause line, and
                    // breaks unless the whole comprehension fits on it.
                    let body_text = match self.flat(body) {
                        Some(f) if self.fits_after(lead, &format!("[{head} {f}]"), ind) => f,
                        _ => self.broken(body, ind, 0),
                    };
                    return format!("[{head} {body_text}]");
                }
                let b = self.elements_of_one(body, ind, e.span.end);
                format!("[{head}\n{b}{}]", indent(ind))
            }
            ExprKind::RecordComp {
                clauses,
                key,
                value,
            } => {
                let head = self.clauses(clauses, ind);
                let entry = [(key.as_ref(), value.as_ref())];
                let body = self.seq(
                    &entry,
                    |(k, v)| k.span.to(v.span),
                    &mut |f, (k, v), i| {
                        let k = f.expr(k, i);
                        f.expr_after(&format!("{k} = "), v, i)
                    },
                    ind + 1,
                    "",
                    e.span.end,
                );
                format!("{{{head}\n{body}{}}}", indent(ind))
            }
            ExprKind::Call { callee, args } => {
                let c = self.expr(callee, ind);
                let body = self.seq(
                    args,
                    |a| {
                        a.name
                            .as_ref()
                            .map_or(a.value.span, |n| n.span.to(a.value.span))
                    },
                    &mut |f, a, i| match &a.name {
                        Some(n) => f.expr_after(&format!("{} = ", n.name), &a.value, i),
                        None => f.expr(&a.value, i),
                    },
                    ind + 1,
                    ",",
                    e.span.end,
                );
                format!("{c}(\n{body}{})", indent(ind))
            }
            ExprKind::Field(base, fl) => format!("{}.{}", self.expr(base, ind), fl.name),
            ExprKind::Index(base, i) => format!("{}[{}]", self.expr(base, ind), self.expr(i, ind)),
            ExprKind::Unary(UnaryOp::Neg, x) => format!("-{}", self.expr(x, ind)),
            ExprKind::Unary(UnaryOp::Not, x) => format!("not {}", self.expr(x, ind)),
            ExprKind::Binary(..) => self.binary(e, ind, lead),
            ExprKind::Range { lo, hi, inclusive } => {
                format!(
                    "{}{}{}",
                    self.expr(lo, ind),
                    if *inclusive { "..=" } else { ".." },
                    self.expr(hi, ind)
                )
            }
            ExprKind::If { .. } => self.if_expr(e, ind),
            ExprKind::Block { .. } => self.block(e, ind, false),
            ExprKind::Lambda(f) => self.fn_decl(f, ind),
            ExprKind::Paren(x) => format!("({})", self.expr(x, ind)),
            ExprKind::Str(_)
            | ExprKind::Int(_)
            | ExprKind::Size(_)
            | ExprKind::Mode(_)
            | ExprKind::Bool(_)
            | ExprKind::Name(_)
            | ExprKind::Error => self.verbatim(e.span),
        }
    }

    /// A chain of one precedence (`a and b and c`, `x + y`) that does not fit: a line per
    /// operand, each after the first led by its operator one level in, so that a long
    /// policy condition reads as its conjuncts rather than as a call broken at its
    /// arguments. Operands that have no one-line form (a comment or a multi-line string
    /// inside), or one too long for a line of its own, keep the chain on the lines they
    /// need, as before.
    fn binary(&mut self, e: &Expr, ind: usize, lead: usize) -> String {
        let mut rest: Vec<(BinaryOp, &Expr)> = Vec::new();
        let mut first = e;
        if let ExprKind::Binary(top, _, _) = &e.kind {
            let prec = top.precedence();
            while let ExprKind::Binary(op, l, r) = &first.kind {
                if op.precedence() != prec {
                    break;
                }
                rest.push((*op, r));
                first = l;
            }
        }
        rest.reverse();
        let flats: Option<Vec<String>> = std::iter::once(first)
            .chain(rest.iter().map(|(_, r)| *r))
            .map(|x| self.flat(x))
            .collect();
        // Broken only where that puts each operand whole on a line of its own; else the
        // operands break inside (`join(\n  …\n) + "\n"`), as they did before.
        let each_fits = flats.as_ref().is_some_and(|fs| {
            self.fits_after(lead, &fs[0], ind)
                && (rest.iter().zip(&fs[1..]))
                    .all(|((op, _), f)| self.fits_after(op.symbol().len() + 1, f, ind + 1))
        });
        let Some(flats) = flats.filter(|_| each_fits) else {
            let mut s = self.expr(first, ind);
            for (op, r) in &rest {
                s.push_str(&format!(" {} {}", op.symbol(), self.expr(r, ind)));
            }
            return s;
        };
        let mut joined = flats[0].clone();
        for ((op, _), f) in rest.iter().zip(&flats[1..]) {
            joined.push_str(&format!(" {} {f}", op.symbol()));
        }
        if self.fits_after(lead, &joined, ind) {
            // Only a comment between operands kept the flat form from being used.
            return joined;
        }
        let mut s = self.expr_lead(lead, first, ind);
        for (op, r) in &rest {
            s.push('\n');
            s.push_str(&indent(ind + 1));
            s.push_str(&self.expr_after(&format!("{} ", op.symbol()), r, ind + 1));
        }
        s
    }

    /// Source text printed as written; comments inside it (in a `${…}`) go with it.
    fn verbatim(&mut self, span: Span) -> String {
        while self
            .comments
            .get(self.next)
            .is_some_and(|c| c.span.start < span.end)
        {
            self.next += 1;
        }
        self.text(span).to_string()
    }

    /// A single indented element (a comprehension's body) with its comments.
    fn elements_of_one(&mut self, body: &Expr, ind: usize, close: u32) -> String {
        self.seq(
            std::slice::from_ref(body),
            |x| x.span,
            &mut |f, x, i| f.expr(x, i),
            ind + 1,
            "",
            close,
        )
    }

    /// `for x in xs if c =>`: flat (`None` if a part cannot be flat) or laid out at `ind`.
    fn clauses_with(&mut self, clauses: &[Clause], ind: Option<usize>) -> Option<String> {
        let mut parts = Vec::new();
        for c in clauses {
            let (head, e) = match c {
                Clause::For {
                    first,
                    second: Some(s),
                    iter,
                } => (format!("for {}, {} in ", first.name, s.name), iter),
                Clause::For {
                    first,
                    second: None,
                    iter,
                } => (format!("for {} in ", first.name), iter),
                Clause::If(cond) => ("if ".to_string(), cond),
            };
            let body = match ind {
                Some(i) => self.expr(e, i + 1),
                None => self.flat(e)?,
            };
            parts.push(head + &body);
        }
        Some(format!("{} =>", parts.join(" ")))
    }

    fn flat_clauses(&self, clauses: &[Clause]) -> Option<String> {
        // Flat rendering reads only; the `&mut` is for the laid-out form's comments.
        let mut me = Fmt {
            src: self.src,
            comments: self.comments,
            next: self.next,
            last_end: self.last_end,
        };
        me.clauses_with(clauses, None)
    }

    fn clauses(&mut self, clauses: &[Clause], ind: usize) -> String {
        self.clauses_with(clauses, Some(ind))
            .expect("the laid-out form always exists")
    }

    fn if_expr(&mut self, e: &Expr, ind: usize) -> String {
        let ExprKind::If { cond, then, else_ } = &e.kind else {
            unreachable!()
        };
        // Only reached when the whole `if` does not fit on one line: its blocks break.
        let mut s = format!(
            "if {} {}",
            self.expr(cond, ind),
            self.block(then, ind, false)
        );
        s.push_str(" else ");
        match &else_.kind {
            ExprKind::If { .. } => s.push_str(&self.if_expr(else_, ind)),
            _ => s.push_str(&self.block(else_, ind, false)),
        }
        s
    }

    /// `{ … }` on several lines (or `{ x }` when it is short and `compact` allows).
    fn block(&mut self, e: &Expr, ind: usize, compact: bool) -> String {
        if compact {
            if let Some(s) = self.flat_block(e) {
                if self.fits(&s, ind) {
                    return s;
                }
            }
        }
        let ExprKind::Block { stmts, value } = &e.kind else {
            return "{ }".into();
        };
        enum Part<'e> {
            Stmt(&'e Stmt),
            Value(&'e Expr),
        }
        let mut parts: Vec<Part> = stmts.iter().map(Part::Stmt).collect();
        parts.push(Part::Value(value));
        let span_of = |p: &Part| match p {
            Part::Stmt(Stmt::Let(b)) => b.name.span.to(b.value.span),
            Part::Stmt(Stmt::Assert(a)) => a.span,
            Part::Value(v) => v.span,
        };
        let body = self.seq(
            &parts,
            span_of,
            &mut |f, p, i| match p {
                Part::Stmt(Stmt::Let(b)) => match &b.value.kind {
                    ExprKind::Lambda(fd) if fd.name.is_some() => f.fn_decl(fd, i),
                    _ => f.binding(b, i),
                },
                Part::Stmt(Stmt::Assert(a)) => f.assertion(a, i),
                Part::Value(v) => f.expr(v, i),
            },
            ind + 1,
            "",
            e.span.end,
        );
        format!("{{\n{body}{}}}", indent(ind))
    }
}

fn param_end(p: &ParamDecl) -> Span {
    p.default
        .as_ref()
        .map(|d| d.span)
        .or(p.ty.as_ref().map(|t| t.span))
        .unwrap_or(p.name.span)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Formats `input`, compares with `expected`, and checks the result is a fixed point.
    fn check(input: &str, expected: &str) {
        let once = format(input).unwrap_or_else(|e| panic!("{input:?} did not parse: {e:?}"));
        assert_eq!(once, expected, "formatting {input:?}");
        let twice = format(&once).expect("formatted output parses");
        assert_eq!(twice, once, "formatting is not idempotent for {input:?}");
    }

    #[test]
    fn items_and_spacing() {
        check(
            "let   x=1\nlet y =  [1,2 ,3]",
            "let x = 1\nlet y = [1, 2, 3]\n",
        );
        check("let a = 1\n\n\n\nlet b = 2\n", "let a = 1\n\nlet b = 2\n");
        check(
            "import \"std/debian\"   as  deb",
            "import \"std/debian\" as deb\n",
        );
        check("param n : int( 1 ..= 7 ) = 3", "param n: int(1..=7) = 3\n");
        check("", "");
    }

    #[test]
    fn tests() {
        check(
            "test  \"t\"{\nenv=\"./prod.env\"\n  expect   len(xs)==3 ,  \"three\"\n}",
            "test \"t\" {\n  env = \"./prod.env\"\n  expect len(xs) == 3, \"three\"\n}\n",
        );
        check(
            "test \"t\" {\n  # mocked\n  mocks = {}  # none\n\n  expect true\n}\n",
            "test \"t\" {\n  # mocked\n  mocks = {}  # none\n\n  expect true\n}\n",
        );
        check(
            "test \"t\" { expect a; expect b }",
            "test \"t\" {\n  expect a\n  expect b\n}\n",
        );
    }

    #[test]
    fn comments_are_kept() {
        check(
            "# head\nlet x = 1 # trailing\n\n# lead\nlet y = 2\n# tail\n",
            "# head\nlet x = 1  # trailing\n\n# lead\nlet y = 2\n# tail\n",
        );
        check(
            "let r = { a = 1, # one\n b = 2 }",
            "let r = {\n  a = 1,  # one\n  b = 2,\n}\n",
        );
        // A comment inside an operator expression moves to the end of the element.
        check(
            "let x = 1 + # odd place\n 2\n",
            "let x = 1 + 2  # odd place\n",
        );
        // A moved comment and a trailing one stay two comments (found by the fuzzer).
        check("fn g(#\n){a}#", "fn g(\n  #\n) { a }  #\n");
        check("let x = 1 + # a\n 2 # b\n", "let x = 1 + 2  # a\n# b\n");
        // Found by the fuzzer: a comment inside an interpolation is part of the string.
        check("let s = \"${x#\n}\"", "let s = \"${x#\n}\"\n");
        check(
            "let r = {for k in m => k #\n= 1}",
            "let r = {for k in m =>\n  k = 1  #\n}\n",
        );
    }

    /// A function's head breaks when its whole line would pass the width, whatever comes
    /// after the parameters: a return type and `{`, or a body on the same line.
    #[test]
    fn long_function_heads_break() {
        check(
            "fn unit(target: target, u: Unit, after: list[node] = [], expect: list[check] = []) -> { file: file, service: service } { u }",
            "fn unit(\n  target: target,\n  u: Unit,\n  after: list[node] = [],\n  expect: list[check] = [],\n) -> { file: file, service: service } { u }\n",
        );
        check(
            "fn config_map(meta: Meta, name: str, data: dict[str]) -> manifest { object(meta, \"v1\", \"ConfigMap\", name) }",
            "fn config_map(meta: Meta, name: str, data: dict[str]) -> manifest {\n  object(meta, \"v1\", \"ConfigMap\", name)\n}\n",
        );
        check("fn f(a: int) -> int { a }", "fn f(a: int) -> int { a }\n");
    }

    #[test]
    fn long_things_break() {
        let long = format!(
            "let xs = [{}]",
            (0..40)
                .map(|i| format!("\"item{i}\""))
                .collect::<Vec<_>>()
                .join(", ")
        );
        let out = format(&long).unwrap();
        assert!(out.starts_with("let xs = [\n  \"item0\",\n"), "{out}");
        assert_eq!(format(&out).unwrap(), out);
    }

    #[test]
    fn functions_and_blocks() {
        check(
            "fn f(a:int,b = 2)->int{let c=a+b\n c*2}",
            "fn f(a: int, b = 2) -> int {\n  let c = a + b\n  c * 2\n}\n",
        );
        check("let g = fn(x) => x+1", "let g = fn(x) => x + 1\n");
        check(
            "let v = if a {1} else if b {2} else {3}",
            "let v = if a { 1 } else if b { 2 } else { 3 }\n",
        );
        check(
            "let l = [for h in hosts if h.prod=>h.name]",
            "let l = [for h in hosts if h.prod => h.name]\n",
        );
        check(
            "let m = {for h in hosts=>h.name=h}",
            "let m = {for h in hosts => h.name = h}\n",
        );
    }

    #[test]
    fn strings_are_verbatim() {
        check("let s = \"a ${ x } \\n\"", "let s = \"a ${ x } \\n\"\n");
        check(
            "let s = \"\"\"\n  a\n  b\n\"\"\"",
            "let s = \"\"\"\n  a\n  b\n\"\"\"\n",
        );
    }

    #[test]
    fn moved_items() {
        check(
            "moved   \"vm:web-0\"->\"vm:web-a\"\n# kept\nmoved \"host:db\"  ->  \"host:db-0\"",
            "moved \"vm:web-0\" -> \"vm:web-a\"\n# kept\nmoved \"host:db\" -> \"host:db-0\"\n",
        );
    }

    #[test]
    fn rollouts() {
        check(
            "rollout   \"web\" :[web0,web1 ],batch=\"25%\" ,  max_failures= 1",
            "rollout \"web\": [web0, web1], batch = \"25%\", max_failures = 1\n",
        );
        check("rollout \"db\": dbs", "rollout \"db\": dbs\n");
    }

    #[test]
    fn policies_and_default_tags() {
        check(
            "default   tags={owner=\"ops\"}\npolicy \"p\"  advisory :for n in nodes( \"vm\" ) if n.cpus>1=>n.memory<=2GiB,\"big\"",
            "default tags = { owner = \"ops\" }\npolicy \"p\" advisory: for n in nodes(\"vm\") if n.cpus > 1 => n.memory <= 2GiB, \"big\"\n",
        );
        // A message that does not fit goes on a line of its own.
        let long = format!("\"{}\"", "x".repeat(60));
        check(
            &format!(
                "policy \"p\": for n in nodes(\"vm\") => n.memory <= limits.vm_memory, {long}"
            ),
            &format!(
                "policy \"p\": for n in nodes(\"vm\") => n.memory <= limits.vm_memory,\n  {long}\n"
            ),
        );
    }

    #[test]
    fn adopt_lines() {
        check(
            "adopt   \"web-0/file:/etc/motd\"\nadopt \"vm:legacy\"  from {disk=\"/var/lib/vms/legacy.qcow2\",port=2222}",
            "adopt \"web-0/file:/etc/motd\"\nadopt \"vm:legacy\" from { disk = \"/var/lib/vms/legacy.qcow2\", port = 2222 }\n",
        );
        // `from` is a name elsewhere.
        check("let from = 1\n", "let from = 1\n");
    }

    /// A condition too long for its line breaks before each `and` / `or`, one level in,
    /// never inside a call that fits on its own line (issue 35, item 17).
    #[test]
    fn long_conditions_break_at_their_operators() {
        check(
            "policy \"vm-size\": for v in nodes(\"vm\") => v.memory <= limits.vm_memory and v.cpus <= limits.vm_cpus and contains(v.tags, \"owner\"),\n  \"${v.name} is too large\"\n",
            "policy \"vm-size\": for v in nodes(\"vm\") => v.memory <= limits.vm_memory\n  and v.cpus <= limits.vm_cpus\n  and contains(v.tags, \"owner\"),\n  \"${v.name} is too large\"\n",
        );
        // Each precedence breaks on its own: an `or` of `and`s.
        check(
            "let ok = contains(machine.tags, \"owner\") and machine.memory <= 4GiB or contains(machine.tags, \"exception\") and machine.memory <= 64GiB\n",
            "let ok = contains(machine.tags, \"owner\") and machine.memory <= 4GiB\n  or contains(machine.tags, \"exception\") and machine.memory <= 64GiB\n",
        );
        // Inside a call's argument, one level in from the argument.
        check(
            "let r = f(\n  condition = contains(machine.tags, \"owner\") and machine.memory <= 4GiB and machine.cpus <= 8 and ok,\n)\n",
            "let r = f(\n  condition = contains(machine.tags, \"owner\")\n    and machine.memory <= 4GiB\n    and machine.cpus <= 8\n    and ok,\n)\n",
        );
        // A comment between the operands still keeps a short chain on one line.
        check("let x = a and # why\n  b\n", "let x = a and b  # why\n");
        // Every line fits, and comments survive.
        let long = format!(
            "# lead\nlet total = {}  # sum\n",
            (0..30)
                .map(|i| format!("value_{i}"))
                .collect::<Vec<_>>()
                .join(" + ")
        );
        let out = format(&long).unwrap();
        assert!(out.lines().all(|l| l.chars().count() <= WIDTH), "{out}");
        assert!(out.contains("# lead") && out.contains("# sum"), "{out}");
        assert_eq!(format(&out).unwrap(), out);
    }

    #[test]
    fn broken_input_is_refused() {
        assert!(format("let = 1").is_err());
    }
}
