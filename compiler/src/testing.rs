//! Tests (`test "NAME" { … }` items, run by `envc test`): an environment evaluated with
//! the parameters a test gives and its mocked outputs known at once, and what the test's
//! `expect` lines say of the result. Pure, as the rest of the compiler: the caller reads
//! files (the loader), renders templates (the executor's engine, through [`TestWorld`])
//! and reads and writes snapshots; this module returns what to write.
//!
//! A test's lines are evaluated in the root module's scope of the environment it names,
//! with these names bound besides the environment's own: `outputs` (a record of its
//! outputs), `files` (each file node's rendered content, by state key), `violations` (the
//! nodes that broke a policy) and `errors` (the environment's diagnostics, when it does
//! not compile: an `assert` that must fire is tested so).

use std::collections::BTreeMap;
use std::rc::Rc;

use envc_lang::ast::{BinaryOp, Expr, ExprKind, ItemKind, StrPart, Test, UnaryOp};
use envc_lang::{closest, Diagnostic, FileId, Span};

use crate::check;
use crate::eval::{Evaluator, Violation};
use crate::pin::PinKey;
use crate::program;
use crate::source::{PolicyPack, SourceLoader, SourceMap};
use crate::types::NodeKind;
use crate::value::{Deferred, Env, Node, Value};
use crate::Limits;

/// How a deferred value no mock gives is written in rendered text: as `envc render
/// --preview` writes it.
pub const NOT_MOCKED: &str = "<known after build: ";

/// What a test needs done outside the compiler.
pub trait TestWorld {
    /// A template rendered with these variables, as a build renders it.
    fn render(
        &self,
        path: &str,
        text: &str,
        vars: &serde_json::Value,
    ) -> Result<String, RenderFailure>;
    /// The committed snapshot `name` beside the test file, if there is one.
    fn snapshot(&self, name: &str) -> Option<String>;
}

/// Why a template did not render (the engine's words).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RenderFailure(pub String);

impl std::fmt::Display for RenderFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for RenderFailure {}

/// One test to run: the test file's text, which of its tests, and the environment.
pub struct TestRequest<'a> {
    /// The test file as messages name it (shown as it is, not relative to the project).
    pub file_name: String,
    pub text: &'a str,
    /// The test's place among the file's `test` items.
    pub index: usize,
    /// The environment's root file, relative to the loader's directory.
    pub root: &'a str,
    pub loader: &'a dyn SourceLoader,
    pub pins: BTreeMap<PinKey, String>,
    /// The packs its `policies` names, read by the caller.
    pub packs: Vec<PolicyPack>,
    pub world: &'a dyn TestWorld,
    /// `envc test --update`: a snapshot that differs (or is missing) is rewritten.
    pub update: bool,
}

/// The two sides an `expect` compared, as the language writes values.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Compared {
    pub op: &'static str,
    pub left: String,
    pub right: String,
}

/// One reason a test failed. A comparison's sides are in `compared`, not in the
/// diagnostic's words: the caller shows them as they are (a file's content keeps its lines).
#[derive(Clone, Debug)]
pub struct Failure {
    pub diagnostic: Diagnostic,
    /// For a comparison that was false: both sides.
    pub compared: Option<Compared>,
}

/// What running one test found.
pub struct TestRun {
    pub name: String,
    /// Every source read (the test file among them), for rendering the diagnostics.
    pub sources: SourceMap,
    pub failures: Vec<Failure>,
    /// How many `expect` lines held.
    pub held: usize,
    /// Snapshots to write (`--update`): name and content.
    pub snapshots: Vec<(String, String)>,
}

impl TestRun {
    pub fn passed(&self) -> bool {
        self.failures.is_empty()
    }
}

/// The tests of a test file, by name and where each is, in order.
pub fn tests_of(module: &envc_lang::ast::Module) -> Vec<Rc<Test>> {
    module
        .items
        .iter()
        .filter_map(|it| match &it.kind {
            ItemKind::Test(t) => Some(t.clone()),
            _ => None,
        })
        .collect()
}

