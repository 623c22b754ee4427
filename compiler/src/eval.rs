//! The evaluator: pure and deterministic. No clock, no environment, no network; the only
//! input besides the sources is the project files named with `path(…)`, read through the
//! `SourceLoader` and hashed by content.
//!
//! Top-level bindings are lazy thunks, so they may be written in any order; forcing one that
//! is already being forced is a dependency cycle, reported with the cycle spelled out.
//! Work is bounded (steps, call depth, string and list sizes), so any input ends in a value
//! or a diagnostic.

use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;

use envc_lang::ast::*;
use envc_lang::{did_you_mean, Diagnostic, FileId, Span};

use crate::args::bind_args;
use crate::builtins::{self, Builtin, Default, TargetSlot};
use crate::check::{body_span, deferred_diagnostic, mismatch_diagnostic, Checked, Global};
use crate::derivation::{derivation_id, encode, DerivationRef};
use crate::pin::PinKey;
use crate::program::Program;
use crate::size::format_size;
use crate::source::{join_relative, SourceLoader};
use crate::stand_in::StandIn;
use crate::stop::Stop;
use crate::types::*;
use crate::value::{
    display, expands_within, Check, Closure, Deferred, Env, Node, ProjectFile, Value,
};

pub struct Limits {
    pub max_steps: u64,
    pub max_call_depth: u32,
    pub max_string_bytes: usize,
    pub max_list_len: usize,
}

impl std::default::Default for Limits {
    fn default() -> Limits {
        Limits {
            max_steps: 500_000_000,
            max_call_depth: 512,
            max_string_bytes: 64 << 20,
            max_list_len: 10_000_000,
        }
    }
}

type R<T> = Result<T, Stop>;

enum Slot {
    InProgress,
    Done(Value),
    Failed,
}

pub struct Evaluated {
    /// Values of the root module's top-level `let`s, in source order.
    pub bindings: Vec<(Rc<str>, Value)>,
    pub outputs: Vec<(Rc<str>, Value)>,
    /// Project files read by `path(…)`.
    pub files: BTreeMap<Rc<str>, blake3::Hash>,
}

pub struct Evaluator<'p> {
    program: &'p Program,
    checked: &'p Checked,
    loader: &'p dyn SourceLoader,
    params: &'p BTreeMap<String, (FileId, Expr)>,
    pins: &'p BTreeMap<PinKey, String>,
    stand_ins: &'p BTreeMap<String, StandIn>,
    limits: Limits,
    slots: HashMap<(ModuleId, Rc<str>), Slot>,
    forcing: Vec<(ModuleId, Rc<str>)>,
    module: ModuleId,
    steps: u64,
    depth: u32,
    files: BTreeMap<Rc<str>, blake3::Hash>,
    /// Builtin signatures, built once: node constructors are called once per node.
    signatures: HashMap<Builtin, Rc<FnTy>>,
    /// Where record literals were written, so that a manifest's schema problems point at
    /// the field; kept only when the program names `manifest` (a map entry per record).
    record_sites: Option<crate::manifest::RecordSites>,
    /// The calls of functions being evaluated, outermost first: where a failed assertion
    /// was reached from, and the user's call a failure inside `std/` came through.
    frames: Vec<Frame>,
    /// Failed assertions reported so far, by where they are and how they were reached:
    /// the index of their diagnostic, and how many times they failed that way.
    failed_asserts: HashMap<AssertSite, (usize, usize)>,
    /// Each module's `default tags`, by module, once asked for.
    module_tags: HashMap<ModuleId, Slot>,
    /// The graph's nodes in its canonical order, once it is lowered: what a policy's
    /// `nodes(…)` reads.
    graph_nodes: Option<Vec<Rc<Node>>>,
    /// While a test's line is evaluated in the root module's scope (`envc test`): the test
    /// file it is written in, where its diagnostics point. Cleared inside any call.
    written_in: Option<FileId>,
    /// A test's mocks: the value output `(node key, output)` stands for, known at once
    /// instead of deferred to a build; and those read so far.
    mocks: BTreeMap<(String, String), Value>,
    pub mocks_read: std::collections::BTreeSet<(String, String)>,
    /// Every node that broke a policy, as `policies` found them, in order.
    pub violations: Vec<Violation>,
    pub errors: Vec<Diagnostic>,
}

/// A node (or value) that broke a policy: the policy, the node's key, its message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    pub policy: Rc<str>,
    pub level: PolicyLevel,
    /// The node's state key (`web-0/file:/etc/motd`), or the values a policy over plain
    /// values was false for.
    pub node: String,
    pub message: Option<Rc<str>>,
}

/// A call of a function: where it is written, and what it calls.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Frame {
    file: FileId,
    span: Span,
    callee: Rc<str>,
}

/// A failed assertion as it is reported once: its condition's place, its message and the
/// calls it was reached through.
type AssertSite = (FileId, Span, String, Vec<Frame>);

/// How many calls of a chain a failed assertion names, innermost first.
const CHAIN_SHOWN: usize = 6;

static NO_STAND_INS: BTreeMap<String, StandIn> = BTreeMap::new();

impl<'p> Evaluator<'p> {
    /// Evaluates with these hosts replaced by stand-ins (see `CompileOptions::stand_ins`).
    pub fn with_stand_ins(mut self, stand_ins: &'p BTreeMap<String, StandIn>) -> Self {
        self.stand_ins = stand_ins;
        self
    }

