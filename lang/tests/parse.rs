//! Parser tests, data-driven: each input is parsed and printed as an S-expression, with
//! the codes of any errors, and compared with the expected text.

#![allow(clippy::unwrap_used)] // a test that cannot go on fails by panicking

use envc_lang::ast::*;
use envc_lang::parse;

fn sexp(e: &Expr) -> String {
    match &e.kind {
        ExprKind::Int(n) => n.to_string(),
        ExprKind::Size(n) => format!("{n}B"),
        ExprKind::Mode(m) => format!("0o{m:o}"),
        ExprKind::Bool(b) => b.to_string(),
        ExprKind::Str(parts) => {
            let ps: Vec<String> = parts
                .iter()
                .map(|p| match p {
                    StrPart::Lit(s) => format!("{s:?}"),
                    StrPart::Interp(x) => format!("${{{}}}", sexp(x)),
                })
                .collect();
            format!("(str {})", ps.join(" "))
        }
        ExprKind::Name(n) => n.to_string(),
        ExprKind::List(xs) => format!("[{}]", xs.iter().map(sexp).collect::<Vec<_>>().join(" ")),
        ExprKind::Record(fs) => {
            format!(
                "{{{}}}",
                fs.iter()
                    .map(|f| format!("{}={}", f.name.name, sexp(&f.value)))
                    .collect::<Vec<_>>()
                    .join(" ")
            )
        }
        ExprKind::ListComp { clauses, body } => {
            format!("(listcomp {} => {})", clauses_sexp(clauses), sexp(body))
        }
        ExprKind::RecordComp {
            clauses,
            key,
            value,
        } => {
            format!(
                "(reccomp {} => {}={})",
                clauses_sexp(clauses),
                sexp(key),
                sexp(value)
            )
        }
        ExprKind::Field(b, f) => format!("(. {} {})", sexp(b), f.name),
        ExprKind::Index(b, i) => format!("(index {} {})", sexp(b), sexp(i)),
        ExprKind::Call { callee, args } => {
            let a: Vec<String> = args
                .iter()
                .map(|a| match &a.name {
                    Some(n) => format!("{}={}", n.name, sexp(&a.value)),
                    None => sexp(&a.value),
                })
                .collect();
            format!("(call {} {})", sexp(callee), a.join(" "))
        }
        ExprKind::Unary(UnaryOp::Neg, x) => format!("(- {})", sexp(x)),
        ExprKind::Unary(UnaryOp::Not, x) => format!("(not {})", sexp(x)),
        ExprKind::Binary(op, l, r) => format!("({} {} {})", op.symbol(), sexp(l), sexp(r)),
        ExprKind::Range { lo, hi, inclusive } => format!(
            "({} {} {})",
            if *inclusive { "..=" } else { ".." },
            sexp(lo),
            sexp(hi)
        ),
        ExprKind::If { cond, then, else_ } => {
            format!("(if {} {} {})", sexp(cond), sexp(then), sexp(else_))
        }
        ExprKind::Block { stmts, value } => {
            let mut parts: Vec<String> = stmts
                .iter()
                .map(|s| match s {
                    Stmt::Let(b) => format!("(let {} {})", b.name.name, sexp(&b.value)),
                    Stmt::Assert(a) => format!("(assert {})", sexp(&a.cond)),
                })
                .collect();
            parts.push(sexp(value));
            format!("(block {})", parts.join(" "))
        }
        ExprKind::Lambda(f) => format!(
            "(fn ({}) {})",
            f.params
                .iter()
                .map(|p| p.name.name.to_string())
                .collect::<Vec<_>>()
                .join(" "),
            sexp(&f.body)
        ),
        ExprKind::Paren(x) => sexp(x),
        ExprKind::Error => "ERR".into(),
    }
}