/// A field of a test that must be a plain string (`env = "./prod.env"`), or a list of them
/// (`policies`): `Err` with the diagnostic when it is something else.
pub fn plain_strings(e: &Expr, file: FileId, what: &str) -> Result<Vec<String>, Diagnostic> {
    let one = |e: &Expr| match &e.kind {
        ExprKind::Str(parts) => match parts.as_slice() {
            [] => Some(String::new()),
            [StrPart::Lit(s)] => Some(s.to_string()),
            _ => None,
        },
        _ => None,
    };
    let got = match &e.kind {
        ExprKind::List(items) => items.iter().map(one).collect::<Option<Vec<_>>>(),
        _ => one(e).map(|s| vec![s]),
    };
    got.ok_or_else(|| {
        Diagnostic::new("test::field", format!("a test's `{what}` is a plain string"))
            .label(file, e.span, "not a plain string")
            .message("What a test evaluates is known before anything is evaluated: its paths are written out, without interpolation.")
            .help(format!("write the path as a string: `{what} = \"./prod.env\"`"))
    })
}

/// Runs one test.
pub fn run(req: &TestRequest) -> TestRun {
    let mut program = program::load_with_packs(req.root, req.loader, &req.packs);
    crate::stack_load::resolve(&mut program, req.loader);
    let file = program
        .sources
        .add_verbatim(req.file_name.clone(), req.text.into());
    let parsed = envc_lang::parse(req.text, file);
    let mut run = TestRun {
        name: String::new(),
        sources: SourceMap::default(),
        failures: Vec::new(),
        held: 0,
        snapshots: Vec::new(),
    };
    let Some(test) = tests_of(&parsed.module).get(req.index).cloned() else {
        run.failures.push(plain(
            Diagnostic::new("test::internal", "no such test").label(
                file,
                Span::at(0),
                "in this file",
            ),
        ));
        run.sources = program.sources;
        return run;
    };
    run.name = test.name.to_string();
    let fail = |d: Diagnostic| plain(d);

    // `set`: each value as `--set` would give it, its source text.
    let mut params = BTreeMap::new();
    if let Some(set) = test.field("set") {
        match &set.value.kind {
            ExprKind::Record(fields) => {
                for f in fields {
                    params.insert(
                        f.name.name.to_string(),
                        req.text[f.value.span.range()].to_string(),
                    );
                }
            }
            _ => run.failures.push(fail(
                Diagnostic::new("test::field", "a test's `set` is a record of parameters")
                    .label(file, set.value.span, "not a record")
                    .help("write `set = { replicas = 1 }`"),
            )),
        }
    }
    let mocks = match test.field("mocks") {
        Some(m) => match mocks_of(&m.value, file) {
            Ok(m) => m,
            Err(d) => {
                run.failures.push(fail(d));
                BTreeMap::new()
            }
        },
        None => BTreeMap::new(),
    };
    if !run.failures.is_empty() {
        run.sources = program.sources;
        return run;
    }

    let mut diagnostics = std::mem::take(&mut program.errors);
    let (checked, type_errors) = check::check(&program);
    if program.modules.is_empty() {
        run.failures.extend(diagnostics.into_iter().map(fail));
        run.sources = program.sources;
        return run;
    }
    diagnostics.extend(type_errors);
    let set = crate::parse_params(&mut program, &checked, &params, &mut diagnostics);
    let checked_cleanly = diagnostics.is_empty();
    let limits = Limits::default();
    let mut ev = Evaluator::new(&program, &checked, req.loader, &set, &req.pins, limits)
        .with_mocks(mocks.clone());
    let mut outputs = Vec::new();
    let mut nodes: Vec<Rc<Node>> = Vec::new();
    if checked_cleanly {
        let evaluated = ev.evaluate();
        diagnostics.append(&mut ev.errors);
        if diagnostics.is_empty() {
            match crate::graph::lower(&evaluated) {
                Ok(g) => {
                    nodes = g.nodes().cloned().collect();
                    let _ = ev.policies(nodes.clone());
                    // A broken policy is what `violations` holds, not an error of the
                    // environment.
                    ev.errors.retain(|d| d.code != "policy::violation");
                    let _ = crate::rollout::evaluate(&mut ev);
                    let (_, wrong) = crate::adopt::collect(&program, &mut ev, g.nodes().cloned());
                    diagnostics.extend(wrong);
                    diagnostics.append(&mut ev.errors);
                    let (_, errors) = crate::moved::check(&program, g.nodes());
                    diagnostics.extend(errors);
                }
                Err(errs) => diagnostics.extend(errs),
            }
        }
        outputs = evaluated.outputs;
    }

    // Mocks for nodes the environment does not have are typos.
    if !nodes.is_empty() {
        let keys: Vec<String> = nodes
            .iter()
            .map(|n| crate::moved::key_of(n).to_string())
            .collect();
        for ((key, output), span) in mock_spans(&test, file) {
            if !keys.contains(&key) {
                let mut d = Diagnostic::new("test::no-node", format!("no node `{key}` to mock"))
                    .label(file, span, "not a node of the environment")
                    .message("A mock stands for an output of a node the environment makes, named by its state key as `envc plan` prints it.");
                d = match closest(&key, keys.iter().map(String::as_str)) {
                    Some(k) => d.help(format!("did you mean `{k}`?")),
                    None => d.help("run `envc plan` on the environment to see its nodes' keys"),
                };
                run.failures.push(fail(d));
            } else if !ev.mocks_read.contains(&(key.clone(), output.clone())) {
                let d = Diagnostic::new(
                    "test::mock-unread",
                    format!("the mock of `{key}`.{output} is never read"),
                )
                .label(file, span, "no part of the environment reads this")
                .help("remove it, or check the output's name (`envc show` lists a node's outputs)");
                run.failures.push(fail(d));
            }
        }
    }

    let reads_errors = test.expects().any(|a| mentions(&a.cond, "errors"));
    if !diagnostics.is_empty() && !reads_errors {
        let d = Diagnostic::new("test::not-compiled", "the environment does not compile")
            .label(file, test.name_span, "this test's environment")
            .message("Each problem follows. A test that expects the environment to fail says so with `expect` lines over `errors`.")
            .help("fix the problems below, or test them: `expect errors[0].code == \"eval::assertion\"`");
        run.failures.push(fail(d));
        run.failures.extend(diagnostics.iter().cloned().map(fail));
    }

    if test.expects().next().is_none() {
        run.failures.push(fail(
            Diagnostic::new(
                "test::no-expect",
                format!("test \"{}\" expects nothing", test.name),
            )
            .label(file, test.name_span, "no `expect` line")
            .help("add what must hold: `expect len(nodes(\"vm\")) == 3`"),
        ));
    }

    if diagnostics.is_empty() || reads_errors {
        let files = rendered_files(&nodes, req, &mut run, file, test.name_span);
        // The test's names come first: `nodes` is the graph's, even where the environment
        // binds a `nodes` of its own.
        let env = Env::default()
            .bind(
                "nodes".into(),
                Value::Builtin(crate::builtins::Builtin::Nodes),
            )
            .bind("outputs".into(), record(outputs.into_iter()))
            .bind(
                "files".into(),
                record(
                    files
                        .into_iter()
                        .map(|(k, v)| (k.into(), Value::Str(v.into()))),
                ),
            )
            .bind("violations".into(), violations(&ev.violations))
            .bind("errors".into(), errors(&diagnostics));
        for a in test.expects() {
            expect(&mut ev, req, file, a, &env, &mut run);
        }
    }
    drop(ev);
    run.sources = program.sources;
    run
}