    pub fn new(
        program: &'p Program,
        checked: &'p Checked,
        loader: &'p dyn SourceLoader,
        params: &'p BTreeMap<String, (FileId, Expr)>,
        pins: &'p BTreeMap<PinKey, String>,
        limits: Limits,
    ) -> Evaluator<'p> {
        Evaluator {
            program,
            checked,
            loader,
            params,
            pins,
            stand_ins: &NO_STAND_INS,
            limits,
            slots: HashMap::new(),
            forcing: Vec::new(),
            module: program.root,
            steps: 0,
            depth: 0,
            files: BTreeMap::new(),
            signatures: HashMap::new(),
            frames: Vec::new(),
            failed_asserts: HashMap::new(),
            module_tags: HashMap::new(),
            graph_nodes: None,
            written_in: None,
            mocks: BTreeMap::new(),
            mocks_read: std::collections::BTreeSet::new(),
            violations: Vec::new(),
            record_sites: program
                .sources
                .files
                .iter()
                .any(|f| f.text.contains("manifest"))
                .then(HashMap::new),
            errors: Vec::new(),
        }
    }

    fn file(&self) -> FileId {
        self.written_in
            .unwrap_or(self.program.modules[self.module].file)
    }

    /// Evaluates with these outputs known (a test's mocks): reading output `o` of the node
    /// keyed `k` gives `mocks[(k, o)]` rather than a deferred value.
    pub fn with_mocks(mut self, mocks: BTreeMap<(String, String), Value>) -> Self {
        self.mocks = mocks;
        self
    }

    /// Evaluates `e`, written in `file` (a test's line), in the root module's scope, with
    /// `env`'s names bound besides the root's own.
    pub fn eval_written_in(
        &mut self,
        file: FileId,
        e: &Expr,
        env: &Env,
    ) -> Result<Value, Option<Diagnostic>> {
        self.module = self.program.root;
        self.written_in = Some(file);
        let r = self.eval(e, env);
        self.written_in = None;
        match r {
            Ok(v) => Ok(v),
            Err(Stop::Error(d)) => Err(Some(*d)),
            Err(Stop::Reported) => Err(None),
        }
    }

    fn fail<T>(&mut self, d: Diagnostic) -> R<T> {
        Err(Stop::Error(Box::new(d)))
    }

    fn record(&mut self, r: R<()>) {
        if let Err(Stop::Error(d)) = r {
            self.errors.push(*d);
        }
    }

    /// Evaluates every item of every module; returns the root's bindings and outputs.
    pub fn run(mut self) -> (Evaluated, Vec<Diagnostic>) {
        let evaluated = self.evaluate();
        (evaluated, self.errors)
    }

    /// [`Evaluator::run`], keeping the evaluator (for [`Evaluator::policies`]); the
    /// diagnostics are in `errors`.
    pub fn evaluate(&mut self) -> Evaluated {
        let mut bindings = Vec::new();
        let mut outputs = Vec::new();
        let order: Vec<ModuleId> = (0..self.program.modules.len())
            .filter(|m| *m != self.program.root)
            .chain([self.program.root])
            .collect();
        for m in order {
            self.module = m;
            for item in &self.program.modules[m].ast.items {
                match &item.kind {
                    ItemKind::Let(Binding { name, .. }) | ItemKind::Param { name, .. } => {
                        let r = self.global(m, &name.name, name.span);
                        if let (Ok(v), ItemKind::Let(_)) = (&r, &item.kind) {
                            if m == self.program.root {
                                bindings.push((name.name.clone(), v.clone()));
                            }
                        }
                        self.record(r.map(|_| ()));
                    }
                    ItemKind::Fn(f) => {
                        let name = f.name.as_ref().expect("named");
                        let r = self.global(m, &name.name, name.span).map(|_| ());
                        self.record(r);
                    }
                    ItemKind::Output { name, value } if m == self.program.root => {
                        self.module = m;
                        match self.eval(value, &Env::default()) {
                            Ok(v) if !expands_within(&v, self.limits.max_string_bytes) => {
                                let d =
                                    self.too_large(value.span, &format!("output `{}`", name.name));
                                self.errors.push(d);
                            }
                            Ok(v) => outputs.push((name.name.clone(), v)),
                            Err(e) => self.record(Err(e)),
                        }
                    }
                    ItemKind::Assert(a) => {
                        self.module = m;
                        let r = self.assertion(a, &Env::default());
                        self.record(r);
                    }
                    ItemKind::DefaultTags(_) => {
                        // Reported here even when no node of the module asks for them.
                        let _ = self.default_tags(m);
                    }
                    _ => {}
                }
            }
        }
        let files = std::mem::take(&mut self.files);
        let failed = self.slots.values().any(|s| matches!(s, Slot::Failed));
        if failed && self.errors.is_empty() {
            // Every failure is reported where it happens; a silent one would let `check` say
            // "ok" over a graph with bindings missing.
            let file = self.program.modules[self.program.root].file;
            self.errors.push(
                Diagnostic::new("eval::internal", "evaluation failed without a diagnostic")
                    .label(file, Span::at(0), "in this environment")
                    .message("Some binding could not be evaluated, and no error explains why: this is a bug in envc; please report it with this file."),
            );
        }
        Evaluated {
            bindings,
            outputs,
            files,
        }
    }

    /// The program being evaluated.
    pub fn program(&self) -> &'p Program {
        self.program
    }

    /// A top-level expression of module `m` (a rollout's parts), evaluated to a known
    /// value; `None` when it fails, with the diagnostic in `errors`.
    pub fn top_level(&mut self, m: ModuleId, e: &Expr, what: &str) -> Option<Value> {
        self.module = m;
        let r = self
            .eval(e, &Env::default())
            .and_then(|v| self.known(v, e.span, what));
        match r {
            Ok(v) => Some(v),
            Err(stop) => {
                self.record(Err(stop));
                None
            }
        }
    }

    /// Evaluates an expression written at the top level of the root module (an `adopt`'s
    /// `from`).
    pub fn eval_top_level(&mut self, e: &Expr) -> Result<Value, Diagnostic> {
        self.module = self.program.root;
        match self.eval(e, &Env::default()) {
            Ok(v) => Ok(v),
            Err(Stop::Error(d)) => Err(*d),
            Err(Stop::Reported) => Err(Diagnostic::new(
                "eval::internal",
                "`from` uses a value that failed",
            )
            .label(self.file(), e.span, "not evaluated")
            .help("fix the error reported above")),
        }
    }

    /// Checks every `policy` of the program against the lowered graph: the broken
    /// mandatory ones as errors (in `errors`, with any failure to evaluate one), the broken
    /// advisory ones returned as warnings, with how many policies there are. `nodes`: the
    /// lowered graph's nodes (the evaluator stands below the graph it is lowered to).
    pub fn policies(&mut self, nodes: Vec<Rc<Node>>) -> (Vec<Diagnostic>, usize) {
        self.graph_nodes = Some(nodes);
        let mut warnings = Vec::new();
        let mut count = 0;
        for m in 0..self.program.modules.len() {
            for item in &self.program.modules[m].ast.items {
                let ItemKind::Policy(p) = &item.kind else {
                    continue;
                };
                count += 1;
                self.module = m;
                match self.policy(p) {
                    Ok(None) => {}
                    Ok(Some(d)) if p.level == PolicyLevel::Advisory => warnings.push(d),
                    Ok(Some(d)) => self.errors.push(d),
                    Err(e) => self.record(Err(e)),
                }
            }
        }
        (warnings, count)
    }

    /// The diagnostic of a broken policy: every node that breaks it, where it is declared.
    fn policy(&mut self, p: &Policy) -> R<Option<Diagnostic>> {
        let vars: Vec<Rc<str>> = p
            .clauses
            .iter()
            .flat_map(|c| match c {
                Clause::For { first, second, .. } => vec![first.name.clone()]
                    .into_iter()
                    .chain(second.iter().map(|s| s.name.clone()))
                    .collect(),
                Clause::If(_) => Vec::new(),
            })
            .collect();
        // (node, what its message says), in the graph's order, each once.
        let mut broken: Vec<(Rc<Node>, Option<Rc<str>>)> = Vec::new();
        // Where no node is bound (`for m in [512MiB, 8GiB]`): what the variables held.
        let mut unbound: Vec<(String, Option<Rc<str>>)> = Vec::new();
        self.comprehension(&p.clauses, &Env::default(), &mut |ev, env| {
            let holds = ev.eval(&p.cond, env)?;
            match ev.known(holds, p.cond.span, "a policy")? {
                Value::Bool(true) => return Ok(()),
                Value::Bool(false) => {}
                other => return ev.type_error("bool", &other, p.cond.span),
            }
            let message = match &p.message {
                Some(m) => match ev.eval(m, env)? {
                    Value::Str(s) => Some(s),
                    other => return ev.type_error("str", &other, m.span),
                },
                None => None,
            };
            let mut nodes = Vec::new();
            for v in vars.iter().filter_map(|name| env.get(name)) {
                if let Value::Node(n) = v {
                    nodes.push(n.clone());
                }
            }
            if nodes.is_empty() {
                let held: Vec<String> = vars
                    .iter()
                    .filter_map(|name| Some(format!("{name} = {}", display(env.get(name)?))))
                    .collect();
                unbound.push((held.join(", "), message));
                return Ok(());
            }
            for n in nodes {
                if !broken.iter().any(|(b, m)| b.id == n.id && *m == message) {
                    broken.push((n, message.clone()));
                }
            }
            Ok(())
        })?;
        for (n, message) in &broken {
            self.violations.push(Violation {
                policy: p.name.clone(),
                level: p.level,
                node: crate::moved::key_of(n).to_string(),
                message: message.clone(),
            });
        }
        for (held, message) in &unbound {
            self.violations.push(Violation {
                policy: p.name.clone(),
                level: p.level,
                node: held.clone(),
                message: message.clone(),
            });
        }
        if broken.is_empty() && unbound.is_empty() {
            return Ok(None);
        }
        let file = self.file();
        let count: std::collections::BTreeSet<_> = broken.iter().map(|(n, _)| n.id).collect();
        let who = match (count.len(), broken.first()) {
            (0, _) => "a value".to_string(),
            (1, Some((n, _))) => format!("{} `{}`", n.kind.name(), n.given_name()),
            (k, _) => format!("{k} nodes"),
        };
        let verb = if count.len() > 1 { "break" } else { "breaks" };
        let level = match p.level {
            PolicyLevel::Mandatory => {
                "A mandatory policy stops `check`, `plan` and `build` until every node keeps it."
            }
            PolicyLevel::Advisory => "An advisory policy warns; nothing stops.",
        };
        let cond = &self.program.sources.get(file).text[p.cond.span.range()];
        let mut d = Diagnostic::new(
            "policy::violation",
            format!("{who} {verb} policy \"{}\"", p.name),
        )
        .label(file, p.name_span, format!("{} policy", p.level.name()))
        .message(level)
        .help(format!("each node listed must make `{cond}` true"));
        for (n, message) in &broken {
            let (nfile, nspan) = n.called_from.unwrap_or((n.file, n.span));
            let what = format!("{} `{}`", n.kind.name(), n.given_name());
            let text = match message {
                Some(m) => format!("{what}: {m}"),
                None => format!("{what} breaks it"),
            };
            d = d.label(nfile, nspan, text);
        }
        for (held, message) in &unbound {
            let text = match message {
                Some(m) => format!("false for {held}: {m}"),
                None => format!("false for {held}"),
            };
            d = d.label(file, p.cond.span, text);
        }
        Ok(Some(d))
    }

    // ---- top-level values ---------------------------------------------------------------

    fn global(&mut self, m: ModuleId, name: &Rc<str>, use_span: Span) -> R<Value> {
        let key = (m, name.clone());
        match self.slots.get(&key) {
            Some(Slot::Done(v)) => return Ok(v.clone()),
            Some(Slot::Failed) => return Err(Stop::Reported),
            Some(Slot::InProgress) => return Err(self.cycle(m, name, use_span).into()),
            None => {}
        }
        let Some(global) = self.checked.globals[m].get(name).cloned() else {
            return Err(Stop::Reported); // the checker reported the unknown name
        };
        if self.forcing.len() >= crate::check::MAX_BINDING_DEPTH {
            let file = self.file();
            return self.fail(crate::check::binding_depth_diagnostic(file, use_span));
        }
        self.slots.insert(key.clone(), Slot::InProgress);
        self.forcing.push(key.clone());
        let saved = std::mem::replace(&mut self.module, m);
        let saved_in = self.written_in.take();
        // A top-level value is the same wherever it is first asked for: the calls that
        // happen to force it are not where its nodes were made.
        let saved_frames = std::mem::take(&mut self.frames);
        let items = &self.program.modules[m].ast.items;
        let r = match global {
            Global::Let(i) => {
                let ItemKind::Let(b) = &items[i].kind else {
                    unreachable!()
                };
                self.binding_value(b, &Env::default())
            }
            Global::Fn(i) => {
                let ItemKind::Fn(f) = &items[i].kind else {
                    unreachable!()
                };
                Ok(Value::Fn(Rc::new(Closure {
                    decl: f.clone(),
                    env: Env::default(),
                    module: m,
                })))
            }
            Global::Param(i) => {
                let ItemKind::Param { name, ty, default } = &items[i].kind else {
                    unreachable!()
                };
                self.param(name, ty, default.as_ref())
            }
            Global::Import(id) => Ok(Value::Module(id)),
            Global::Type(_) | Global::Output(_) | Global::Broken => Err(Stop::Reported),
        };
        self.module = saved;
        self.written_in = saved_in;
        self.frames = saved_frames;
        self.forcing.pop();
        match r {
            Ok(v) => {
                self.slots.insert(key, Slot::Done(v.clone()));
                Ok(v)
            }
            Err(e) => {
                self.slots.insert(key, Slot::Failed);
                if let Stop::Error(d) = e {
                    self.errors.push(*d);
                }
                Err(Stop::Reported)
            }
        }
    }

    fn cycle(&self, m: ModuleId, name: &Rc<str>, use_span: Span) -> Diagnostic {
        let start = self
            .forcing
            .iter()
            .position(|(fm, fname)| *fm == m && fname == name)
            .unwrap_or(0);
        let chain: Vec<&str> = self.forcing[start..]
            .iter()
            .map(|(_, n)| &**n)
            .chain(std::iter::once(&**name))
            .collect();
        let file = self.program.modules[self.module].file;
        let mut d = Diagnostic::new("eval::cycle", "dependency cycle")
            .label(file, use_span, format!("`{name}` is needed here, while it is being computed"))
            .message(format!("These bindings depend on each other in a circle: {}.", chain.join(" → ")))
            .help("a dependency goes one way: remove it from one side of the circle (e.g. from one `after` list)");
        for (fm, fname) in &self.forcing[start..] {
            if let Some(span) = self.def_span(*fm, fname) {
                d = d.label(
                    self.program.modules[*fm].file,
                    span,
                    format!("`{fname}` is defined here"),
                );
            }
        }
        d
    }

    fn def_span(&self, m: ModuleId, name: &str) -> Option<Span> {
        self.program.modules[m]
            .ast
            .items
            .iter()
            .find_map(|it| match &it.kind {
                ItemKind::Let(b) if &*b.name.name == name => Some(b.name.span),
                ItemKind::Param { name: n, .. } if &*n.name == name => Some(n.span),
                _ => None,
            })
    }

    fn param(&mut self, name: &Ident, ty: &TypeExpr, default: Option<&Expr>) -> R<Value> {
        let want = self.annotation(ty);
        if let Some((file, expr)) = self.params.get(&*name.name) {
            // A value that does not fit is shown with the declaration it must fit.
            let declared = |d: Box<Diagnostic>, here: FileId| {
                Stop::Error(Box::new(d.label(
                    here,
                    name.span,
                    format!("declared `{want}` here"),
                )))
            };
            let here = self.file();
            let v = literal(expr, *file).map_err(|e| match e {
                Stop::Error(d) => declared(d, here),
                e => e,
            })?;
            return self
                .coerce(v, &want, expr.span, *file)
                .map_err(|e| match e {
                    Stop::Error(d) => declared(d, here),
                    e => e,
                });
        }
        match default {
            Some(d) => {
                let v = self.eval(d, &Env::default())?;
                let file = self.file();
                self.coerce(v, &want, d.span, file)
            }
            None => {
                let file = self.file();
                self.fail(
                    Diagnostic::new(
                        "eval::missing-param",
                        format!("parameter `{}` is not set", name.name),
                    )
                    .label(file, name.span, "declared without a default")
                    .help(format!(
                        "pass `--set {}=…` on the command line, or give it a default",
                        name.name
                    )),
                )
            }
        }
    }

    fn annotation(&self, t: &TypeExpr) -> Ty {
        self.checked
            .types
            .get(&(self.file(), t.span.start, t.span.end))
            .cloned()
            .unwrap_or(Ty::Unknown)
    }

    fn binding_value(&mut self, b: &Binding, env: &Env) -> R<Value> {
        let v = self.eval(&b.value, env)?;
        match &b.ty {
            Some(t) => {
                let want = self.annotation(t);
                let file = self.file();
                self.coerce(v, &want, b.value.span, file)
            }
            None => Ok(v),
        }
    }

    fn assertion(&mut self, a: &Assertion, env: &Env) -> R<()> {
        let c = self.eval(&a.cond, env)?;
        let file = self.file();
        match self.known(c, a.cond.span, "an assertion")? {
            Value::Bool(true) => Ok(()),
            Value::Bool(false) => {
                let msg = match &a.message {
                    Some(m) => match self.eval(m, env)? {
                        Value::Str(s) => s.to_string(),
                        other => display(&other),
                    },
                    None => String::new(),
                };
                self.assertion_failed(file, a.cond.span, msg);
                Ok(())
            }
            other => self.type_error("bool", &other, a.cond.span),
        }
    }

    /// Reports a failed assertion with the calls that reached it, and goes on: every
    /// instance that fails is reported, not just the first (the same assertion reached the
    /// same way with the same message is one diagnostic, with a count).
    fn assertion_failed(&mut self, file: FileId, span: Span, msg: String) {
        let chain: Vec<Frame> = self
            .frames
            .iter()
            .rev()
            .take(CHAIN_SHOWN)
            .cloned()
            .collect();
        let site = (file, span, msg.clone(), chain.clone());
        if let Some((index, count)) = self.failed_asserts.get_mut(&site) {
            *count += 1;
            self.errors[*index].message = format!(
                "It failed {count} times, each time reached this way with values that make this message."
            );
            return;
        }
        let title = if msg.is_empty() {
            "assertion failed".to_string()
        } else {
            format!("assertion failed: {msg}")
        };
        let mut d = Diagnostic::new("eval::assertion", title).label(file, span, "this is false");
        for (i, f) in chain.iter().enumerate() {
            let how = if i == 0 { "in" } else { "from" };
            d = d.label(f.file, f.span, format!("{how} this call of `{}`", f.callee));
        }
        if self.frames.len() > CHAIN_SHOWN {
            d = d.message(format!(
                "It was reached through {} calls; the innermost {CHAIN_SHOWN} are shown.",
                self.frames.len()
            ));
        }
        d = d.help("fix the values the assertion checks, or the policy it states");
        self.failed_asserts.insert(site, (self.errors.len(), 1));
        self.errors.push(d);
    }

    /// Whether `file` is one of the standard library's.
    fn is_std_file(&self, file: FileId) -> bool {
        self.program
            .modules
            .iter()
            .any(|m| m.file == file && m.is_std)
    }

    // ---- expressions --------------------------------------------------------------------

    fn type_error<T>(&mut self, expected: &str, found: &Value, span: Span) -> R<T> {
        let file = self.file();
        self.fail(mismatch_diagnostic(
            Mismatch::Types {
                expected: expected.to_string(),
                found: found.type_name(),
            },
            file,
            span,
        ))
    }

    /// The value, unless it is deferred, in which case `what` cannot use it.
    fn known(&mut self, v: Value, span: Span, what: &str) -> R<Value> {
        if let Value::Deferred(d) = &v {
            let ty = match &**d {
                Deferred::Output { node, output } => builtins::schema(node.kind)
                    .field_ty(output)
                    .unwrap_or(Ty::deferred(Ty::Unknown)),
                Deferred::Secret(_) => Ty::deferred(Ty::Secret),
                Deferred::Concat(_) | Deferred::Json(_) if crate::value::contains_secret(&v) => {
                    Ty::deferred(Ty::Secret)
                }
                Deferred::Concat(_) | Deferred::Json(_) => Ty::deferred(Ty::Str),
            };
            let file = self.file();
            return self.fail(deferred_diagnostic(file, span, what, &ty));
        }
        Ok(v)
    }

    fn tick(&mut self, span: Span) -> R<()> {
        self.steps += 1;
        if self.steps > self.limits.max_steps {
            let file = self.file();
            return self.fail(
                Diagnostic::new("eval::too-long", "evaluation does not finish")
                    .label(file, span, format!("still evaluating after {} steps", self.limits.max_steps))
                    .help("look for a function that calls itself without a base case, or a loop over a huge range"),
            );
        }
        Ok(())
    }

    pub fn eval(&mut self, e: &Expr, env: &Env) -> R<Value> {
        self.tick(e.span)?;
        let file = self.file();
        Ok(match &e.kind {
            ExprKind::Int(n) => Value::Int(*n),
            ExprKind::Size(n) => Value::Size(*n),
            ExprKind::Mode(n) => Value::Mode(*n),
            ExprKind::Bool(b) => Value::Bool(*b),
            ExprKind::Error => return Err(Stop::Reported),
            ExprKind::Str(parts) => {
                let mut vals = Vec::with_capacity(parts.len());
                for p in parts {
                    vals.push(match p {
                        StrPart::Lit(s) => Value::Str(s.clone()),
                        StrPart::Interp(x) => {
                            let v = self.eval(x, env)?;
                            self.interpolable(v, x.span)?
                        }
                    });
                }
                self.concat(vals, e.span)?
            }
            ExprKind::Name(n) => self.name(n, e.span, env)?,
            ExprKind::Paren(x) => self.eval(x, env)?,
            ExprKind::List(items) => {
                let mut out = Vec::with_capacity(items.len());
                for x in items {
                    out.push(self.eval(x, env)?);
                }
                Value::List(out.into())
            }
            ExprKind::Record(fields) => {
                let mut out = BTreeMap::new();
                for f in fields {
                    out.insert(f.name.name.clone(), self.eval(&f.value, env)?);
                }
                let record = Rc::new(out);
                if self.record_sites.is_some() {
                    let site = crate::manifest::RecordSite {
                        file: self.file(),
                        span: e.span,
                        fields: fields
                            .iter()
                            .map(|f| (f.name.name.clone(), f.name.span, f.value.span))
                            .collect(),
                    };
                    if let Some(sites) = &mut self.record_sites {
                        sites.insert(crate::manifest::address(&record), site);
                    }
                }
                Value::Record(record)
            }
            ExprKind::ListComp { clauses, body } => {
                let mut out = Vec::new();
                self.comprehension(clauses, env, &mut |ev, env| {
                    let v = ev.eval(body, env)?;
                    out.push(v);
                    ev.check_len(out.len(), e.span)
                })?;
                Value::List(out.into())
            }
            ExprKind::RecordComp {
                clauses,
                key,
                value,
            } => {
                let mut out: BTreeMap<Rc<str>, Value> = BTreeMap::new();
                self.comprehension(clauses, env, &mut |ev, env| {
                    let k = ev.eval(key, env)?;
                    let k = match ev.known(k, key.span, "a record key")? {
                        Value::Str(s) => s,
                        other => return ev.type_error("str", &other, key.span),
                    };
                    let v = ev.eval(value, env)?;
                    if out.insert(k.clone(), v).is_some() {
                        let file = ev.file();
                        return ev.fail(
                            Diagnostic::new(
                                "eval::duplicate-key",
                                format!("key `{k}` is produced twice"),
                            )
                            .label(file, key.span, "two iterations give this key")
                            .help(
                                "make the keys unique, e.g. include the index: `\"${name}-${i}\"`",
                            ),
                        );
                    }
                    Ok(())
                })?;
                Value::Record(Rc::new(out))
            }
            ExprKind::Field(base, field) => match &base.kind {
                ExprKind::Field(owner, tags) if &*tags.name == "tags" => {
                    let n = self.eval(owner, env)?;
                    let t = self.field(n.clone(), tags)?;
                    if let (Value::Node(n), Value::Record(r)) = (&n, &t) {
                        if !r.contains_key(&field.name) {
                            return self.fail(self.missing_tag(n, r, owner, field));
                        }
                    }
                    self.field(t, field)?
                }
                _ => {
                    let b = self.eval(base, env)?;
                    self.field(b, field)?
                }
            },
            ExprKind::Index(base, index) => {
                let b = self.eval(base, env)?;
                let i = self.eval(index, env)?;
                let i = self.known(i, index.span, "an index")?;
                match (&b, &i) {
                    (Value::List(xs), Value::Int(n)) => {
                        let len = xs.len() as i64;
                        let at = if *n < 0 { len + n } else { *n };
                        match xs.get(usize::try_from(at).unwrap_or(usize::MAX)) {
                            Some(v) => v.clone(),
                            None => {
                                return self.fail(
                                    Diagnostic::new(
                                        "eval::index-out-of-range",
                                        format!("index {n} is out of range"),
                                    )
                                    .label(file, index.span, format!("the list has {len} elements"))
                                    .help("indices start at 0; -1 is the last element"),
                                )
                            }
                        }
                    }
                    (Value::Record(r), Value::Str(k)) => match r.get(k) {
                        Some(v) => v.clone(),
                        None => {
                            let mut d =
                                Diagnostic::new("eval::missing-key", format!("no key `{k}`"))
                                    .label(file, index.span, "not in the record");
                            if let Some(s) = did_you_mean(k, r.keys().map(|k| &**k)) {
                                d = d.help(s);
                            }
                            return self.fail(d);
                        }
                    },
                    (Value::List(_), other) => return self.type_error("int", other, index.span),
                    (Value::Record(_), other) => return self.type_error("str", other, index.span),
                    (other, _) => return self.type_error("a list or a record", other, base.span),
                }
            }
            ExprKind::Call { callee, args } => self.call(e, callee, args, env)?,
            ExprKind::Unary(op, x) => {
                let v = self.eval(x, env)?;
                let v = self.known(v, x.span, "an operator")?;
                match (op, v) {
                    (UnaryOp::Neg, Value::Int(n)) => match n.checked_neg() {
                        Some(n) => Value::Int(n),
                        None => return self.overflow(e.span),
                    },
                    (UnaryOp::Not, Value::Bool(b)) => Value::Bool(!b),
                    (UnaryOp::Neg, other) => return self.type_error("int", &other, x.span),
                    (UnaryOp::Not, other) => return self.type_error("bool", &other, x.span),
                }
            }
            ExprKind::Binary(op, l, r) => self.binary(*op, l, r, env, e.span)?,
            ExprKind::Range { lo, hi, inclusive } => {
                let a = self.eval(lo, env)?;
                let a = self.known(a, lo.span, "a range bound")?;
                let b = self.eval(hi, env)?;
                let b = self.known(b, hi.span, "a range bound")?;
                match (a, b) {
                    (Value::Int(a), Value::Int(b)) => {
                        let end = if *inclusive { b.saturating_add(1) } else { b };
                        let len = end.saturating_sub(a).max(0) as u64;
                        self.check_len(len.min(usize::MAX as u64) as usize, e.span)?;
                        Value::List((a..end).map(Value::Int).collect::<Vec<_>>().into())
                    }
                    (Value::Int(_), other) => return self.type_error("int", &other, hi.span),
                    (other, _) => return self.type_error("int", &other, lo.span),
                }
            }
            ExprKind::If { cond, then, else_ } => {
                let c = self.eval(cond, env)?;
                match self.known(c, cond.span, "an `if` condition")? {
                    Value::Bool(true) => self.eval(then, env)?,
                    Value::Bool(false) => self.eval(else_, env)?,
                    other => return self.type_error("bool", &other, cond.span),
                }
            }
            ExprKind::Block { stmts, value } => {
                let mut env = env.clone();
                for s in stmts {
                    match s {
                        Stmt::Let(b) => {
                            let v = self.binding_value(b, &env)?;
                            env = env.bind(b.name.name.clone(), v);
                        }
                        Stmt::Assert(a) => self.assertion(a, &env)?,
                    }
                }
                self.eval(value, &env)?
            }
            ExprKind::Lambda(f) => Value::Fn(Rc::new(Closure {
                decl: f.clone(),
                env: env.clone(),
                module: self.module,
            })),
        })
    }

    fn check_len(&mut self, len: usize, span: Span) -> R<()> {
        if len > self.limits.max_list_len {
            let file = self.file();
            return self.fail(
                Diagnostic::new("eval::too-large", "list too large")
                    .label(file, span, format!("more than {} elements", self.limits.max_list_len))
                    .help("an environment this large is almost certainly a mistake in a range or a loop"),
            );
        }
        Ok(())
    }

    /// A `vm` boots either an image envc builds (`image`) or its cloud's (`cloud`): one of
    /// them, never both, so that what it runs is never a guess.
    fn vm_image_or_cloud(
        &mut self,
        attrs: &BTreeMap<Rc<str>, Value>,
        name: &str,
        file: FileId,
        name_span: Span,
        spans: &BTreeMap<Rc<str>, Span>,
    ) -> R<()> {
        match (attrs.get("image"), attrs.get("cloud")) {
            (None, None) => self.fail(
                Diagnostic::new("eval::vm-without-image", format!("vm `{name}` has no image"))
                    .label(file, name_span, "this vm")
                    .message("A vm boots an image envc builds, or runs in a cloud that boots the cloud's image.")
                    .help("give it `image = debian.default_image` (std/debian), or make it with `aws.machine(…)` (std/aws)"),
            ),
            (Some(_), Some(_)) => {
                let at = |k: &str| spans.get(k).copied().unwrap_or(name_span);
                self.fail(
                    Diagnostic::new(
                        "eval::vm-image-and-cloud",
                        format!("vm `{name}` has both an image and a cloud"),
                    )
                    .label(file, at("image"), "an image envc builds")
                    .label(file, at("cloud"), "a cloud, which boots its own image")
                    .message("A cloud machine boots the cloud's image (the lockfile pins it per region); envc's images boot on this machine's QEMU.")
                    .help("drop `image`, or drop `cloud`"),
                )
            }
            _ => Ok(()),
        }
    }

    /// `what`, written out, would pass the size limit.
    fn too_large(&self, span: Span, what: &str) -> Diagnostic {
        Diagnostic::new("eval::too-large", format!("{what} is too large"))
            .label(self.file(), span, format!("more than {} bytes once written out", self.limits.max_string_bytes))
            .message("Strings and lists are shared while evaluating, so a value can be small in memory and huge once written out.")
            .help("a value this large is almost certainly a mistake in a loop or a recursion")
    }

    fn division_by_zero<T>(&mut self, span: Span) -> R<T> {
        let file = self.file();
        self.fail(
            Diagnostic::new("eval::division-by-zero", "division by zero").label(
                file,
                span,
                "this is 0",
            ),
        )
    }

    fn overflow<T>(&mut self, span: Span) -> R<T> {
        let file = self.file();
        self.fail(
            Diagnostic::new("eval::overflow", "arithmetic overflow")
                .label(file, span, "the result does not fit in 64 bits")
                .help("check the operands"),
        )
    }

    fn name(&mut self, n: &Rc<str>, span: Span, env: &Env) -> R<Value> {
        if let Some(v) = env.get(n) {
            return Ok(v.clone());
        }
        if self.checked.globals[self.module].contains_key(n) {
            return self.global(self.module, n, span);
        }
        match builtins::lookup(n) {
            Some(b) => Ok(Value::Builtin(b)),
            // The checker reports unknown names; reaching this means it and the evaluator
            // disagree about scopes. Say so rather than fail silently.
            None => {
                let file = self.file();
                self.fail(
                    Diagnostic::new("name::unknown", format!("unknown name `{n}`"))
                        .label(file, span, "not defined here")
                        .message("The type checker accepted this name but evaluation cannot find it: this is a bug in envc; please report it with this file."),
                )
            }
        }
    }

    fn interpolable(&mut self, v: Value, span: Span) -> R<Value> {
        Ok(match v {
            Value::Str(_) | Value::Deferred(_) => v,
            Value::Int(_) | Value::Bool(_) | Value::Size(_) | Value::Mode(_) => {
                Value::Str(display(&v).into())
            }
            other => {
                let file = self.file();
                return self.fail(
                    Diagnostic::new("type::not-interpolable", format!("cannot put a {} into a string", other.type_name()))
                        .label(file, span, format!("this is {}", other.type_name()))
                        .help("interpolate text, numbers, sizes, modes or booleans; join lists with join()"),
                );
            }
        })
    }

    /// Concatenates strings and deferred parts: known when every part is.
    fn concat(&mut self, parts: Vec<Value>, span: Span) -> R<Value> {
        let mut out: Vec<Value> = Vec::new();
        let mut text = String::new();
        for p in parts {
            match p {
                Value::Str(s) => text.push_str(&s),
                Value::Deferred(d) => {
                    if !text.is_empty() {
                        out.push(Value::Str(std::mem::take(&mut text).into()));
                    }
                    match &*d {
                        Deferred::Concat(inner) => out.extend(inner.iter().cloned()),
                        Deferred::Output { .. } | Deferred::Secret(_) | Deferred::Json(_) => {
                            out.push(Value::Deferred(d.clone()))
                        }
                    }
                }
                _ => unreachable!("interpolable() admits only strings and deferred values"),
            }
            if text.len() > self.limits.max_string_bytes {
                let file = self.file();
                return self.fail(
                    Diagnostic::new("eval::too-large", "string too large")
                        .label(
                            file,
                            span,
                            format!("more than {} bytes", self.limits.max_string_bytes),
                        )
                        .help("a string this large is almost certainly a mistake"),
                );
            }
        }
        if out.is_empty() {
            return Ok(Value::Str(text.into()));
        }
        if !text.is_empty() {
            out.push(Value::Str(text.into()));
        }
        Ok(Value::Deferred(Rc::new(Deferred::Concat(out))))
    }

    fn comprehension(
        &mut self,
        clauses: &[Clause],
        env: &Env,
        emit: &mut dyn FnMut(&mut Self, &Env) -> R<()>,
    ) -> R<()> {
        let Some((first, rest)) = clauses.split_first() else {
            return emit(self, env);
        };
        match first {
            Clause::If(cond) => {
                let c = self.eval(cond, env)?;
                match self.known(c, cond.span, "a filter")? {
                    Value::Bool(true) => self.comprehension(rest, env, emit),
                    Value::Bool(false) => Ok(()),
                    other => self.type_error("bool", &other, cond.span),
                }
            }
            Clause::For {
                first: a,
                second: b,
                iter,
            } => {
                let it = self.eval(iter, env)?;
                let it = self.known(it, iter.span, "a `for` loop")?;
                match &it {
                    Value::List(xs) => {
                        for (i, x) in xs.iter().enumerate() {
                            self.tick(iter.span)?;
                            let env = match b {
                                None => env.bind(a.name.clone(), x.clone()),
                                Some(b) => env
                                    .bind(a.name.clone(), Value::Int(i as i64))
                                    .bind(b.name.clone(), x.clone()),
                            };
                            self.comprehension(rest, &env, emit)?;
                        }
                        Ok(())
                    }
                    Value::Record(r) => {
                        for (k, v) in r.iter() {
                            self.tick(iter.span)?;
                            let env = env.bind(a.name.clone(), Value::Str(k.clone()));
                            let env = match b {
                                None => env,
                                Some(b) => env.bind(b.name.clone(), v.clone()),
                            };
                            self.comprehension(rest, &env, emit)?;
                        }
                        Ok(())
                    }
                    other => self.type_error("a list or a record", other, iter.span),
                }
            }
        }
    }

    /// `n.tags.owner` on a node without that tag: a policy that asks every node for a tag
    /// meets one that lacks it sooner or later, so say which node, and how to ask.
    fn missing_tag(
        &self,
        n: &Node,
        tags: &BTreeMap<Rc<str>, Value>,
        owner: &Expr,
        field: &Ident,
    ) -> Diagnostic {
        let file = self.file();
        let who = format!("{} `{}`", n.kind.name(), n.given_name());
        let of = &self.program.sources.get(file).text[owner.span.range()];
        let tag = &field.name;
        let (nfile, nspan) = n.called_from.unwrap_or((n.file, n.span));
        let mut d = Diagnostic::new("eval::missing-tag", format!("{who} has no tag `{tag}`"))
            .label(file, field.span, "read here")
            .label(nfile, nspan, format!("{who} is declared here without it"));
        let has: Vec<String> = tags.keys().map(|k| format!("`{k}`")).collect();
        d = d.message(match has.is_empty() {
            true => format!("A tag a node lacks is no field of its `tags`, and {who} has none."),
            false => format!(
                "A tag a node lacks is no field of its `tags`; {who} has only {}.",
                has.join(", ")
            ),
        });
        let ask = format!(
            "ask whether it is there: `get({of}.tags, \"{tag}\", \"\")` (\"\" where it is not) or `contains({of}.tags, \"{tag}\")`"
        );
        d.help(match did_you_mean(tag, tags.keys().map(|k| k.as_ref())) {
            Some(s) => format!("{s} If the tag may be missing, {ask}"),
            None => ask,
        })
    }

    fn field(&mut self, b: Value, field: &Ident) -> R<Value> {
        let file = self.file();
        let missing = |what: String, names: Vec<String>| {
            let mut d = Diagnostic::new(
                "type::unknown-field",
                format!("{what} has no field `{}`", field.name),
            )
            .label(file, field.span, "unknown field");
            if let Some(s) = did_you_mean(&field.name, names.iter().map(String::as_str)) {
                d = d.help(s);
            }
            d
        };
        match &b {
            Value::Record(r) => match r.get(&field.name) {
                Some(v) => Ok(v.clone()),
                None => self.fail(missing(
                    "the record".into(),
                    r.keys().map(|k| k.to_string()).collect(),
                )),
            },
            Value::Node(n) => {
                let schema = builtins::schema(n.kind);
                if field.name.as_ref() == schema.name_attr || field.name.as_ref() == "name" {
                    return Ok(Value::Str(n.given_name().into()));
                }
                if field.name.as_ref() == "target" {
                    if let Some(t) = &n.target {
                        return Ok(Value::Node(t.clone()));
                    }
                }
                if &*field.name == "tags" {
                    let tags = n.tags.iter();
                    let tags = tags.map(|(k, v)| (k.clone(), Value::Str(v.clone())));
                    return Ok(Value::Record(Rc::new(tags.collect())));
                }
                if let Some(v) = n.attrs.get(&field.name) {
                    return Ok(v.clone());
                }
                if &*field.name == "base" {
                    // A host's base, or the image of the VM standing in for it in the lab.
                    let image = n.attrs.get("image").filter(|_| n.stands_in);
                    match (n.lab_inputs.first(), image) {
                        (Some(base), _) => return Ok(Value::Node(base.clone())),
                        (None, Some(image)) => return Ok(image.clone()),
                        (None, None) => {}
                    }
                }
                if builtins::CHECK_ATTRS.contains(&&*field.name)
                    && schema.attrs.iter().any(|a| a.name == &*field.name)
                {
                    let checks = if &*field.name == "expect" {
                        &n.expect
                    } else {
                        &n.require
                    };
                    let list: Vec<Value> = checks.iter().cloned().map(Value::Check).collect();
                    return Ok(Value::List(list.into()));
                }
                if &*field.name == "rollback" && schema.attrs.iter().any(|a| a.name == "rollback") {
                    return Ok(Value::Bool(n.rollback));
                }
                if n.kind == NodeKind::Exec
                    && &*field.name == "stdout"
                    && !matches!(n.attrs.get("capture"), Some(Value::Bool(true)))
                {
                    return self.fail(
                        Diagnostic::new(
                            "eval::not-captured",
                            format!("exec `{}` does not capture its output", n.name),
                        )
                        .label(file, field.span, "its standard output is read here")
                        .label(n.file, n.span, "declared here without `capture = true`")
                        .message("A command's output is kept (in its record, and for the nodes that read it) only when it is asked for.")
                        .help("add `capture = true` to the exec"),
                    );
                }
                let open_output =
                    schema.open_outputs && !schema.attrs.iter().any(|a| a.name == &*field.name);
                if open_output || schema.outputs.iter().any(|(o, _)| *o == &*field.name) {
                    if !self.mocks.is_empty() {
                        let key = (
                            crate::moved::key_of(n).to_string(),
                            field.name.to_string(),
                        );
                        if let Some(v) = self.mocks.get(&key).cloned() {
                            self.mocks_read.insert(key);
                            return Ok(v);
                        }
                    }
                    return Ok(Value::Deferred(Rc::new(Deferred::Output {
                        node: n.clone(),
                        output: field.name.clone(),
                    })));
                }
                if schema.attrs.iter().any(|a| a.name == &*field.name) {
                    return self.fail(
                        Diagnostic::new(
                            "eval::unset-attribute",
                            format!("`{}` is not set on this {}", field.name, n.kind.name()),
                        )
                        .label(file, field.span, "optional and not given")
                        .help(format!(
                            "set `{} = …` where the {} is declared",
                            field.name,
                            n.kind.name()
                        )),
                    );
                }
                let names = schema.field_names().iter().map(|s| s.to_string()).collect();
                self.fail(missing(format!("a `{}` node", n.kind.name()), names))
            }
            Value::Module(m) => {
                let m = *m;
                if self.checked.globals[m].contains_key(&field.name) {
                    return self.global(m, &field.name, field.span);
                }
                let names: Vec<String> = self.checked.globals[m]
                    .keys()
                    .filter(|k| !k.contains(' '))
                    .map(|k| k.to_string())
                    .collect();
                let what = format!("module `{}`", self.program.modules[m].path);
                self.fail(missing(what, names))
            }
            Value::Deferred(_) => self.fail(
                Diagnostic::new("type::no-fields", "a deferred value has no fields")
                    .label(file, field.span, "field access on a value known only after deploy")
                    .help("deferred values are strings and numbers: interpolate them, or pass them to a node"),
            ),
            other => self.fail(
                Diagnostic::new(
                    "type::no-fields",
                    format!("{} has no fields", other.type_name()),
                )
                .label(file, field.span, "field access on a value without fields"),
            ),
        }
    }

    fn binary(&mut self, op: BinaryOp, l: &Expr, r: &Expr, env: &Env, span: Span) -> R<Value> {
        use BinaryOp::*;
        let a = self.eval(l, env)?;
        // `and`/`or` short-circuit.
        if matches!(op, And | Or) {
            let a = self.known(a, l.span, "an operator")?;
            let Value::Bool(x) = a else {
                return self.type_error("bool", &a, l.span);
            };
            if (op == And && !x) || (op == Or && x) {
                return Ok(Value::Bool(x));
            }
            let b = self.eval(r, env)?;
            let b = self.known(b, r.span, "an operator")?;
            return match b {
                Value::Bool(y) => Ok(Value::Bool(y)),
                other => self.type_error("bool", &other, r.span),
            };
        }
        let b = self.eval(r, env)?;
        if op == Add {
            if let (Value::Str(_) | Value::Deferred(_), Value::Str(_) | Value::Deferred(_)) =
                (&a, &b)
            {
                return self.concat(vec![a, b], span);
            }
        }
        let a = self.known(a, l.span, "an operator")?;
        let b = self.known(b, r.span, "an operator")?;
        let v = match (op, &a, &b) {
            (Eq, _, _) => Value::Bool(self.equal(&a, &b, span)?),
            (NotEq, _, _) => Value::Bool(!self.equal(&a, &b, span)?),
            (Lt | Le | Gt | Ge, _, _) => {
                let ord = match (&a, &b) {
                    (Value::Int(x), Value::Int(y)) => x.cmp(y),
                    (Value::Size(x), Value::Size(y)) => x.cmp(y),
                    (Value::Str(x), Value::Str(y)) => x.cmp(y),
                    _ => return self.bad_operands(op, &a, &b, l.span, r.span),
                };
                Value::Bool(match op {
                    Lt => ord.is_lt(),
                    Le => ord.is_le(),
                    Gt => ord.is_gt(),
                    _ => ord.is_ge(),
                })
            }
            (Div | Rem, _, Value::Int(0) | Value::Size(0)) => return self.division_by_zero(r.span),
            (Add | Sub | Mul | Div | Rem, Value::Int(x), Value::Int(y)) => {
                let res = match op {
                    Add => x.checked_add(*y),
                    Sub => x.checked_sub(*y),
                    Mul => x.checked_mul(*y),
                    Div => x.checked_div(*y),
                    _ => x.checked_rem(*y),
                };
                match res {
                    Some(n) => Value::Int(n),
                    None => return self.overflow(span),
                }
            }
            (Add | Sub, Value::Size(x), Value::Size(y)) => {
                let res = if op == Add {
                    x.checked_add(*y)
                } else {
                    x.checked_sub(*y)
                };
                match res {
                    Some(n) => Value::Size(n),
                    None if op == Sub => {
                        let file = self.file();
                        return self.fail(
                            Diagnostic::new("eval::overflow", "a size cannot be negative")
                                .label(
                                    file,
                                    span,
                                    format!(
                                        "{} - {} is below zero",
                                        format_size(*x),
                                        format_size(*y)
                                    ),
                                )
                                .help("subtract the smaller size from the larger"),
                        );
                    }
                    None => return self.overflow(span),
                }
            }
            (Mul, Value::Size(s), Value::Int(n)) | (Mul, Value::Int(n), Value::Size(s)) => {
                match u64::try_from(*n).ok().and_then(|n| s.checked_mul(n)) {
                    Some(v) => Value::Size(v),
                    None => return self.overflow(span),
                }
            }
            (Div, Value::Size(s), Value::Int(n)) => match u64::try_from(*n) {
                Ok(n) => Value::Size(s / n),
                Err(_) => {
                    let file = self.file();
                    return self.fail(
                        Diagnostic::new(
                            "eval::overflow",
                            "a size cannot be divided by a negative number",
                        )
                        .label(file, r.span, format!("this is {n}")),
                    );
                }
            },
            (Div, Value::Size(x), Value::Size(y)) => match i64::try_from(x / y) {
                Ok(q) => Value::Int(q),
                Err(_) => return self.overflow(span),
            },
            (Add, Value::List(x), Value::List(y)) => {
                self.check_len(x.len() + y.len(), span)?;
                Value::List(x.iter().chain(y.iter()).cloned().collect::<Vec<_>>().into())
            }
            _ => return self.bad_operands(op, &a, &b, l.span, r.span),
        };
        Ok(v)
    }

    fn bad_operands<T>(&mut self, op: BinaryOp, a: &Value, b: &Value, ls: Span, rs: Span) -> R<T> {
        let file = self.file();
        self.fail(
            Diagnostic::new(
                "type::bad-operands",
                format!(
                    "cannot apply `{}` to {} and {}",
                    op.symbol(),
                    a.type_name(),
                    b.type_name()
                ),
            )
            .label(file, ls, format!("this is {}", a.type_name()))
            .label(file, rs, format!("this is {}", b.type_name())),
        )
    }

    fn equal(&mut self, a: &Value, b: &Value, span: Span) -> R<bool> {
        Ok(match (a, b) {
            (Value::Int(x), Value::Int(y)) => x == y,
            (Value::Str(x), Value::Str(y)) => x == y,
            (Value::Bool(x), Value::Bool(y)) => x == y,
            (Value::Size(x), Value::Size(y)) => x == y,
            (Value::Mode(x), Value::Mode(y)) => x == y,
            (Value::Path(x), Value::Path(y)) => x == y,
            (Value::Node(x), Value::Node(y)) => x.id == y.id,
            (Value::List(x), Value::List(y)) => {
                if x.len() != y.len() {
                    return Ok(false);
                }
                for (p, q) in x.iter().zip(y.iter()) {
                    if !self.equal(p, q, span)? {
                        return Ok(false);
                    }
                }
                true
            }
            (Value::Record(x), Value::Record(y)) => {
                if x.len() != y.len() || x.keys().ne(y.keys()) {
                    return Ok(false);
                }
                for (p, q) in x.values().zip(y.values()) {
                    if !self.equal(p, q, span)? {
                        return Ok(false);
                    }
                }
                true
            }
            (Value::Deferred(_), _) | (_, Value::Deferred(_)) => {
                let file = self.file();
                return self.fail(deferred_diagnostic(
                    file,
                    span,
                    "a comparison",
                    &Ty::deferred(Ty::Unknown),
                ));
            }
            (Value::Fn(_) | Value::Builtin(_), _) | (_, Value::Fn(_) | Value::Builtin(_)) => {
                let file = self.file();
                return self.fail(
                    Diagnostic::new("type::bad-operands", "functions cannot be compared").label(
                        file,
                        span,
                        "comparing functions",
                    ),
                );
            }
            _ => false,
        })
    }

    // ---- calls --------------------------------------------------------------------------

    fn call(&mut self, call: &Expr, callee: &Expr, args: &[Arg], env: &Env) -> R<Value> {
        let f = self.eval(callee, env)?;
        let f = self.known(f, callee.span, "a function call")?;
        let mut vals = Vec::with_capacity(args.len());
        for a in args {
            vals.push(self.eval(&a.value, env)?);
        }
        match f {
            Value::Fn(c) => self.call_closure(&c, args, vals, call.span),
            Value::Builtin(b) => self.call_builtin(b, args, vals, call.span),
            other => {
                let file = self.file();
                self.fail(
                    Diagnostic::new(
                        "type::not-callable",
                        format!("{} is not a function", other.type_name()),
                    )
                    .label(
                        file,
                        callee.span,
                        format!("this is {}", other.type_name()),
                    ),
                )
            }
        }
    }

    fn bind(
        &mut self,
        name: &str,
        params: &[(Rc<str>, bool)],
        args: &[Arg],
        span: Span,
    ) -> R<Vec<Option<usize>>> {
        let file = self.file();
        let (slots, mut errors) = bind_args(name, params, args, file, span);
        if errors.is_empty() {
            Ok(slots)
        } else {
            self.fail(errors.swap_remove(0))
        }
    }

    fn call_closure(
        &mut self,
        c: &Rc<Closure>,
        args: &[Arg],
        vals: Vec<Value>,
        span: Span,
    ) -> R<Value> {
        let decl = &c.decl;
        let fname = decl
            .name
            .as_ref()
            .map_or("this function".to_string(), |n| n.name.to_string());
        let params: Vec<(Rc<str>, bool)> = decl
            .params
            .iter()
            .map(|p| (p.name.name.clone(), p.default.is_none()))
            .collect();
        let slots = self.bind(&fname, &params, args, span)?;
        if self.depth >= self.limits.max_call_depth {
            let file = self.file();
            return self.fail(
                Diagnostic::new("eval::too-deep", "recursion too deep")
                    .label(file, span, format!("`{fname}` is called more than {} levels deep", self.limits.max_call_depth))
                    .help("check that the recursion reaches its base case; loops are written as comprehensions"),
            );
        }
        let caller_file = self.file();
        let saved = std::mem::replace(&mut self.module, c.module);
        let saved_in = self.written_in.take();
        self.depth += 1;
        let callee_is_std = self.program.modules[c.module].is_std;
        self.frames.push(Frame {
            file: caller_file,
            span,
            callee: fname.as_str().into(),
        });
        let r = (|| {
            let mut env = c.env.clone();
            for (p, slot) in decl.params.iter().zip(&slots) {
                let (v, vspan, vfile) = match slot {
                    Some(i) => (vals[*i].clone(), args[*i].value.span, caller_file),
                    None => {
                        let d = p
                            .default
                            .as_ref()
                            .expect("bind_args checked required parameters");
                        (self.eval(d, &env)?, d.span, self.file())
                    }
                };
                let v = match &p.ty {
                    Some(t) => {
                        let want = self.annotation(t);
                        self.coerce(v, &want, vspan, vfile)?
                    }
                    None => v,
                };
                env = env.bind(p.name.name.clone(), v);
            }
            let out = self.eval(&decl.body, &env)?;
            match &decl.ret {
                Some(t) => {
                    let want = self.annotation(t);
                    let file = self.file();
                    self.coerce(out, &want, body_span(&decl.body), file)
                }
                None => Ok(out),
            }
        })();
        self.depth -= 1;
        self.module = saved;
        self.written_in = saved_in;
        self.frames.pop();
        // A failure inside the standard library is the user's first: it points at the
        // call, on the way out, written outside `std/` (at the argument, when what failed
        // in `std/` is one of the function's parameters), with where in `std/` after it.
        match r {
            Err(Stop::Error(mut d))
                if callee_is_std
                    && !self.is_std_file(caller_file)
                    && d.labels.iter().all(|l| self.is_std_file(l.file)) =>
            {
                let given = d.labels.first().and_then(|l| {
                    let text = self.program.sources.get(l.file).text.get(l.span.range())?;
                    let p = decl.params.iter().position(|p| *p.name.name == *text)?;
                    let i = slots.get(p).copied().flatten()?;
                    Some((text.to_string(), args[i].value.span))
                });
                let label = match given {
                    Some((param, at)) => envc_lang::Label {
                        file: caller_file,
                        span: at,
                        text: format!("given as `{param}` of `{fname}` here"),
                    },
                    None => envc_lang::Label {
                        file: caller_file,
                        span,
                        text: format!("from this call of `{fname}`"),
                    },
                };
                d.labels.insert(0, label);
                Err(Stop::Error(d))
            }
            r => r,
        }
    }

    /// A manifest's namespace settled by its kind, its object checked against the API
    /// schema (every problem reported), and its node name (`envc_k8s::node_name`).
    fn manifest(
        &mut self,
        attrs: &mut BTreeMap<Rc<str>, Value>,
        name: &Rc<str>,
        name_span: Span,
        call: Span,
        spans: &BTreeMap<Rc<str>, Span>,
    ) -> R<Rc<str>> {
        let file = self.file();
        let text = |attrs: &BTreeMap<Rc<str>, Value>, k: &str| match attrs.get(k) {
            Some(Value::Str(s)) => s.to_string(),
            _ => String::new(),
        };
        let (api_version, kind) = (text(attrs, "api_version"), text(attrs, "kind"));
        let what = format!("{kind} `{name}`");
        let at_attr = |k: &str| match k {
            "name" => name_span,
            k => spans.get(k).copied().unwrap_or(call),
        };
        if let Some((k, _)) = attrs.iter().find(|(_, v)| crate::value::contains_secret(v)) {
            let k = k.clone();
            return self.fail(
                Diagnostic::new("eval::exposed-secret", format!("a secret in `{k}` of {what}"))
                    .label(file, at_attr(&k), "holds a secret")
                    .message("A manifest is written in plain text (to a rendered directory, or a GitOps repository); envc does not encrypt objects for Flux or Argo CD (SOPS) yet.")
                    .help("keep the secret out of the manifest: create the Kubernetes Secret from your secret store, and refer to it by name (`secretKeyRef`)"),
            );
        }
        if let Some(Value::Record(body)) = attrs.get("body") {
            if let Some((field, attr)) = envc_k8s::RESERVED
                .iter()
                .find(|(f, _)| body.contains_key(*f))
            {
                return self.fail(
                    Diagnostic::new(
                        "eval::manifest-schema",
                        format!("{what}: `{field}` in its body"),
                    )
                    .label(file, at_attr("body"), format!("sets `{field}`"))
                    .help(format!(
                        "give it with the manifest's own attributes: {attr}"
                    )),
                );
            }
        }
        let namespace = text(attrs, "namespace");
        let namespace = match envc_k8s::find(&api_version, &kind) {
            Some(k) if !k.namespaced && !namespace.is_empty() => {
                return self.fail(
                    Diagnostic::new(
                        "eval::manifest-schema",
                        format!("{what} is cluster-wide: it has no namespace"),
                    )
                    .label(file, at_attr("namespace"), "a namespace")
                    .help("drop `namespace`"),
                );
            }
            Some(k) if k.namespaced && namespace.is_empty() => "default".to_string(),
            _ => namespace,
        };
        attrs.insert("namespace".into(), Value::Str(namespace.as_str().into()));
        let json = |attrs: &BTreeMap<Rc<str>, Value>, k: &str| {
            attrs
                .get(k)
                .map(crate::manifest::to_json)
                .unwrap_or(Ok(serde_json::Value::Null))
        };
        let parts = ["labels", "annotations", "body"].map(|k| (k, json(attrs, k)));
        let mut values = Vec::new();
        for (k, v) in parts {
            match v {
                Ok(v) => values.push(v),
                Err(what_it_is) => {
                    return self.fail(
                        Diagnostic::new(
                            "eval::manifest-schema",
                            format!("{what}: {what_it_is} in `{k}`"),
                        )
                        .label(file, at_attr(k), format!("holds {what_it_is}"))
                        .help("an object holds text, numbers, booleans, sizes, lists and records"),
                    );
                }
            }
        }
        let [labels, annotations, body] =
            <[serde_json::Value; 3]>::try_from(values).map_err(|_| Stop::Reported)?;
        let object = envc_k8s::object(
            &api_version,
            &kind,
            name,
            &namespace,
            labels,
            annotations,
            body,
        );
        let problems = envc_k8s::validate(&object);
        if !problems.is_empty() {
            let at = |k: &str| (file, at_attr(k));
            let no_sites = crate::manifest::RecordSites::new();
            let sites = self.record_sites.as_ref().unwrap_or(&no_sites);
            let found = crate::manifest::diagnostics(&problems, &what, attrs, &at, sites);
            self.errors.extend(found);
            return Err(Stop::Reported);
        }
        Ok(envc_k8s::node_name(&kind, name, &namespace).into())
    }

    /// Checks `v` against `ty` at run time, filling record defaults and checking ranges.
    pub fn coerce(&mut self, v: Value, ty: &Ty, span: Span, file: FileId) -> R<Value> {
        let mismatch = |expected: &Ty, found: &Value| {
            mismatch_diagnostic(
                Mismatch::Types {
                    expected: expected.to_string(),
                    found: found.type_name(),
                },
                file,
                span,
            )
        };
        if matches!(ty.base(), Ty::Secret) && !crate::value::contains_secret(&v) {
            return self.fail(mismatch(ty, &v));
        }
        if v.is_deferred() {
            return Ok(v); // checked after realization
        }
        Ok(match (ty, &v) {
            (Ty::Unknown, _) => v,
            (Ty::Deferred(t), _) => return self.coerce(v, t, span, file),
            (Ty::Ranged(base, lo, hi), _) => {
                let v = self.coerce(v, base, span, file)?;
                let n: i128 = match &v {
                    Value::Int(n) => *n as i128,
                    Value::Size(n) => *n as i128,
                    _ => return Ok(v),
                };
                if n < *lo || n > *hi {
                    let show = |x: i128| match &v {
                        Value::Size(_) => format_size(x as u64),
                        _ => x.to_string(),
                    };
                    return self.fail(
                        Diagnostic::new(
                            "eval::out-of-range",
                            format!("{} is out of range", show(n)),
                        )
                        .label(
                            file,
                            span,
                            format!("must be between {} and {}", show(*lo), show(*hi)),
                        )
                        .help(format!("the type is {ty}")),
                    );
                }
                v
            }
            (Ty::Int, Value::Int(_))
            | (Ty::Str, Value::Str(_))
            | (Ty::Bool, Value::Bool(_))
            | (Ty::Size, Value::Size(_))
            | (Ty::Mode, Value::Mode(_))
            | (Ty::Path, Value::Path(_))
            | (Ty::Check, Value::Check(_))
            | (Ty::Fn(_), Value::Fn(_) | Value::Builtin(_)) => v,
            (Ty::Node(nt), Value::Node(n)) if nt.accepts(n.kind) => v,
            (Ty::List(t), Value::List(xs)) => {
                let mut out = Vec::with_capacity(xs.len());
                for x in xs.iter() {
                    out.push(self.coerce(x.clone(), t, span, file)?);
                }
                Value::List(out.into())
            }
            (Ty::Dict(t), Value::Record(r)) => {
                let mut out = BTreeMap::new();
                for (k, x) in r.iter() {
                    out.insert(k.clone(), self.coerce(x.clone(), t, span, file)?);
                }
                Value::Record(Rc::new(out))
            }
            (Ty::Record(rt), Value::Record(r)) => {
                let mut out = BTreeMap::new();
                for (k, ft) in &rt.fields {
                    let x = match (r.get(k), &ft.default) {
                        (Some(x), _) => x.clone(),
                        (None, Some((m, d))) => {
                            let saved = std::mem::replace(&mut self.module, *m);
                            let saved_in = self.written_in.take();
                            let dv = self.eval(d, &Env::default());
                            self.module = saved;
                            self.written_in = saved_in;
                            dv?
                        }
                        (None, None) => {
                            return self.fail(mismatch_diagnostic(
                                Mismatch::MissingField {
                                    field: k.clone(),
                                    record: ty.to_string(),
                                },
                                file,
                                span,
                            ))
                        }
                    };
                    out.insert(k.clone(), self.coerce(x, &ft.ty, span, file)?);
                }
                if let Some(extra) = r.keys().find(|k| !rt.fields.contains_key(*k)) {
                    let suggestion = did_you_mean(extra, rt.fields.keys().map(|k| &**k));
                    return self.fail(mismatch_diagnostic(
                        Mismatch::UnknownField {
                            field: extra.clone(),
                            record: ty.to_string(),
                            suggestion,
                        },
                        file,
                        span,
                    ));
                }
                Value::Record(Rc::new(out))
            }
            _ => return self.fail(mismatch(ty, &v)),
        })
    }

    fn call_builtin(&mut self, b: Builtin, args: &[Arg], vals: Vec<Value>, span: Span) -> R<Value> {
        let sig = self
            .signatures
            .entry(b)
            .or_insert_with(|| Rc::new(b.signature()))
            .clone();
        let params: Vec<(Rc<str>, bool)> = sig
            .params
            .iter()
            .map(|p| (p.name.clone(), p.required))
            .collect();
        let slots = self.bind(b.name(), &params, args, span)?;
        let file = self.file();
        let mut got: Vec<Option<(Value, Span)>> = Vec::with_capacity(slots.len());
        for (p, slot) in sig.params.iter().zip(&slots) {
            got.push(match slot {
                Some(i) => {
                    let s = args[*i].value.span;
                    let v = if p.known {
                        self.known(vals[*i].clone(), s, "a node's name")?
                    } else {
                        vals[*i].clone()
                    };
                    Some((self.coerce(v, &p.ty, s, file)?, s))
                }
                None => None,
            });
        }
        if let Builtin::Node(kind) = b {
            let node = self.node(kind, &sig, got, span)?;
            return Ok(match node {
                Value::Node(n) if kind == NodeKind::Stack => stack_outputs(&n),
                v => v,
            });
        }
        if let Builtin::Check(kind) = b {
            return Ok(self.check(kind, &sig, got, span));
        }
        if b == Builtin::Nodes {
            let kind = match got.into_iter().next().flatten() {
                Some((Value::Str(k), s)) if !k.is_empty() => match NodeKind::from_name(&k) {
                    Some(kind) => Some(kind),
                    None => return self.fail(crate::check::unknown_kind_diagnostic(file, s, &k)),
                },
                _ => None,
            };
            return self.graph_nodes(kind, span);
        }
        let arg = |i: usize| {
            got[i]
                .clone()
                .expect("library functions have only required parameters")
        };
        crate::library::call(self, b, &arg, span)
    }

    /// A check value: its arguments with defaults filled in, and where it was written.
    fn check(
        &mut self,
        kind: CheckKind,
        sig: &FnTy,
        got: Vec<Option<(Value, Span)>>,
        span: Span,
    ) -> Value {
        let schema = builtins::check_schema(kind);
        let mut args: BTreeMap<Rc<str>, Value> = BTreeMap::new();
        for (p, v) in sig.params.iter().zip(got) {
            let value = match v {
                Some((v, _)) => Some(v),
                None => schema
                    .params
                    .iter()
                    .find(|a| *a.name == *p.name)
                    .and_then(|a| a.default)
                    .map(default_value),
            };
            if let Some(v) = value {
                args.insert(p.name.clone(), v);
            }
        }
        if let Some(k) = args
            .iter()
            .find(|(k, v)| {
                !schema.secret_params.contains(&&***k) && crate::value::contains_secret(v)
            })
            .map(|(k, _)| k.clone())
        {
            let file = self.file();
            let may = match schema.secret_params {
                [] => format!("No argument of a {} check can hold a secret", kind.name()),
                ps => format!(
                    "Of a {} check's arguments only {} can hold a secret",
                    kind.name(),
                    ps.iter()
                        .map(|p| format!("`{p}`"))
                        .collect::<Vec<_>>()
                        .join(" and ")
                ),
            };
            let r = self.fail(
                Diagnostic::new("eval::exposed-secret", format!("a secret in `{k}` of a {} check", kind.name()))
                    .label(file, span, "this check")
                    .message(format!("{may}: the others are given to programs as arguments, which show in the target's process list."))
                    .help("check with `command(\"…\")`, whose script may use the secret"),
            );
            self.record(r);
        }
        Value::Check(Rc::new(Check {
            kind,
            args,
            file: self.file(),
            span,
        }))
    }

    /// A repository git can be given: a path that is not an option, a branch name git
    /// accepts, a directory inside the repository.
    fn check_gitops(
        &mut self,
        attrs: &BTreeMap<Rc<str>, Value>,
        spans: &BTreeMap<Rc<str>, Span>,
        span: Span,
    ) -> R<()> {
        let text = |k: &str| match attrs.get(k) {
            Some(Value::Str(s)) => Some(s.to_string()),
            _ => None,
        };
        let problem = if let Some(why) = text("repo").and_then(|r| crate::names::bad_repo(&r)) {
            Some(("repo", why))
        } else if let Some(why) = text("branch").and_then(|b| crate::names::bad_branch(&b)) {
            Some(("branch", why))
        } else {
            text("path")
                .and_then(|p| crate::names::bad_repo_dir(&p))
                .map(|why| ("path", why))
        };
        let Some((k, (label, help))) = problem else {
            return Ok(());
        };
        let file = self.file();
        self.fail(
            Diagnostic::new(
                "eval::gitops",
                format!("invalid `{k}` of a gitops repository"),
            )
            .label(file, spans.get(k).copied().unwrap_or(span), label)
            .help(help),
        )
    }

    /// What an `exec` must say to be runnable: one command, commands that are not empty,
    /// environment names a shell accepts, absolute paths.
    fn check_exec(
        &mut self,
        attrs: &BTreeMap<Rc<str>, Value>,
        spans: &BTreeMap<Rc<str>, Span>,
        span: Span,
    ) -> R<()> {
        let file = self.file();
        let at = |k: &str| spans.get(k).copied().unwrap_or(span);
        let given: Vec<&str> = ["argv", "shell"]
            .into_iter()
            .filter(|k| attrs.contains_key(*k))
            .collect();
        if given.len() != 1 {
            let (title, label_at, label) = match given.as_slice() {
                [] => ("an exec needs a command", span, "this exec runs nothing"),
                _ => (
                    "an exec takes `argv` or `shell`, not both",
                    at("shell"),
                    "a script, beside `argv`",
                ),
            };
            return self.fail(
                Diagnostic::new("eval::exec-command", title)
                    .label(file, label_at, label)
                    .message("`argv` runs a program with its arguments as given, no shell in between; `shell` is a script for `sh -c`.")
                    .help("give exactly one: `argv = [\"pg_ctl\", \"promote\"]` or `shell = \"pg_ctl promote && …\"`"),
            );
        }
        for k in ["argv", "unless", "only_if", "undo"] {
            let Some(Value::List(xs)) = attrs.get(k) else {
                continue;
            };
            let program_empty = matches!(xs.first(), Some(Value::Str(p)) if p.is_empty());
            if xs.is_empty() || program_empty {
                return self.fail(
                    Diagnostic::new("eval::exec-command", format!("`{k}` names no program"))
                        .label(file, at(k), if xs.is_empty() { "an empty list" } else { "its first element is empty" })
                        .message(format!("`{k}` is a command: a program, then its arguments."))
                        .help(format!("write the program first: `{k} = [\"test\", \"-f\", \"/etc/ready\"]`, or drop `{k}`")),
                );
            }
        }
        if let Some(Value::Record(env)) = attrs.get("env") {
            let valid = |k: &str| {
                k.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
                    && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            };
            if let Some(bad) = env.keys().find(|k| !valid(k)) {
                return self.fail(
                    Diagnostic::new(
                        "eval::exec-env",
                        format!(
                            "`{}` is not an environment variable name",
                            bad.escape_debug()
                        ),
                    )
                    .label(file, at("env"), "in this environment")
                    .help("names are letters, digits and `_`, not starting with a digit: `PGDATA`"),
                );
            }
        }
        // `undo` is kept in the record until the node leaves, with the command's env.
        if attrs.contains_key("undo") && attrs.get("env").is_some_and(crate::value::contains_secret)
        {
            return self.fail(
                Diagnostic::new("eval::exposed-secret", "a secret in `env` of a command with an `undo`")
                    .label(file, at("env"), "holds a secret")
                    .message("The undo runs after the node left the source, so its record keeps the undo's environment: it would keep the secret.")
                    .help("drop the `undo`, or keep the secret out of this command's `env` (a separate exec can use it)"),
            );
        }
        for k in ["creates", "cwd"] {
            if let Some(Value::Str(p)) = attrs.get(k) {
                if !p.starts_with('/') {
                    return self.fail(
                        Diagnostic::new(
                            "eval::exec-path",
                            format!("`{k}` must be an absolute path, not `{}`", p.escape_debug()),
                        )
                        .label(file, at(k), "a relative path")
                        .message("The command runs on the target, where a relative path would depend on where it starts.")
                        .help(format!("write it from `/`: `{k} = \"/var/lib/app/{}\"`", p.escape_debug())),
                    );
                }
            }
        }
        Ok(())
    }

    fn node(
        &mut self,
        kind: NodeKind,
        sig: &FnTy,
        got: Vec<Option<(Value, Span)>>,
        span: Span,
    ) -> R<Value> {
        let schema = builtins::schema(kind);
        let file = self.file();
        let mut attrs: BTreeMap<Rc<str>, Value> = BTreeMap::new();
        let mut name: Option<(Rc<str>, Span)> = None;
        let mut target: Option<Rc<Node>> = None;
        let (mut expect, mut require) = (Vec::new(), Vec::new());
        let mut rollback = true;
        let mut given_tags: Option<Rc<BTreeMap<Rc<str>, Value>>> = None;
        // Where each given attribute's value was written, for cross-attribute messages.
        let mut spans: BTreeMap<Rc<str>, Span> = BTreeMap::new();
        for (p, v) in sig.params.iter().zip(got) {
            if let Some((_, sp)) = &v {
                spans.insert(p.name.clone(), *sp);
            }
            match (v, &*p.name) {
                (Some((Value::Node(t), _)), "target") if schema.target != TargetSlot::None => {
                    target = Some(t)
                }
                // Checks are kept apart from the attributes: they are not part of the id.
                (Some((Value::List(xs), _)), n @ ("expect" | "require")) => {
                    let list = if n == "expect" {
                        &mut expect
                    } else {
                        &mut require
                    };
                    list.extend(xs.iter().filter_map(|x| match x {
                        Value::Check(c) => Some(c.clone()),
                        _ => None,
                    }));
                }
                (_, "expect" | "require") => {}
                // What to do when an update fails, not what is on the target: not in the id.
                (Some((Value::Bool(b), _)), "rollback") => rollback = b,
                (_, "rollback") => {}
                // Tags too: they are not part of the id (but a manifest's labels are).
                (Some((Value::Record(r), _)), "tags") => given_tags = Some(r),
                (_, "tags") => {}
                (Some((Value::Str(s), sp)), n) if n == schema.name_attr => name = Some((s, sp)),
                (Some((v, _)), n) => {
                    attrs.insert(n.into(), v);
                }
                (None, n) => {
                    let default = schema
                        .attrs
                        .iter()
                        .find(|a| a.name == n)
                        .and_then(|a| a.default);
                    if let Some(d) = default {
                        attrs.insert(n.into(), default_value(d));
                    }
                }
            }
        }
        let Some((name, name_span)) = name else {
            return Err(Stop::Reported);
        };
        let name = if kind == NodeKind::Stack {
            self.stack_reference(&mut attrs, span)?
        } else {
            name
        };
        if let Err(why) = crate::names::validate_name(kind, &name) {
            return self.fail(
                Diagnostic::new(
                    "eval::bad-node-name",
                    format!(
                        "invalid {} {}: `{}`",
                        kind.name(),
                        schema.name_attr,
                        name.escape_debug()
                    ),
                )
                .label(file, name_span, why.0)
                .help(why.1),
            );
        }
        // Before anything reads the values whole (a manifest's schema check does).
        if let Some((attr, _)) = attrs
            .iter()
            .find(|(_, v)| !expands_within(v, self.limits.max_string_bytes))
        {
            let attr = attr.clone();
            return self.fail(
                self.too_large(span, &format!("attribute `{attr}` of this {}", kind.name())),
            );
        }
        let tags = if kind == NodeKind::Stack {
            BTreeMap::new()
        } else {
            let at = spans.get("tags").copied().unwrap_or(span);
            self.node_tags(given_tags.as_deref(), at)?
        };
        if kind == NodeKind::Manifest && !tags.is_empty() {
            // A manifest materializes its tags as labels: they are part of the object, and
            // so of its id. Labels given on the manifest win over tags.
            let mut labels: BTreeMap<Rc<str>, Value> = tags
                .iter()
                .map(|(k, v)| (k.clone(), Value::Str(v.clone())))
                .collect();
            if let Some(Value::Record(given)) = attrs.get("labels") {
                labels.extend(given.iter().map(|(k, v)| (k.clone(), v.clone())));
            }
            attrs.insert("labels".into(), Value::Record(Rc::new(labels)));
        }
        let name = if kind == NodeKind::Manifest {
            self.manifest(&mut attrs, &name, name_span, span, &spans)?
        } else {
            name
        };
        if kind == NodeKind::Vm {
            self.vm_image_or_cloud(&attrs, &name, file, name_span, &spans)?;
        }
        let mut kind = kind;
        let mut lab_inputs = Vec::new();
        let mut stands_in = false;
        if kind == NodeKind::Host {
            let base = match attrs.remove("base") {
                Some(Value::Node(base)) => Some(base),
                _ => None,
            };
            // Only the lab builds a base: nothing of the graph may have to come first.
            if let Some(base) = base.as_ref().filter(|b| !b.inputs.is_empty()) {
                return self.fail(
                    Diagnostic::new(
                        "eval::base-uses-nodes",
                        format!("the base of host `{name}` uses other nodes"),
                    )
                    .label(file, name_span, "this host")
                    .label(base.file, base.span, "its base, declared here")
                    .message(format!(
                        "A host's base is locked but built only by `envc verify`'s lab, so it cannot wait for {}.",
                        base.inputs
                            .iter()
                            .map(|i| format!("{} `{}`", i.kind.name(), i.name))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ))
                    .help("give the host a base that names no node: no `after`, no deferred values in its files"),
                );
            }
            // Its packages are locked from one suite: the one its base was built from.
            if let (Some(Value::Str(suite)), Some(base)) = (attrs.get("suite"), base.as_ref()) {
                if let Some(Value::Str(built)) = base
                    .attrs
                    .get("suite")
                    .filter(|b| !matches!(b, Value::Str(x) if x == suite))
                {
                    return self.fail(
                        Diagnostic::new(
                            "eval::suite-not-base",
                            format!("host `{name}` runs suite `{suite}`, its base is `{built}`"),
                        )
                        .label(file, name_span, "this host")
                        .label(base.file, base.span, format!("its base, built from `{built}`"))
                        .message("A host's packages are locked from one Debian suite, the one its base was built from.")
                        .help(format!("drop `suite` (the base says it), or give the host a base built from `{suite}`")),
                    );
                }
            }
            // Before the id is computed: the stand-in is a different machine, with an id
            // and dependents of its own, and `h.address` reads the stand-in's.
            match (self.stand_ins.get(&*name), base) {
                (Some(StandIn::Vm), Some(base)) => {
                    kind = NodeKind::Vm;
                    stands_in = true;
                    let after = attrs.remove("after");
                    attrs = builtins::schema(NodeKind::Vm)
                        .attrs
                        .iter()
                        .filter_map(|a| Some((a.name.into(), default_value(a.default?))))
                        .collect();
                    attrs.insert("image".into(), Value::Node(base));
                    attrs.extend(after.map(|a| ("after".into(), a)));
                }
                (Some(StandIn::Vm), None) => {
                    return self.fail(
                        Diagnostic::new(
                            "eval::no-base",
                            format!("host `{name}` has no base image to boot a stand-in from"),
                        )
                        .label(file, name_span, "this host")
                        .help(
                            "declare what it was provisioned from: `base = debian.default_image`",
                        ),
                    );
                }
                (
                    Some(StandIn::Machine {
                        address,
                        port,
                        user,
                    }),
                    base,
                ) => {
                    attrs.insert("address".into(), Value::Str(address.as_str().into()));
                    if let Some(port) = port {
                        attrs.insert("port".into(), Value::Int(i64::from(*port)));
                    }
                    if let Some(user) = user {
                        attrs.insert("user".into(), Value::Str(user.as_str().into()));
                    }
                    lab_inputs.extend(base);
                }
                (None, base) => lab_inputs.extend(base),
            }
        }
        if kind == NodeKind::File {
            let given: Vec<&str> = ["content", "template", "source"]
                .into_iter()
                .filter(|k| attrs.contains_key(*k))
                .collect();
            if given.len() != 1 {
                let title = if given.is_empty() {
                    "a file needs its content".to_string()
                } else {
                    format!(
                        "a file takes one of content, template and source; this one has {}",
                        given.join(" and ")
                    )
                };
                return self.fail(
                    Diagnostic::new("eval::file-content", title)
                        .label(file, span, "this file")
                        .help("give exactly one of `content = \"…\"`, `template = path(\"….j2\")` (with `vars`), `source = path(\"…\")`"),
                );
            }
            // A file that holds a secret is readable by its owner only, unless it says.
            let holds_secret = ["content", "vars"]
                .iter()
                .any(|k| attrs.get(*k).is_some_and(crate::value::contains_secret));
            if holds_secret && !spans.contains_key("mode") {
                attrs.insert("mode".into(), Value::Mode(0o600));
            }
            if attrs.contains_key("vars") && !attrs.contains_key("template") {
                return self.fail(
                    Diagnostic::new("eval::file-content", "`vars` without a template")
                        .label(file, span, "this file has vars but no template")
                        .help(
                            "vars fill a template: add `template = path(\"….j2\")`, or drop `vars`",
                        ),
                );
            }
        }
        // A secret goes only where it reaches the target as data: a file's content, an
        // exec's environment and input. Anywhere else it would be a command line, a path,
        // a name or a record attribute.
        let allowed: &[&str] = match kind {
            NodeKind::File => &["content", "vars"],
            NodeKind::Exec => &["env", "stdin"],
            // A provider takes it as an argument; envc's records keep its keyed hash. Not
            // in `provider_config`: a record must be able to start the provider again to
            // destroy the resource, and credentials come from the provider's environment.
            NodeKind::Resource => &["body"],
            _ => &[],
        };
        if let Some(k) = attrs
            .iter()
            .find(|(k, v)| !allowed.contains(&&***k) && crate::value::contains_secret(v))
            .map(|(k, _)| k.clone())
        {
            let where_ = if kind == NodeKind::Exec {
                "Arguments, guards and paths of a command show in the target's process list and in envc's records; a secret must not."
            } else if kind == NodeKind::Resource {
                "A resource's record keeps its provider's configuration, to destroy it by the same provider later; a secret must not be kept."
            } else {
                "A secret reaches a target only as data: a file's content or template variables, or an exec's `env` or `stdin`."
            };
            let help = if kind == NodeKind::Exec {
                "pass the secret in `env` (`env = { PGPASSWORD = secret(\"…\") }`) or `stdin`"
            } else if kind == NodeKind::Resource {
                "give a provider its credentials in its own environment variables, as under Terraform; a resource's arguments (`body`) may hold secrets"
            } else {
                "put the secret in a file's content, or in an exec's `env` or `stdin`"
            };
            return self.fail(
                Diagnostic::new(
                    "eval::exposed-secret",
                    format!("a secret in `{k}` of {} {}", article(kind), kind.name()),
                )
                .label(
                    file,
                    spans.get(&k).copied().unwrap_or(span),
                    "holds a secret",
                )
                .message(where_)
                .help(help),
            );
        }
        if kind == NodeKind::Exec {
            self.check_exec(&attrs, &spans, span)?;
        }
        if kind == NodeKind::Gitops {
            self.check_gitops(&attrs, &spans, span)?;
        }
        let mut inputs: Vec<Rc<Node>> = Vec::new();
        if let Some(t) = &target {
            inputs.push(t.clone());
        }
        for v in attrs.values() {
            collect_nodes(v, &mut inputs);
        }
        inputs.sort_by_key(|n| n.id);
        inputs.dedup_by(|a, b| a.id == b.id);
        let mut check_inputs: Vec<Rc<Node>> = Vec::new();
        for c in expect.iter().chain(&require) {
            for v in c.args.values() {
                collect_nodes(v, &mut check_inputs);
            }
        }
        check_inputs.sort_by_key(|n| n.id);
        check_inputs.dedup_by(|a, b| a.id == b.id);
        check_inputs.retain(|n| inputs.binary_search_by_key(&n.id, |i| i.id).is_err());
        let pins: BTreeMap<PinKey, Rc<str>> = pin_keys(kind, &name, &attrs)
            .into_iter()
            .filter_map(|k| {
                let v = Rc::from(self.pins.get(&k)?.as_str());
                Some((k, v))
            })
            .collect();
        let d = DerivationRef {
            kind: kind.name(),
            name: &name,
            target: target.as_ref().map(|t| &t.id),
            attrs: &attrs,
            inputs: &inputs,
            pins: &pins,
        };
        let bytes = match encode(&d) {
            Ok(b) => b,
            Err(what) => {
                return self.fail(
                    Diagnostic::new(
                        "eval::not-storable",
                        format!("{} cannot be stored in a node", what.0),
                    )
                    .label(file, span, "an attribute holds it")
                    .help("nodes hold data: strings, numbers, lists, records and other nodes"),
                )
            }
        };
        Ok(Value::Node(Rc::new(Node {
            id: derivation_id(&bytes),
            kind,
            name,
            target,
            attrs,
            inputs,
            pins,
            expect,
            require,
            check_inputs,
            lab_inputs,
            stands_in,
            rollback,
            tags,
            called_from: self.user_call(),
            file,
            span,
        })))
    }

    /// The outermost call being evaluated: where a node made inside a function (a
    /// component's, the standard library's) was asked for.
    fn user_call(&self) -> Option<(FileId, Span)> {
        self.frames.first().map(|f| (f.file, f.span))
    }

    /// A node's tags: the environment's `default tags`, then those of the module the node
    /// is made in, then its own `tags`, each over the one before.
    fn node_tags(
        &mut self,
        given: Option<&BTreeMap<Rc<str>, Value>>,
        span: Span,
    ) -> R<crate::value::Tags> {
        let mut tags = BTreeMap::new();
        let root = self.program.root;
        // A node the standard library makes belongs to the module that asked for it.
        let here = if self.program.modules[self.module].is_std {
            let caller = self.frames.iter().rev().find(|f| !self.is_std_file(f.file));
            caller
                .and_then(|f| self.program.modules.iter().position(|m| m.file == f.file))
                .unwrap_or(root)
        } else {
            self.module
        };
        let modules = if here == root {
            vec![root]
        } else {
            vec![root, here]
        };
        for m in modules {
            if let Some(Value::Record(t)) = self.default_tags(m)? {
                tags.extend(t.iter().filter_map(|(k, v)| match v {
                    Value::Str(s) => Some((k.clone(), s.clone())),
                    _ => None,
                }));
            }
        }
        for (k, v) in given.into_iter().flatten() {
            // Known now: a tag is shown and judged before anything is deployed.
            if let Value::Str(s) = self.known(v.clone(), span, "a tag")? {
                tags.insert(k.clone(), s);
            }
        }
        Ok(tags)
    }

    /// Module `m`'s `default tags` (a record of strings), evaluated once; `None` when it
    /// has none.
    fn default_tags(&mut self, m: ModuleId) -> R<Option<Value>> {
        match self.module_tags.get(&m) {
            Some(Slot::Done(v)) => return Ok(Some(v.clone())),
            Some(Slot::Failed) => return Err(Stop::Reported),
            Some(Slot::InProgress) => {
                let file = self.program.modules[m].file;
                let item = self
                    .default_tags_item(m)
                    .map_or(Span::at(0), |(span, _)| span);
                return self.fail(
                    Diagnostic::new("eval::cycle", "the default tags need a node, which takes them")
                        .label(file, item, "these default tags")
                        .message("Every node made in a module takes its default tags (and every node of the environment the root file's), so the tags cannot be computed from such a node.")
                        .help("compute the tags from parameters and plain values, not from nodes"),
                );
            }
            None => {}
        }
        let Some((_, value)) = self.default_tags_item(m) else {
            return Ok(None);
        };
        self.module_tags.insert(m, Slot::InProgress);
        let saved = std::mem::replace(&mut self.module, m);
        let saved_in = self.written_in.take();
        let file = self.file();
        let r = self
            .eval(value, &Env::default())
            .and_then(|v| self.coerce(v, &builtins::t_tags(), value.span, file));
        self.module = saved;
        self.written_in = saved_in;
        match r {
            Ok(v) => {
                self.module_tags.insert(m, Slot::Done(v.clone()));
                Ok(Some(v))
            }
            Err(e) => {
                self.module_tags.insert(m, Slot::Failed);
                if let Stop::Error(d) = e {
                    self.errors.push(*d);
                }
                Err(Stop::Reported)
            }
        }
    }

    fn default_tags_item(&self, m: ModuleId) -> Option<(Span, &'p Expr)> {
        self.program.modules[m]
            .ast
            .items
            .iter()
            .find_map(|it| match &it.kind {
                ItemKind::DefaultTags(e) => Some((it.span, e)),
                _ => None,
            })
    }

    /// `nodes(kind)`: the graph's nodes of that kind (all of them for none), in the graph's
    /// order. Only policies call it, once the graph is lowered.
    fn graph_nodes(&mut self, kind: Option<NodeKind>, span: Span) -> R<Value> {
        let Some(nodes) = &self.graph_nodes else {
            let file = self.file();
            return self.fail(crate::check::nodes_placement_diagnostic(file, span));
        };
        let list: Vec<Value> = nodes
            .iter()
            // A stack reference is read, not managed: only `nodes("stack")` lists them.
            .filter(|n| kind.map_or(n.kind != NodeKind::Stack, |k| n.kind == k))
            .map(|n| Value::Node(n.clone()))
            .collect();
        Ok(Value::List(list.into()))
    }

    /// The referenced environment of the `stack(…)` at `span` (its project-relative path,
    /// the node's name), with the outputs it is read for and their types in `attrs`: the
    /// executor checks what the state holds against them.
    fn stack_reference(&mut self, attrs: &mut BTreeMap<Rc<str>, Value>, span: Span) -> R<Rc<str>> {
        let file = self.file();
        // The checker reported a reference it could not type.
        let Some(stack) = self.program.stacks.get(&(file, span)) else {
            return Err(Stop::Reported);
        };
        let Some(outputs) = &stack.outputs else {
            return Err(Stop::Reported);
        };
        let types = outputs
            .iter()
            .map(|(k, t)| (k.clone(), output_ty_value(t)))
            .collect();
        attrs.insert("outputs".into(), Value::Record(Rc::new(types)));
        Ok(stack.path.clone())
    }

    /// A project file's content as a string (`read(path(…))`): text of at most the string
    /// limit. Its bytes are what `path` hashed, so the string is an input like the file.
    fn read_project_file(&mut self, p: &ProjectFile, span: Span) -> R<Value> {
        let file = self.file();
        let bytes = match self.loader.read(&p.path) {
            Ok(b) if blake3::hash(&b) == p.hash => b,
            Ok(_) => {
                return self.fail(
                    Diagnostic::new(
                        "eval::unreadable-file",
                        format!("`{}` changed while envc read it", p.path),
                    )
                    .label(file, span, "read here")
                    .help("run the command again once nothing writes the file"),
                )
            }
            Err(e) => return self.unreadable(&p.path, &e, span, "read here"),
        };
        if bytes.len() > self.limits.max_string_bytes {
            return Err(Stop::Error(Box::new(
                self.too_large(span, &format!("the content of `{}`", p.path)),
            )));
        }
        match String::from_utf8(bytes) {
            Ok(text) => Ok(Value::Str(text.into())),
            Err(_) => self.fail(
                Diagnostic::new("eval::not-text", format!("`{}` is not UTF-8 text", p.path))
                    .label(file, span, "read as text here")
                    .help(format!(
                        "place a binary file as it is: `file(path = …, source = path(\"{}\"))`",
                        p.path
                    )),
            ),
        }
    }

    /// Reads a project file named relative to the current module, hashing its content.
    fn project_file(&mut self, rel: &str, span: Span) -> R<Value> {
        let file = self.file();
        let from = self.program.modules[self.module].path.clone();
        let spec = if rel.starts_with("./") || rel.starts_with("../") {
            rel.to_string()
        } else {
            format!("./{rel}")
        };
        let resolved = if self.program.modules[self.module].is_std || rel.starts_with('/') {
            None
        } else {
            let root = match crate::program::is_pack_path(&from) {
                true => crate::source::ProjectRoot::default(),
                false => self.loader.project_root(),
            };
            join_relative(&root, &from, &spec)
        };
        let Some(path) = resolved else {
            return self.fail(
                Diagnostic::new(
                    "eval::path-outside-project",
                    format!("`{rel}` is not a project file"),
                )
                .label(file, span, "outside the project root")
                .message(self.loader.project_root().describe())
                .help("name files relative to this module, inside the project"),
            );
        };
        let path: Rc<str> = path.into();
        if let Some(h) = self.files.get(&path) {
            return Ok(Value::Path(Rc::new(ProjectFile { path, hash: *h })));
        }
        match self.loader.read(&path) {
            Ok(bytes) => {
                let hash = blake3::hash(&bytes);
                self.files.insert(path.clone(), hash);
                Ok(Value::Path(Rc::new(ProjectFile { path, hash })))
            }
            Err(e) => self.unreadable(&path, &e, span, "named here"),
        }
    }

    fn unreadable(
        &mut self,
        path: &str,
        e: &dyn std::fmt::Display,
        span: Span,
        label: &str,
    ) -> R<Value> {
        let file = self.file();
        self.fail(
            Diagnostic::new(
                "eval::unreadable-file",
                format!("cannot read `{path}`: {e}"),
            )
            .label(file, span, label)
            .help("paths are relative to the file that names them"),
        )
    }
}

