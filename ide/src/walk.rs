//! The calls of a module that enclose an offset: what completion needs to know which
//! function's arguments the cursor is among.

use envc_lang::ast::{Arg, Clause, Expr, ExprKind, ItemKind, Module, Stmt, StrPart};

/// Calls whose span holds `offset`, outermost first.
pub fn calls_around(module: &Module, offset: u32) -> Vec<(&Expr, &[Arg])> {
    let mut out = Vec::new();
    for item in &module.items {
        if item.span.start <= offset && offset <= item.span.end {
            for e in item_exprs(&item.kind) {
                visit(e, offset, &mut out);
            }
        }
    }
    out
}

fn item_exprs(kind: &ItemKind) -> Vec<&Expr> {
    match kind {
        ItemKind::Let(b) => vec![&b.value],
        ItemKind::Fn(f) => {
            let mut v: Vec<&Expr> = f.params.iter().filter_map(|p| p.default.as_ref()).collect();
            v.push(&f.body);
            v
        }
        ItemKind::Param { default, .. } => default.iter().collect(),
        ItemKind::Output { value, .. } => vec![value],
        ItemKind::Assert(a) => std::iter::once(&a.cond).chain(a.message.as_ref()).collect(),
        ItemKind::Policy(p) => {
            let mut v = clauses_exprs(&p.clauses);
            v.push(&p.cond);
            v.extend(p.message.as_ref());
            v
        }
        ItemKind::DefaultTags(value) => vec![value],
        ItemKind::Adopt(a) => a.from.iter().collect(),
        ItemKind::Test(t) => t
            .body
            .iter()
            .flat_map(|l| match l {
                envc_lang::ast::TestLine::Field(f) => vec![&f.value],
                envc_lang::ast::TestLine::Expect(a) => {
                    std::iter::once(&a.cond).chain(a.message.as_ref()).collect()
                }
            })
            .collect(),
        ItemKind::Rollout(r) => std::iter::once(&r.targets)
            .chain(r.options.iter().map(|o| &o.value))
            .collect(),
        ItemKind::Import { .. } | ItemKind::Type { .. } | ItemKind::Moved(_) | ItemKind::Error => {
            vec![]
        }
    }
}

fn visit<'a>(e: &'a Expr, offset: u32, out: &mut Vec<(&'a Expr, &'a [Arg])>) {
    if offset < e.span.start || offset > e.span.end {
        return;
    }
    let mut go = |x: &'a Expr| visit(x, offset, out);
    match &e.kind {
        ExprKind::Call { callee, args } => {
            // The callee first: a call in the callee is not around the arguments.
            go(callee);
            out.push((callee, args));
            for a in args {
                visit(&a.value, offset, out);
            }
        }
        ExprKind::Str(parts) => {
            for p in parts {
                if let StrPart::Interp(x) = p {
                    go(x);
                }
            }
        }
        ExprKind::List(xs) => xs.iter().for_each(go),
        ExprKind::Record(fs) => fs.iter().for_each(|f| go(&f.value)),
        ExprKind::ListComp { clauses, body } => {
            clauses_exprs(clauses).into_iter().for_each(&mut go);
            go(body);
        }
        ExprKind::RecordComp {
            clauses,
            key,
            value,
        } => {
            clauses_exprs(clauses).into_iter().for_each(&mut go);
            go(key);
            go(value);
        }
        ExprKind::Field(x, _) | ExprKind::Unary(_, x) | ExprKind::Paren(x) => go(x),
        ExprKind::Index(a, b) | ExprKind::Binary(_, a, b) => {
            go(a);
            go(b);
        }
        ExprKind::Range { lo, hi, .. } => {
            go(lo);
            go(hi);
        }
        ExprKind::If { cond, then, else_ } => {
            go(cond);
            go(then);
            go(else_);
        }
        ExprKind::Block { stmts, value } => {
            for s in stmts {
                match s {
                    Stmt::Let(b) => go(&b.value),
                    Stmt::Assert(a) => {
                        go(&a.cond);
                        if let Some(m) = &a.message {
                            go(m);
                        }
                    }
                }
            }
            go(value);
        }
        ExprKind::Lambda(f) => {
            f.params
                .iter()
                .filter_map(|p| p.default.as_ref())
                .for_each(&mut go);
            go(&f.body);
        }
        ExprKind::Int(_)
        | ExprKind::Size(_)
        | ExprKind::Mode(_)
        | ExprKind::Bool(_)
        | ExprKind::Name(_)
        | ExprKind::Error => {}
    }
}

fn clauses_exprs(clauses: &[Clause]) -> Vec<&Expr> {
    clauses
        .iter()
        .map(|c| match c {
            Clause::For { iter, .. } => iter,
            Clause::If(x) => x,
        })
        .collect()
}