fn plain(d: Diagnostic) -> Failure {
    Failure {
        diagnostic: d,
        compared: None,
    }
}

/// One `expect` line: held, or a failure with what it compared.
fn expect(
    ev: &mut Evaluator,
    req: &TestRequest,
    file: FileId,
    a: &envc_lang::ast::Assertion,
    env: &Env,
    run: &mut TestRun,
) {
    let text = |e: &Expr| req.text[e.span.range()].to_string();
    let unevaluated = |run: &mut TestRun, r: Option<Diagnostic>| {
        let d = r.unwrap_or_else(|| {
            Diagnostic::new("test::unevaluated", "this line reads a value that failed")
                .label(file, a.cond.span, "not evaluated")
                .help("the failure is reported above")
        });
        run.failures.push(plain(d));
    };
    // `expect X == snapshot("NAME")`.
    if let ExprKind::Binary(BinaryOp::Eq, left, right) = &a.cond.kind {
        if let Some((name, name_span)) = snapshot_call(right) {
            let got = match ev.eval_written_in(file, left, env) {
                Ok(Value::Str(s)) => s.to_string(),
                Ok(other) => {
                    run.failures.push(plain(
                        Diagnostic::new("test::snapshot", "a snapshot is of text")
                            .label(file, left.span, format!("this is {}", other.type_name()))
                            .help("compare a string with a snapshot: a file's content (`files[\"…\"]`), or `to_json(…)`"),
                    ));
                    return;
                }
                Err(d) => return unevaluated(run, d),
            };
            if !valid_snapshot_name(&name) {
                run.failures.push(plain(
                    Diagnostic::new("test::snapshot", format!("`{name}` is not a snapshot's name"))
                        .label(file, name_span, "a file name, without `/`")
                        .help("name it as a file: `snapshot(\"envc.conf\")`; it is kept in `snapshots/` beside the test"),
                ));
                return;
            }
            match req.world.snapshot(&name) {
                Some(want) if want == got => run.held += 1,
                _ if req.update => {
                    run.snapshots.push((name, got));
                    run.held += 1;
                }
                Some(want) => run.failures.push(Failure {
                    diagnostic: Diagnostic::new(
                        "test::snapshot-differs",
                        format!("`{}` differs from snapshot `{name}`", text(left)),
                    )
                    .label(file, a.cond.span, "not as the snapshot")
                    .help(
                        "if the change is meant, run `envc test --update` and commit the snapshot",
                    ),
                    compared: Some(Compared {
                        op: "==",
                        left: got,
                        right: want,
                    }),
                }),
                None => run.failures.push(plain(
                    Diagnostic::new(
                        "test::snapshot-missing",
                        format!("no snapshot `{name}` yet"),
                    )
                    .label(file, name_span, "not in `snapshots/` beside the test")
                    .help("run `envc test --update` to write it, review it, and commit it"),
                )),
            }
            return;
        }
    }
    match ev.eval_written_in(file, &a.cond, env) {
        Ok(Value::Bool(true)) => run.held += 1,
        Ok(Value::Bool(false)) => {
            let compared = match &a.cond.kind {
                ExprKind::Binary(op, l, r) if op.precedence() == 4 => {
                    let l = ev.eval_written_in(file, l, env).ok();
                    let r = ev.eval_written_in(file, r, env).ok();
                    l.zip(r).map(|(l, r)| Compared {
                        op: op.symbol(),
                        left: shown(&l),
                        right: shown(&r),
                    })
                }
                _ => None,
            };
            let message = match &a.message {
                Some(m) => match ev.eval_written_in(file, m, env) {
                    Ok(Value::Str(s)) => Some(s.to_string()),
                    Ok(other) => Some(shown(&other)),
                    Err(_) => None,
                },
                None => None,
            };
            let mut d = Diagnostic::new(
                "test::expect-failed",
                format!("expected `{}`", text(&a.cond)),
            )
            .label(
                file,
                a.cond.span,
                message.unwrap_or_else(|| "false".to_string()),
            );
            if let Some(c) = &compared {
                if c.left.contains(NOT_MOCKED) || c.right.contains(NOT_MOCKED) {
                    d = d
                        .help("a value known only after a build is not mocked: give it in `mocks`");
                }
            }
            run.failures.push(Failure {
                diagnostic: d,
                compared,
            });
        }
        Ok(other) => run.failures.push(plain(
            Diagnostic::new("test::not-a-bool", "an `expect` line is a condition")
                .label(file, a.cond.span, format!("this is {}", other.type_name()))
                .help("compare it: `expect X == …`"),
        )),
        Err(d) => unevaluated(run, d),
    }
}