/// The library functions (`len`, `join`, `read`, …) reach the evaluator through this, so
/// that `library.rs` stands below it.
impl crate::library::Context for Evaluator<'_> {
    fn file(&self) -> FileId {
        Evaluator::file(self)
    }

    fn max_string_bytes(&self) -> usize {
        self.limits.max_string_bytes
    }

    fn too_large(&self, span: Span, what: &str) -> Diagnostic {
        Evaluator::too_large(self, span, what)
    }

    fn concat(&mut self, parts: Vec<Value>, span: Span) -> R<Value> {
        Evaluator::concat(self, parts, span)
    }

    fn equal(&mut self, a: &Value, b: &Value, span: Span) -> R<bool> {
        Evaluator::equal(self, a, b, span)
    }

    fn read_project_file(&mut self, p: &ProjectFile, span: Span) -> R<Value> {
        Evaluator::read_project_file(self, p, span)
    }

    fn project_file(&mut self, rel: &str, span: Span) -> R<Value> {
        Evaluator::project_file(self, rel, span)
    }
}

fn default_value(d: Default) -> Value {
    match d {
        Default::Int(n) => Value::Int(n),
        Default::Str(s) => Value::Str(s.into()),
        Default::Bool(b) => Value::Bool(b),
        Default::Size(n) => Value::Size(n),
        Default::Mode(m) => Value::Mode(m),
        Default::EmptyList => Value::List(Vec::new().into()),
        Default::EmptyRecord => Value::Record(Rc::new(BTreeMap::new())),
    }
}