fn clauses_sexp(cs: &[Clause]) -> String {
    cs.iter()
        .map(|c| match c {
            Clause::For {
                first,
                second: None,
                iter,
            } => format!("for {} in {}", first.name, sexp(iter)),
            Clause::For {
                first,
                second: Some(s),
                iter,
            } => format!("for {},{} in {}", first.name, s.name, sexp(iter)),
            Clause::If(x) => format!("if {}", sexp(x)),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn ty_sexp(t: &TypeExpr) -> String {
    match &t.kind {
        TypeExprKind::Name(p) => p
            .iter()
            .map(|i| i.name.to_string())
            .collect::<Vec<_>>()
            .join("."),
        TypeExprKind::Apply { name, arg } => format!("{}[{}]", name.name, ty_sexp(arg)),
        TypeExprKind::Range {
            base,
            lo,
            hi,
            inclusive,
        } => {
            format!(
                "{}({}{}{})",
                ty_sexp(base),
                sexp(lo),
                if *inclusive { "..=" } else { ".." },
                sexp(hi)
            )
        }
        TypeExprKind::Record(fs) => format!(
            "{{{}}}",
            fs.iter()
                .map(|f| format!(
                    "{}:{}{}",
                    f.name.name,
                    ty_sexp(&f.ty),
                    f.default
                        .as_ref()
                        .map_or(String::new(), |d| format!("={}", sexp(d)))
                ))
                .collect::<Vec<_>>()
                .join(" ")
        ),
        TypeExprKind::Error => "ERR".into(),
    }
}

fn item_sexp(i: &Item) -> String {
    match &i.kind {
        ItemKind::Import { path, alias, .. } => format!(
            "(import {path:?}{})",
            alias
                .as_ref()
                .map_or(String::new(), |a| format!(" as {}", a.name))
        ),
        ItemKind::Let(b) => format!(
            "(let {}{} {})",
            b.name.name,
            b.ty.as_ref()
                .map_or(String::new(), |t| format!(":{}", ty_sexp(t))),
            sexp(&b.value)
        ),
        ItemKind::Fn(f) => format!(
            "(fn {} ({}){} {})",
            f.name.as_ref().unwrap().name,
            f.params
                .iter()
                .map(|p| format!(
                    "{}{}{}",
                    p.name.name,
                    p.ty.as_ref()
                        .map_or(String::new(), |t| format!(":{}", ty_sexp(t))),
                    p.default
                        .as_ref()
                        .map_or(String::new(), |d| format!("={}", sexp(d)))
                ))
                .collect::<Vec<_>>()
                .join(" "),
            f.ret
                .as_ref()
                .map_or(String::new(), |t| format!(" -> {}", ty_sexp(t))),
            sexp(&f.body)
        ),
        ItemKind::Type { name, ty } => format!("(type {} {})", name.name, ty_sexp(ty)),
        ItemKind::Param { name, ty, default } => format!(
            "(param {}:{}{})",
            name.name,
            ty_sexp(ty),
            default
                .as_ref()
                .map_or(String::new(), |d| format!(" {}", sexp(d)))
        ),
        ItemKind::Output { name, value } => format!("(output {} {})", name.name, sexp(value)),
        ItemKind::Assert(a) => format!(
            "(assert {}{})",
            sexp(&a.cond),
            a.message
                .as_ref()
                .map_or(String::new(), |m| format!(" {}", sexp(m)))
        ),
        ItemKind::Policy(p) => format!(
            "(policy {:?} {} {} {}{})",
            p.name,
            p.level.name(),
            clauses_sexp(&p.clauses),
            sexp(&p.cond),
            p.message
                .as_ref()
                .map_or(String::new(), |m| format!(" {}", sexp(m)))
        ),
        ItemKind::DefaultTags(value) => format!("(default-tags {})", sexp(value)),
        ItemKind::Moved(m) => format!("(moved {:?} {:?})", m.from, m.to),
        ItemKind::Rollout(r) => format!(
            "(rollout {:?} {}{})",
            r.name,
            sexp(&r.targets),
            r.options
                .iter()
                .map(|o| format!(" ({} {})", o.name.name, sexp(&o.value)))
                .collect::<String>()
        ),
        ItemKind::Adopt(a) => format!(
            "(adopt {:?}{})",
            &*a.node,
            a.from
                .as_ref()
                .map_or(String::new(), |f| format!(" from {}", sexp(f)))
        ),
        ItemKind::Test(t) => format!(
            "(test {:?}{})",
            &*t.name,
            t.body
                .iter()
                .map(|l| match l {
                    TestLine::Field(f) => format!(" ({} {})", f.name.name, sexp(&f.value)),
                    TestLine::Expect(a) => format!(
                        " (expect {}{})",
                        sexp(&a.cond),
                        a.message
                            .as_ref()
                            .map_or(String::new(), |m| format!(" {}", sexp(m)))
                    ),
                })
                .collect::<String>()
        ),
        ItemKind::Error => "ERR".into(),
    }
}

/// Parses `src`; the items as S-expressions, one per line, then `! code` per error.
fn check(src: &str, expected: &str) {
    let p = parse(src, 0);
    let mut got: Vec<String> = p.module.items.iter().map(item_sexp).collect();
    got.extend(p.errors.iter().map(|e| format!("! {}", e.code)));
    assert_eq!(got.join("\n"), expected.trim(), "parsing {src:?}");
}

#[test]
fn precedence() {
    check("let x = 1 + 2 * 3 - 4", "(let x (- (+ 1 (* 2 3)) 4))");
    check(
        "let x = a or b and not c == d",
        "(let x (or a (and b (not (== c d)))))",
    );
    check(
        "let x = -a.b(c)[0]",
        "(let x (- (index (call (. a b) c) 0)))",
    );
    check("let x = 0..n + 1", "(let x (.. 0 (+ n 1)))");
    check("let x = 1..=3", "(let x (..= 1 3))");
    check("let x = (1 + 2) * 3", "(let x (* (+ 1 2) 3))");
}

#[test]
fn literals() {
    check(
        "let x = [512MiB, 1KB, 0o755, true, \"a\\tb\"]",
        "(let x [536870912B 1000B 0o755 true (str \"a\\tb\")])",
    );
    check(
        "let s = \"x${a + 1}y\"",
        "(let s (str \"x\" ${(+ a 1)} \"y\"))",
    );
    check(
        "let s = \"\"\"\n  one\n    two ${x}\n  \"\"\"",
        "(let s (str \"one\\n  two \" ${x} \"\\n\"))",
    );
    check("let r = { a = 1, \"b-c\" = 2, }", "(let r {a=1 b-c=2})");
}

/// A keyword is a field name where only a field name can stand (systemd's `type`,
/// Kubernetes' `for`), and record types take quoted names as record literals do; a
/// keyword still cannot name a binding.
#[test]
fn keywords_and_quoted_names_as_fields() {
    check(
        "let u = { type = \"oneshot\", for = 1, if = 2 }",
        "(let u {type=(str \"oneshot\") for=1 if=2})",
    );
    check("let t = u.type", "(let t (. u type))");
    check(
        "type T = { type: str, \"cost-center\": str = \"\" }",
        "(type T {type:str cost-center:str=(str )})",
    );
    check("let type = 1", "(let type 1)\n! parse::keyword-as-name");
}

#[test]
fn comprehensions_calls_and_functions() {
    check(
        "let x = [for h in hs if h.p => h.n]",
        "(let x (listcomp for h in hs if (. h p) => (. h n)))",
    );
    check(
        "let x = {for k, v in r => k = v}",
        "(let x (reccomp for k,v in r => k=v))",
    );
    check("let x = f(1, port = 2)", "(let x (call f 1 port=2))");
    check("let f = fn(x, y) => x + y", "(let f (fn (x y) (+ x y)))");
    check(
        "fn f(a: int, b = 2) -> int {\n  let c = a + b\n  assert c > 0\n  c\n}",
        "(fn f (a:int b=2) -> int (block (let c (+ a b)) (assert (> c 0)) c))",
    );
    check(
        "let v = if a { 1 } else if b { 2 } else { 3 }",
        "(let v (if a (block 1) (if b (block 2) (block 3))))",
    );
}

#[test]
fn items() {
    check(
        "import \"std/debian\"\nimport \"./lib.env\" as l\nparam n: int(1..=7) = 3\ntype T = { a: list[str] = [], b: m.Port }\noutput o = n\nassert n > 0, \"m\"",
        "(import \"std/debian\")\n(import \"./lib.env\" as l)\n(param n:int(1..=7) 3)\n(type T {a:list[str]=[] b:m.Port})\n(output o n)\n(assert (> n 0) (str \"m\"))",
    );
    check("let a = 1; let b = 2", "(let a 1)\n(let b 2)");
}

#[test]
fn a_new_line_ends_a_call_chain() {
    // `(` or `[` on the next line starts nothing new on its own: it is not a call.
    check(
        "fn f(x) {\n  let a = g\n  (1)\n}",
        "(fn f (x) (block (let a g) 1))",
    );
}

#[test]
fn one_mistake_is_one_error() {
    // A forgotten comma between named arguments: the call keeps both.
    check(
        "let f = file(path = \"/x\", content = \"y\" target = h)",
        "(let f (call file path=(str \"/x\") content=(str \"y\") target=h))\n! parse::missing-comma",
    );
    // The brackets an error leaves open when recovery reaches the next item are that
    // error's: no second error at the next line.
    check(
        "fn f(x: int -> int => x\nlet y = f(1)",
        "ERR\n(let y (call f 1))\n! parse::unexpected-token",
    );
    // Without an earlier error in the item, the unclosed bracket is the error.
    check(
        "let a = [1, 2\nlet b = a",
        "(let a [1 2])\n(let b a)\n! parse::unexpected-token",
    );
}

#[test]
fn recovery_reports_every_error_and_keeps_the_rest() {
    check(
        "let a = [1, 2\nlet b = { x = 1 y = 2 }\nlet c = (1 + )\nlet d = 4",
        "(let a [1 2])\n(let b {x=1})\n(let c (+ 1 ERR))\n(let d 4)\n! parse::unexpected-token\n! parse::unexpected-token\n! parse::unexpected-token",
    );
    check(
        "let = 1\nlet ok = 2",
        "ERR\n(let ok 2)\n! parse::unexpected-token",
    );
    check("x = 1\nlet ok = 2", "(let ok 2)\n! parse::expected-item");
    check(
        "let s = \"abc\nlet t = 1",
        "(let s (str \"abc\"))\n(let t 1)\n! lex::unterminated-string",
    );
}

#[test]
fn nesting_is_bounded() {
    let deep = format!("let x = {}{}", "[".repeat(100_000), "]".repeat(100_000));
    let p = parse(&deep, 0);
    assert_eq!(
        p.errors
            .iter()
            .filter(|e| e.code == "parse::too-deep")
            .count(),
        1
    );
    let deep_parens = format!("let x = {}1", "(".repeat(100_000));
    assert!(!parse(&deep_parens, 0).errors.is_empty());
    let deep_not = format!("let x = {}true", "not ".repeat(100_000));
    assert!(!parse(&deep_not, 0).errors.is_empty());
    // Chains built in loops are as deep as nesting (found in review: each overflowed the
    // stack of a later tree walk at 100,000 links).
    for chain in [
        format!("let x = 1{}", " + 1".repeat(100_000)),
        format!("let x = r{}", ".a".repeat(100_000)),
        format!("let x = f{}", "()".repeat(100_000)),
        format!("let x = {}{{ 2 }}", "if c { 1 } else ".repeat(100_000)),
        format!("let x = [for x in xs {}=> 1]", "if true ".repeat(100_000)),
        format!("let x = 0{}", "..1".repeat(100_000)),
    ] {
        let p = parse(&chain, 0);
        assert!(
            p.errors.iter().any(|e| e.code == "parse::too-deep"),
            "{}",
            &chain[..40]
        );
        assert!(
            p.errors.len() <= 3,
            "one problem, reported once: {:?}",
            p.errors.iter().map(|e| e.code).collect::<Vec<_>>()
        );
    }
}

/// `adopt "NODE" [from EXPR]`: `from` stays a name.
#[test]
fn adopt_lines() {
    check(
        "adopt \"web-0/file:/etc/motd\"\nadopt \"vm:legacy\" from { port = 2222 }\nlet from = 1",
        "(adopt \"web-0/file:/etc/motd\")\n(adopt \"vm:legacy\" from {port=2222})\n(let from 1)",
    );
    check("adopt web", "ERR\n! parse::unexpected-token");
}

/// `policy` is an item; `default tags` is one too, though both words stay names.
#[test]
fn rollouts() {
    check(
        "rollout \"web\": webs, batch = 2, max_failures = 0",
        "(rollout \"web\" webs (batch 2) (max_failures 0))",
    );
    check(
        "rollout \"web\": [a, b], batch = \"25%\"\nlet x = 1",
        "(rollout \"web\" [a b] (batch (str \"25%\")))\n(let x 1)",
    );
    check(
        "rollout \"web\": webs, bacth = 2",
        "(rollout \"web\" webs (bacth 2))\n! parse::rollout-option",
    );
    check(
        "rollout \"web\": webs, batch = 1, batch = 2",
        "(rollout \"web\" webs (batch 1) (batch 2))\n! parse::rollout-option",
    );
    check(
        "rollout web: webs\nlet x = 1",
        "ERR\n(let x 1)\n! parse::unexpected-token",
    );
}

#[test]
fn policies_and_default_tags() {
    check(
        "policy \"vm-owner\": for n in nodes(\"vm\") => n.memory <= 4GiB",
        "(policy \"vm-owner\" mandatory for n in (call nodes (str \"vm\")) (<= (. n memory) 4294967296B))",
    );
    check(
        "policy \"small\" advisory: for n in nodes(\"vm\") if n.cpus > 1 => n.memory <= 2GiB, \"${n.name} is big\"",
        "(policy \"small\" advisory for n in (call nodes (str \"vm\")) if (> (. n cpus) 1) (<= (. n memory) 2147483648B) (str ${(. n name)} \" is big\"))",
    );
    check(
        "policy \"p\" advisroy: for n in nodes() => true",
        "(policy \"p\" mandatory for n in (call nodes ) true)\n! parse::policy-level",
    );
    check("policy \"p\": n.x", "ERR\n! parse::unexpected-token");
    check(
        "default tags = { owner = \"platform\" }\nlet default = 1\nlet tags = default",
        "(default-tags {owner=(str \"platform\")})\n(let default 1)\n(let tags default)",
    );
}

/// `moved "OLD" -> "NEW"`: two plain strings, an arrow between; the keys are the compiler's
/// to check against the graph.
#[test]
fn moved_items() {
    check(
        "moved \"vm:web-0\" -> \"vm:web-a\"",
        "(moved \"vm:web-0\" \"vm:web-a\")",
    );
    check(
        "moved \"web-0/file:/etc/motd\" -> \"web-a/file:/etc/motd\"\nlet x = 1",
        "(moved \"web-0/file:/etc/motd\" \"web-a/file:/etc/motd\")\n(let x 1)",
    );
    check(
        "moved \"vm:${n}\" -> \"vm:b\"",
        "ERR\n! parse::interpolated-path",
    );
    check(
        "moved \"vm:a\" \"vm:b\"\nlet x = 1",
        "ERR\n(let x 1)\n! parse::unexpected-token",
    );
    check("moved vm -> \"vm:b\"", "ERR\n! parse::unexpected-token");
}

#[test]
fn tests() {
    check(
        "test \"t\" {\n  env = \"./prod.env\"\n  set = { n = 1 }\n  expect len(xs) == 3\n  expect ok, \"why\"\n}",
        "(test \"t\" (env (str \"./prod.env\")) (set {n=1}) (expect (== (call len xs) 3)) (expect ok (str \"why\")))",
    );
    // `test` and `expect` are names elsewhere: a binding, a node's `expect` field.
    check(
        "let test = 1\nlet e = f(expect = [1])",
        "(let test 1)\n(let e (call f expect=[1]))",
    );
    check(
        "test \"t\" { expect a; expect b }\nlet x = 1",
        "(test \"t\" (expect a) (expect b))\n(let x 1)",
    );
    check(
        "test \"t\" {\n  evn = \"./a.env\"\n  expect true\n}",
        "(test \"t\" (evn (str \"./a.env\")) (expect true))\n! parse::test-field",
    );
    check(
        "test \"t\" {\n  env = \"a\"\n  env = \"b\"\n  expect true\n}",
        "(test \"t\" (env (str \"a\")) (env (str \"b\")) (expect true))\n! parse::test-field",
    );
    check(
        "test \"t\" {\n  1 + 2\n  expect true\n}\nlet x = 1",
        "(test \"t\")\n(let x 1)\n! parse::test-line",
    );
    check(
        "test \"t\" {\n  expect true\nlet x = 1",
        "ERR\n(let x 1)\n! parse::unexpected-token",
    );
    // Without a string after it, `test` is a name, not a test.
    check("test t { }\nlet x = 1", "(let x 1)\n! parse::expected-item");
}