/// `snapshot("NAME")`: the name and where it is written.
fn snapshot_call(e: &Expr) -> Option<(String, Span)> {
    let ExprKind::Call { callee, args } = &e.kind else {
        return None;
    };
    if !matches!(&callee.kind, ExprKind::Name(n) if &**n == "snapshot") {
        return None;
    }
    match args.as_slice() {
        [arg] if arg.name.is_none() => match &arg.value.kind {
            ExprKind::Str(parts) => match parts.as_slice() {
                [StrPart::Lit(s)] => Some((s.to_string(), arg.value.span)),
                _ => Some((String::new(), arg.value.span)),
            },
            _ => Some((String::new(), arg.value.span)),
        },
        _ => Some((String::new(), e.span)),
    }
}

/// A snapshot is a file in `snapshots/`: one plain file name.
pub fn valid_snapshot_name(name: &str) -> bool {
    !name.is_empty()
        && name != "."
        && name != ".."
        && !name.contains(['/', '\\', '\0'])
        && !name.starts_with('.')
}

/// The lines of `got` not as in `want`: `-` what was expected, `+` what came.
pub fn line_diff(want: &str, got: &str) -> String {
    let w: Vec<&str> = want.lines().collect();
    let g: Vec<&str> = got.lines().collect();
    let mut out = Vec::new();
    for i in 0..w.len().max(g.len()) {
        match (w.get(i), g.get(i)) {
            (Some(a), Some(b)) if a == b => {}
            (a, b) => {
                if let Some(a) = a {
                    out.push(format!("line {}: - {a}", i + 1));
                }
                if let Some(b) = b {
                    out.push(format!("line {}: + {b}", i + 1));
                }
            }
        }
    }
    if out.is_empty() && want != got {
        out.push("they differ in the line ends".into());
    }
    out.join("\n")
}