/// Nodes referenced by a value, directly or through deferred outputs (not through other
/// nodes: those are already inputs of the nodes that reference them).
pub fn collect_nodes(v: &Value, out: &mut Vec<Rc<Node>>) {
    match v {
        Value::Node(n) => out.push(n.clone()),
        Value::List(xs) => xs.iter().for_each(|x| collect_nodes(x, out)),
        Value::Record(r) => r.values().for_each(|x| collect_nodes(x, out)),
        Value::Deferred(d) => match &**d {
            Deferred::Output { node, .. } => out.push(node.clone()),
            Deferred::Concat(parts) => parts.iter().for_each(|x| collect_nodes(x, out)),
            Deferred::Json(inner) => collect_nodes(inner, out),
            Deferred::Secret(_) => {}
        },
        _ => {}
    }
}

/// A `--set` value: a literal (number, size, mode, bool, string, list, record).
fn literal(e: &Expr, file: FileId) -> R<Value> {
    Ok(match &e.kind {
        ExprKind::Int(n) => Value::Int(*n),
        ExprKind::Size(n) => Value::Size(*n),
        ExprKind::Mode(n) => Value::Mode(*n),
        ExprKind::Bool(b) => Value::Bool(*b),
        ExprKind::Str(parts) if parts.iter().all(|p| matches!(p, StrPart::Lit(_))) => Value::Str(
            parts
                .iter()
                .map(|p| if let StrPart::Lit(s) = p { &**s } else { "" })
                .collect::<String>()
                .into(),
        ),
        ExprKind::Unary(UnaryOp::Neg, x) => match literal(x, file)? {
            Value::Int(n) => Value::Int(-n),
            _ => return Err(not_literal(e, file)),
        },
        ExprKind::Paren(x) => literal(x, file)?,
        ExprKind::List(xs) => Value::List(
            xs.iter()
                .map(|x| literal(x, file))
                .collect::<R<Vec<_>>>()?
                .into(),
        ),
        ExprKind::Record(fs) => Value::Record(Rc::new(
            fs.iter()
                .map(|f| Ok((f.name.name.clone(), literal(&f.value, file)?)))
                .collect::<R<BTreeMap<_, _>>>()?,
        )),
        // `--set 'pw=secret("pw")'`: a secret is named, never given, on the command line.
        ExprKind::Call { callee, args } if matches!(&callee.kind, ExprKind::Name(n) if &**n == "secret") =>
        {
            let name = match &args[..] {
                [Arg { name: None, value }] => match literal(value, file)? {
                    Value::Str(s) if crate::value::is_secret_name(&s) => s,
                    _ => return Err(not_literal(e, file)),
                },
                _ => return Err(not_literal(e, file)),
            };
            Value::Deferred(Rc::new(Deferred::Secret(name)))
        }
        ExprKind::Error => return Err(Stop::Reported),
        _ => return Err(not_literal(e, file)),
    })
}