/// Whether the name `name` is read anywhere in `e`.
fn mentions(e: &Expr, name: &str) -> bool {
    use ExprKind::*;
    match &e.kind {
        Name(n) => &**n == name,
        Str(parts) => parts.iter().any(|p| match p {
            StrPart::Interp(x) => mentions(x, name),
            StrPart::Lit(_) => false,
        }),
        List(xs) => xs.iter().any(|x| mentions(x, name)),
        Record(fs) => fs.iter().any(|f| mentions(&f.value, name)),
        ListComp { clauses, body } => {
            clauses.iter().any(|c| clause_mentions(c, name)) || mentions(body, name)
        }
        RecordComp {
            clauses,
            key,
            value,
        } => {
            clauses.iter().any(|c| clause_mentions(c, name))
                || mentions(key, name)
                || mentions(value, name)
        }
        Field(x, _) | Unary(_, x) | Paren(x) => mentions(x, name),
        Index(a, b) | Binary(_, a, b) => mentions(a, name) || mentions(b, name),
        Range { lo, hi, .. } => mentions(lo, name) || mentions(hi, name),
        Call { callee, args } => {
            mentions(callee, name) || args.iter().any(|a| mentions(&a.value, name))
        }
        If { cond, then, else_ } => {
            mentions(cond, name) || mentions(then, name) || mentions(else_, name)
        }
        Block { value, .. } => mentions(value, name),
        Lambda(f) => mentions(&f.body, name),
        Int(_) | Size(_) | Mode(_) | Bool(_) | Error => false,
    }
}

fn clause_mentions(c: &envc_lang::ast::Clause, name: &str) -> bool {
    match c {
        envc_lang::ast::Clause::For { iter, .. } => mentions(iter, name),
        envc_lang::ast::Clause::If(x) => mentions(x, name),
    }
}

/// `mocks = { "vm:db-0" = { address = "10.0.0.5" } }`: output values by (node key,
/// output), each a literal.
fn mocks_of(e: &Expr, file: FileId) -> Result<BTreeMap<(String, String), Value>, Diagnostic> {
    let shape = |span: Span| {
        Diagnostic::new("test::mocks", "`mocks` is a record of nodes' outputs")
            .label(file, span, "expected `\"KEY\" = { OUTPUT = VALUE, … }`")
            .message("Each node is named by its state key, as `envc plan` prints it; each of its outputs by name.")
            .help("write `mocks = { \"vm:db-0\" = { address = \"10.0.0.5\" } }`")
    };
    let ExprKind::Record(nodes) = &e.kind else {
        return Err(shape(e.span));
    };
    let mut out = BTreeMap::new();
    for n in nodes {
        let ExprKind::Record(outputs) = &n.value.kind else {
            return Err(shape(n.value.span));
        };
        for o in outputs {
            let v = literal(&o.value).ok_or_else(|| {
                Diagnostic::new("test::mocks", "a mock is a plain value")
                    .label(file, o.value.span, "not a literal")
                    .message("A mock stands for what a build would find out: a string, a number, a list or a record of them, written out.")
                    .help("write the value itself: `address = \"10.0.0.5\"`")
            })?;
            out.insert((n.name.name.to_string(), o.name.name.to_string()), v);
        }
    }
    Ok(out)
}

/// Where each mock is written.
fn mock_spans(test: &Test, _file: FileId) -> Vec<((String, String), Span)> {
    let Some(m) = test.field("mocks") else {
        return Vec::new();
    };
    let ExprKind::Record(nodes) = &m.value.kind else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for n in nodes {
        if let ExprKind::Record(outputs) = &n.value.kind {
            for o in outputs {
                out.push((
                    (n.name.name.to_string(), o.name.name.to_string()),
                    n.name.span.to(o.name.span),
                ));
            }
        }
    }
    out
}

/// A literal's value: strings without interpolation, numbers, sizes, modes, booleans, and
/// lists and records of them.
fn literal(e: &Expr) -> Option<Value> {
    Some(match &e.kind {
        ExprKind::Int(n) => Value::Int(*n),
        ExprKind::Size(n) => Value::Size(*n),
        ExprKind::Mode(n) => Value::Mode(*n),
        ExprKind::Bool(b) => Value::Bool(*b),
        ExprKind::Str(parts) => match parts.as_slice() {
            [] => Value::Str("".into()),
            [StrPart::Lit(s)] => Value::Str(s.clone()),
            _ => return None,
        },
        ExprKind::Unary(UnaryOp::Neg, x) => match &x.kind {
            ExprKind::Int(n) => Value::Int(-n),
            _ => return None,
        },
        ExprKind::Paren(x) => literal(x)?,
        ExprKind::List(xs) => {
            Value::List(xs.iter().map(literal).collect::<Option<Vec<_>>>()?.into())
        }
        ExprKind::Record(fs) => Value::Record(Rc::new(
            fs.iter()
                .map(|f| Some((f.name.name.clone(), literal(&f.value)?)))
                .collect::<Option<BTreeMap<_, _>>>()?,
        )),
        _ => return None,
    })
}

fn record(fields: impl Iterator<Item = (Rc<str>, Value)>) -> Value {
    Value::Record(Rc::new(fields.collect()))
}

fn violations(vs: &[Violation]) -> Value {
    Value::List(
        vs.iter()
            .map(|v| {
                record(
                    [
                        ("policy".into(), Value::Str(v.policy.clone())),
                        ("level".into(), Value::Str(v.level.name().into())),
                        ("node".into(), Value::Str(v.node.as_str().into())),
                        (
                            "message".into(),
                            Value::Str(v.message.clone().unwrap_or_else(|| "".into())),
                        ),
                    ]
                    .into_iter(),
                )
            })
            .collect::<Vec<_>>()
            .into(),
    )
}

fn errors(ds: &[Diagnostic]) -> Value {
    Value::List(
        ds.iter()
            .map(|d| {
                record(
                    [
                        ("code".into(), Value::Str(d.code.into())),
                        ("title".into(), Value::Str(d.title.as_str().into())),
                        ("message".into(), Value::Str(d.message.as_str().into())),
                    ]
                    .into_iter(),
                )
            })
            .collect::<Vec<_>>()
            .into(),
    )
}

/// Each file node's content by state key: its `content`, or its template rendered with its
/// `vars` (through the world), or its `source`; a deferred value no mock gives as
/// `<known after build: KEY.OUTPUT>`, a secret as `<secret NAME>`.
fn rendered_files(
    nodes: &[Rc<Node>],
    req: &TestRequest,
    run: &mut TestRun,
    file: FileId,
    at: Span,
) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for n in nodes.iter().filter(|n| n.kind == NodeKind::File) {
        let key = crate::moved::key_of(n).to_string();
        let content = if let Some(c) = n.attrs.get("content") {
            Some(text_of(c))
        } else if let Some(Value::Path(t)) = n.attrs.get("template") {
            let text = req
                .loader
                .read(&t.path)
                .ok()
                .and_then(|b| String::from_utf8(b).ok());
            let vars = n
                .attrs
                .get("vars")
                .map_or(serde_json::json!({}), template_json);
            match text.map(|text| req.world.render(&t.path, &text, &vars)) {
                Some(Ok(s)) => Some(s),
                Some(Err(e)) => {
                    run.failures.push(plain(
                        Diagnostic::new("test::render", format!("`{key}` does not render"))
                            .label(n.file, n.span, "this file's template")
                            .label(file, at, "in this test")
                            .message(e.0),
                    ));
                    None
                }
                None => None,
            }
        } else if let Some(Value::Path(s)) = n.attrs.get("source") {
            req.loader
                .read(&s.path)
                .ok()
                .map(|b| String::from_utf8_lossy(&b).into_owned())
        } else {
            None
        };
        if let Some(c) = content {
            out.push((key, c));
        }
    }
    out
}