fn not_literal(e: &Expr, file: FileId) -> Stop {
    Stop::Error(Box::new(
        Diagnostic::new("eval::set-not-literal", "a --set value must be a literal")
            .label(file, e.span, "not a literal")
            .help("give a number, size, mode, bool, \"string\", [list], { record } or secret(\"NAME\"); a bare word is taken as a string for str parameters"),
    ))
}

/// The lockfile keys a node of `kind` named `name` uses: a package its version and hash,
/// an image its package set, the archive it is built from and the time its files carry, a
/// cloud vm the image (AMI) it boots in its region.
fn pin_keys(kind: NodeKind, name: &str, attrs: &BTreeMap<Rc<str>, Value>) -> Vec<PinKey> {
    match kind {
        NodeKind::Vm => {
            let field = |r: &Value, k: &str| match r {
                Value::Record(r) => r.get(k).cloned(),
                _ => None,
            };
            let Some(cloud) = attrs.get("cloud") else {
                return Vec::new();
            };
            let image = field(cloud, "image").and_then(|i| field(&i, "name"));
            match (image, field(cloud, "region")) {
                (Some(Value::Str(image)), Some(Value::Str(region))) => {
                    vec![PinKey::cloud_image(&image, &region)]
                }
                _ => Vec::new(),
            }
        }
        NodeKind::Package => vec![PinKey::Package(name.to_string())],
        // The provider's version and package hashes: a new provider is a new resource id.
        NodeKind::Resource => match attrs.get("provider") {
            Some(Value::Str(address)) => PinKey::provider(address).into_iter().collect(),
            _ => Vec::new(),
        },
        NodeKind::Image => {
            // What writes the image's bytes is an input: mmdebstrap lays out its root, GNU
            // tar writes the root's tarball, mke2fs its disk. (ssh and QEMU only carry bytes
            // or run what was built: they are in no node.)
            let mut keys = vec![
                PinKey::Image(name.to_string()),
                PinKey::SourceDateEpoch,
                PinKey::Tool("mke2fs".into()),
                PinKey::Tool("mmdebstrap".into()),
                PinKey::Tool("tar".into()),
            ];
            if let Some(Value::Str(suite)) = attrs.get("suite") {
                keys.push(PinKey::debian_archive(suite));
            }
            keys
        }
        _ => Vec::new(),
    }
}