/// A string value's text, deferred parts written as placeholders.
fn text_of(v: &Value) -> String {
    match v {
        Value::Str(s) => s.to_string(),
        Value::Deferred(d) => match &**d {
            Deferred::Output { node, output } => {
                format!("{NOT_MOCKED}{}.{output}>", crate::moved::key_of(node))
            }
            Deferred::Concat(parts) => parts.iter().map(text_of).collect(),
            Deferred::Secret(name) => format!("<secret {name}>"),
            Deferred::Json(inner) => match inner {
                Value::Int(_) | Value::Bool(_) => text_of(inner),
                _ => serde_json::Value::String(text_of(inner)).to_string(),
            },
        },
        other => crate::value::display(other),
    }
}

/// Template variables as the executor gives them (`substitute::template_json`).
fn template_json(v: &Value) -> serde_json::Value {
    use serde_json::json;
    match v {
        Value::Int(n) => json!(n),
        Value::Str(s) => json!(&**s),
        Value::Bool(b) => json!(b),
        Value::Size(n) => json!(n),
        Value::Mode(m) => json!(format!("{m:04o}")),
        Value::Path(p) => json!(&*p.path),
        Value::List(xs) => serde_json::Value::Array(xs.iter().map(template_json).collect()),
        Value::Record(r) => serde_json::Value::Object(
            r.iter()
                .map(|(k, x)| (k.to_string(), template_json(x)))
                .collect(),
        ),
        Value::Node(n) => json!({ "kind": n.kind.name(), "name": &*n.name }),
        Value::Deferred(_) => json!(text_of(v)),
        _ => serde_json::Value::Null,
    }
}

/// A value as the language writes it: what a failed comparison shows.
pub fn shown(v: &Value) -> String {
    match v {
        Value::Str(s) => quoted(s),
        Value::List(xs) => format!("[{}]", xs.iter().map(shown).collect::<Vec<_>>().join(", ")),
        Value::Record(r) if r.is_empty() => "{}".into(),
        Value::Record(r) => format!(
            "{{ {} }}",
            r.iter()
                .map(|(k, x)| format!("{} = {}", field_name(k), shown(x)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Value::Node(n) => format!("<{}>", crate::moved::key_of(n)),
        Value::Path(p) => format!("path({})", quoted(&p.path)),
        Value::Deferred(_) => text_of(v),
        other => crate::value::display(other),
    }
}

fn quoted(s: &str) -> String {
    // A multi-line text reads as itself (a file's content); a line as a string literal.
    if s.contains('\n') {
        return s.to_string();
    }
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '$' => out.push_str("\\$"),
            '\t' => out.push_str("\\t"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn field_name(k: &str) -> String {
    let plain = k
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if plain {
        k.to_string()
    } else {
        quoted(k)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshot_names() {
        for (name, ok) in [
            ("envc.conf", true),
            ("db-0.conf", true),
            ("", false),
            ("..", false),
            (".hidden", false),
            ("a/b", false),
            ("a\\b", false),
        ] {
            assert_eq!(valid_snapshot_name(name), ok, "{name:?}");
        }
    }

    #[test]
    fn values_are_shown_as_written() {
        let rec = Value::Record(Rc::new(
            [
                (Rc::from("a"), Value::Int(1)),
                (Rc::from("vm:db-0"), Value::Str("x\"y".into())),
            ]
            .into_iter()
            .collect(),
        ));
        for (v, want) in [
            (Value::Str("10.0.0.5".into()), "\"10.0.0.5\""),
            (Value::Int(3), "3"),
            (Value::Bool(false), "false"),
            (
                Value::List(vec![Value::Int(1), Value::Str("a".into())].into()),
                "[1, \"a\"]",
            ),
            (rec, "{ a = 1, \"vm:db-0\" = \"x\\\"y\" }"),
        ] {
            assert_eq!(shown(&v), want);
        }
    }

    #[test]
    fn line_diffs() {
        for (want, got, diff) in [
            ("a\nb\n", "a\nc\n", "line 2: - b\nline 2: + c"),
            ("a\n", "a\nb\n", "line 2: + b"),
            ("a\nb", "a", "line 2: - b"),
            ("a\n", "a", "they differ in the line ends"),
        ] {
            assert_eq!(line_diff(want, got), diff, "{want:?} {got:?}");
        }
    }
}