/// `a` or `an` before a node kind's name.
fn article(kind: NodeKind) -> &'static str {
    match kind.name().as_bytes().first() {
        Some(b'a' | b'e' | b'i' | b'o' | b'u') => "an",
        _ => "a",
    }
}

/// An output's type as the `stack` node's `outputs` attribute holds it (and hashes it): a
/// scalar by name, as it always was; a list as the one-element list of its element's type,
/// a record as the record of its fields' types.
fn output_ty_value(t: &crate::stack::OutputTy) -> Value {
    use crate::stack::OutputTy;
    match t {
        OutputTy::List(el) => Value::List(vec![output_ty_value(el)].into()),
        OutputTy::Record(fields) => Value::Record(Rc::new(
            fields
                .iter()
                .map(|(k, t)| (k.as_str().into(), output_ty_value(t)))
                .collect(),
        )),
        t => Value::Str(t.name().into()),
    }
}

/// What `stack("…")` evaluates to: a record of the referenced environment's outputs, each
/// deferred to the `stack` node that reads them; a record output is a record of its fields,
/// each read as output `NAME.FIELD`.
fn stack_outputs(node: &Rc<Node>) -> Value {
    fn outputs(node: &Rc<Node>, prefix: &str, types: &Value) -> Value {
        let Value::Record(r) = types else {
            return Value::Deferred(Rc::new(Deferred::Output {
                node: node.clone(),
                output: prefix.into(),
            }));
        };
        Value::Record(Rc::new(
            r.iter()
                .map(|(k, t)| {
                    let name = match prefix {
                        "" => k.to_string(),
                        p => format!("{p}.{k}"),
                    };
                    (k.clone(), outputs(node, &name, t))
                })
                .collect(),
        ))
    }
    match node.attrs.get("outputs") {
        Some(types @ Value::Record(_)) => outputs(node, "", types),
        _ => Value::Record(Rc::new(BTreeMap::new())),
    }
}
