//! Name resolution and type checking, in one walk that collects every error.
//!
//! Top-level bindings of a module may refer to each other in any order; their types are
//! inferred on demand and memoised (a recursive reference is `Unknown` here; a real cycle
//! is reported by the evaluator, with the cycle printed). Every annotation resolved here is
//! recorded in `TypeTable`, so the evaluator coerces values with exactly these types.

use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;

use envc_lang::ast::*;
use envc_lang::{did_you_mean, Diagnostic, FileId, Span};

use crate::args::bind_args;
use crate::builtins::{self, Builtin};
use crate::program::Program;
use crate::types::*;

/// How deep top-level bindings may depend on one another (`let a2 = a1`, `let a1 = a0`, …)
/// before checking and evaluation stop with a diagnostic instead of recursing further.
pub const MAX_BINDING_DEPTH: usize = 10_000;

/// Resolved annotations, keyed by (file, span) of the type expression.
pub type TypeTable = HashMap<(FileId, u32, u32), Ty>;

#[derive(Clone, Debug)]
pub enum Global {
    Let(usize),
    Fn(usize),
    Param(usize),
    Import(ModuleId),
    /// An import that failed to load or an item that did not parse (reported once, there).
    Broken,
    Type(usize),
    Output(usize),
}

pub struct Checked {
    pub types: TypeTable,
    /// Top-level names of every module.
    pub globals: Vec<BTreeMap<Rc<str>, Global>>,
    /// The root module's outputs and their types (what a `stack(…)` of it reads).
    pub outputs: BTreeMap<Rc<str>, Ty>,
    /// What an editor asks about: empty unless checked with [`check_indexed`].
    pub index: Index,
}

/// Every expression's type and every name's meaning, as the checker found them: what
/// hover, go to definition, find references and completion read (the language server),
/// so that they never disagree with the checker.
#[derive(Default)]
pub struct Index {
    /// Each expression's inferred type, in the order inferred.
    pub exprs: Vec<(FileId, Span, Ty)>,
    /// Each use of a name (a value or a type) and what it refers to.
    pub refs: Vec<NameRef>,
    /// Each local name (a function's parameter, a block's `let`, a loop variable): where it
    /// is defined, where it is visible and its type.
    pub locals: Vec<LocalDef>,
}

#[derive(Clone, Debug)]
pub struct NameRef {
    pub file: FileId,
    pub span: Span,
    pub target: Def,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Def {
    /// A local name, by the span of its definition in `file`.
    Local {
        file: FileId,
        span: Span,
    },
    /// A top-level value (`let`, `fn`, `param`, an import's alias) of a module.
    Global {
        module: ModuleId,
        name: Rc<str>,
    },
    /// A `type` declared in a module.
    Type {
        module: ModuleId,
        name: Rc<str>,
    },
    Builtin(Builtin),
}

#[derive(Clone, Debug)]
pub struct LocalDef {
    pub file: FileId,
    pub name: Rc<str>,
    pub def: Span,
    pub scope: Span,
    pub ty: Ty,
}

/// How many name comparisons the suggestions of one check may make: a hundred unknown names
/// in a module of twenty thousand, far more than hand-written programs reach; past it,
/// errors come without "did you mean", so checking stays linear in the program's size.
const SUGGESTION_BUDGET: usize = 2_000_000;

pub fn check(program: &Program) -> (Checked, Vec<Diagnostic>) {
    run(program, false)
}

/// [`check`], keeping the [`Index`] an editor needs.
pub fn check_indexed(program: &Program) -> (Checked, Vec<Diagnostic>) {
    run(program, true)
}

fn run(program: &Program, indexed: bool) -> (Checked, Vec<Diagnostic>) {
    let mut c = Checker {
        program,
        errors: Vec::new(),
        globals: Vec::new(),
        value_memo: HashMap::new(),
        type_memo: HashMap::new(),
        table: HashMap::new(),
        module: 0,
        locals: Vec::new(),
        depth: 0,
        index: indexed.then(Index::default),
        record_keys: HashMap::new(),
        outputs: BTreeMap::new(),
        in_policy: false,
        compared: 0,
    };
    for m in 0..program.modules.len() {
        let g = c.collect_globals(m);
        c.globals.push(g);
    }
    for m in 0..program.modules.len() {
        c.module = m;
        for item in program.modules[m].ast.items.iter() {
            c.check_item(m, item);
        }
    }
    (
        Checked {
            types: c.table,
            globals: c.globals,
            outputs: c.outputs,
            index: c.index.unwrap_or_default(),
        },
        c.errors,
    )
}

struct Checker<'p> {
    program: &'p Program,
    errors: Vec<Diagnostic>,
    globals: Vec<BTreeMap<Rc<str>, Global>>,
    /// Types of top-level values; `None` while being inferred.
    value_memo: HashMap<(ModuleId, Rc<str>), Option<Ty>>,
    type_memo: HashMap<(ModuleId, Rc<str>), Option<Ty>>,
    table: TypeTable,
    module: ModuleId,
    /// Names in scope: name, type, and the span of the definition (in the current file).
    locals: Vec<(Rc<str>, Ty, Span)>,
    /// Top-level bindings being inferred, innermost last.
    depth: usize,
    index: Option<Index>,
    /// The keys of every record literal, by (file, span of the literal): where an unknown
    /// field is reported.
    record_keys: HashMap<(FileId, Span), RecordKeys>,
    outputs: BTreeMap<Rc<str>, Ty>,
    /// Inside a `policy`: where `nodes(…)` may be called.
    in_policy: bool,
    /// Names compared with unknown ones for a "did you mean" so far (see
    /// [`SUGGESTION_BUDGET`]).
    compared: usize,
}

/// A record literal's keys and where each is written.
type RecordKeys = Vec<(Rc<str>, Span)>;

const DEFERRED_MESSAGE: &str = "envc fixes the shape of the graph before it changes anything, so conditions, loops, \
indices, arithmetic and node names need values known now. A deferred value can be passed to nodes, stored in \
records and lists, and interpolated into strings.";

impl<'p> Checker<'p> {
    fn file(&self) -> FileId {
        self.program.modules[self.module].file
    }

    fn items(&self, m: ModuleId) -> &'p [Item] {
        &self.program.modules[m].ast.items
    }

    fn error(&mut self, d: Diagnostic) {
        self.errors.push(d);
    }

    fn refer(&mut self, span: Span, target: Def) {
        let file = self.file();
        if let Some(ix) = &mut self.index {
            ix.refs.push(NameRef { file, span, target });
        }
    }

    /// Ends the scope of the locals defined since `depth`, visible in `scope`.
    fn close_scope(&mut self, depth: usize, scope: Span) {
        let file = self.file();
        if let Some(ix) = &mut self.index {
            for (name, ty, def) in &self.locals[depth..] {
                ix.locals.push(LocalDef {
                    file,
                    name: name.clone(),
                    def: *def,
                    scope,
                    ty: ty.clone(),
                });
            }
        }
        self.locals.truncate(depth);
    }

    fn collect_globals(&mut self, m: ModuleId) -> BTreeMap<Rc<str>, Global> {
        let module = &self.program.modules[m];
        let file = module.file;
        let mut g: BTreeMap<Rc<str>, Global> = BTreeMap::new();
        let mut spans: BTreeMap<Rc<str>, Span> = BTreeMap::new();
        for (alias, (id, span)) in &module.imports {
            g.insert(alias.clone(), Global::Import(*id));
            spans.insert(alias.clone(), *span);
        }
        for name in &module.broken_names {
            g.entry(name.clone()).or_insert(Global::Broken);
        }
        for (i, item) in module.ast.items.iter().enumerate() {
            let (name, global) = match &item.kind {
                ItemKind::Let(b) => (&b.name, Global::Let(i)),
                ItemKind::Fn(f) => (
                    f.name.as_ref().expect("top-level fns are named"),
                    Global::Fn(i),
                ),
                ItemKind::Param { name, .. } => (name, Global::Param(i)),
                ItemKind::Type { name, .. } => (name, Global::Type(i)),
                ItemKind::Output { name, .. } => (name, Global::Output(i)),
                _ => continue,
            };
            // Types live in their own namespace; outputs are not names (only reported).
            let key: Rc<str> = match global {
                Global::Type(_) => format!("type {}", name.name).into(),
                Global::Output(_) => format!("output {}", name.name).into(),
                _ => name.name.clone(),
            };
            if let Some(first) = spans.get(&key) {
                self.errors.push(
                    Diagnostic::new(
                        "name::duplicate",
                        format!("`{}` is defined twice", name.name),
                    )
                    .label(file, name.span, "defined again here")
                    .label(file, *first, "first defined here")
                    .help("rename one of them"),
                );
                continue;
            }
            spans.insert(key.clone(), name.span);
            g.insert(key, global);
        }
        g
    }

    /// Runs `f` in the context of module `m`, with no locals.
    fn in_module<T>(&mut self, m: ModuleId, f: impl FnOnce(&mut Self) -> T) -> T {
        let saved_module = std::mem::replace(&mut self.module, m);
        let saved_locals = std::mem::take(&mut self.locals);
        let r = f(self);
        self.module = saved_module;
        self.locals = saved_locals;
        r
    }

    fn check_item(&mut self, m: ModuleId, item: &'p Item) {
        let root = m == self.program.root;
        match &item.kind {
            ItemKind::Let(b) => {
                self.global_value_ty(m, &b.name.name, b.name.span);
            }
            ItemKind::Fn(f) => {
                let name = f.name.as_ref().expect("named");
                self.global_value_ty(m, &name.name, name.span);
            }
            ItemKind::Type { name, .. } => {
                self.named_type(m, &name.name, name.span);
            }
            ItemKind::Param { name, .. } => {
                if !root {
                    let file = self.file();
                    self.error(
                        Diagnostic::new("name::param-outside-root", "`param` in an imported module")
                            .label(file, item.span, "params belong to the root file")
                            .message("Parameters are set on the command line for the environment as a whole.")
                            .help("make it a function parameter of this module and pass it from the root file"),
                    );
                }
                self.global_value_ty(m, &name.name, name.span);
            }
            ItemKind::Output { name, value } => {
                if !root {
                    let file = self.file();
                    self.error(
                        Diagnostic::new("name::output-outside-root", "`output` in an imported module")
                            .label(file, name.span, "outputs belong to the root file")
                            .help("return the value from a function and declare the output in the root file"),
                    );
                }
                let t = self.infer(value);
                if root {
                    self.outputs.insert(name.name.clone(), t);
                }
            }
            ItemKind::Assert(a) => self.assertion(a),
            ItemKind::Policy(p) => self.policy(p),
            ItemKind::DefaultTags(value) => {
                let first = self.items(m).iter().find_map(|it| match &it.kind {
                    ItemKind::DefaultTags(_) => Some(it.span),
                    _ => None,
                });
                if let Some(first) = first.filter(|f| *f != item.span) {
                    let file = self.file();
                    self.error(
                        Diagnostic::new("name::duplicate", "`default tags` is written twice")
                            .label(file, item.span, "written again here")
                            .label(file, first, "first written here")
                            .help("merge the two records into one `default tags`"),
                    );
                }
                let t = self.infer(value);
                self.expect_known(&t, value.span, "default tags");
                self.expect_ty(&t, &Ty::Dict(Rc::new(Ty::Str)), value.span);
            }
            ItemKind::Rollout(r) => {
                // Machines and amounts are read once the graph is lowered: known values.
                let t = self.infer(&r.targets);
                self.expect_known(&t, r.targets.span, "a rollout's machines");
                self.expect_ty(
                    &t,
                    &Ty::List(Rc::new(Ty::Node(NodeTy::Any))),
                    r.targets.span,
                );
                for o in &r.options {
                    let t = self.infer(&o.value);
                    self.expect_known(&t, o.value.span, "a rollout's option");
                }
            }
            ItemKind::Adopt(a) => {
                if !root {
                    let file = self.file();
                    self.error(
                        Diagnostic::new("name::adopt-outside-root", "`adopt` in an imported module")
                            .label(file, item.span, "adoptions belong to the environment's file")
                            .message("What an environment takes over is said where it is built: an imported module may be used by several environments.")
                            .help("move this line to the root file"),
                    );
                }
                if let Some(from) = &a.from {
                    let t = self.infer(from);
                    self.expect_known(&t, from.span, "`from`");
                }
            }
            // A test's lines are read by `envc test`, against the environment it names
            // (`compiler::testing`), not checked as part of this module.
            ItemKind::Import { .. } | ItemKind::Moved(_) | ItemKind::Test(_) | ItemKind::Error => {}
        }
    }

    /// A policy's clauses bind nodes of the graph (`nodes(…)` is valid only here); its
    /// condition is a bool known at check time, its message a string.
    fn policy(&mut self, p: &Policy) {
        // The parser made sure it starts with a `for`.
        let depth = self.locals.len();
        let saved = std::mem::replace(&mut self.in_policy, true);
        self.clauses(&p.clauses);
        let t = self.infer(&p.cond);
        self.expect_known(&t, p.cond.span, "a policy");
        self.expect_ty(&t, &Ty::Bool, p.cond.span);
        if let Some(msg) = &p.message {
            let t = self.infer(msg);
            self.expect_known(&t, msg.span, "a policy's message");
            self.expect_ty(&t, &Ty::Str, msg.span);
        }
        self.in_policy = saved;
        let end = p.message.as_ref().unwrap_or(&p.cond).span.end as usize;
        self.close_scope(depth, Span::new(p.name_span.start as usize, end));
    }

    /// `stack("…", defaults = { … })`: each default names an output of the other
    /// environment, with a known value of its type.
    fn stack_defaults(&mut self, stack: &crate::stack::StackRef, value: &Expr, ty: &Ty) {
        let file = self.file();
        self.expect_known(ty, value.span, "a stack reference's defaults");
        let (Some(outputs), Ty::Record(r)) = (&stack.outputs, ty.base()) else {
            return; // untyped (a reference back along a cycle), or reported
        };
        let keys = self
            .record_keys
            .get(&(file, value.span))
            .cloned()
            .unwrap_or_default();
        let at = |k: &str| {
            keys.iter()
                .find(|(n, _)| &**n == k)
                .map_or(value.span, |(_, s)| *s)
        };
        for (k, f) in &r.fields {
            match outputs.get(k) {
                Some(out) => self.expect_ty(&f.ty, &out.value_ty(), at(k)),
                None => {
                    let mut d = Diagnostic::new(
                        "type::unknown-field",
                        format!("`{}` has no output `{k}` to default", stack.path),
                    )
                    .label(file, at(k), "not one of its outputs");
                    if let Some(s) = did_you_mean(k, outputs.keys().map(|k| &**k)) {
                        d = d.help(s);
                    }
                    self.error(d);
                }
            }
        }
    }

    /// Reports `core.NAME` when NAME is an output of the referenced environment that
    /// cannot cross (a secret, a node…), saying why rather than that there is no such field.
    fn refused_output(&mut self, r: &crate::types::RecordTy, field: &Ident) -> Option<()> {
        let name = r.name.as_deref()?;
        let stack =
            (self.program.stacks.values()).find(|s| format!("stack(\"{}\")", s.path) == name)?;
        let why = stack.refused.get(&field.name)?;
        let d = Diagnostic::new(
            "type::stack-output",
            format!(
                "output `{}` of `{}` cannot be read from another environment",
                field.name, stack.path
            ),
        )
        .label(self.file(), field.span, "an output that does not cross")
        .message(format!(
            "What one environment reads of another is data recorded in that one's state: {why}."
        ))
        .help("output the data this environment needs instead: a name, an address, a list or record of them");
        self.error(d);
        Some(())
    }

    /// `nodes("vm")`: a list of the graph's nodes of that kind (`nodes()`: all of them).
    fn nodes_call(&mut self, call: &Expr, args: &[Arg]) -> Ty {
        let file = self.file();
        if !self.in_policy {
            self.error(nodes_placement_diagnostic(file, call.span));
            return Ty::list(Ty::Node(NodeTy::Any));
        }
        let literal = args.first().and_then(|a| match &a.value.kind {
            ExprKind::Str(parts) => match parts.as_slice() {
                [StrPart::Lit(s)] => Some((s.clone(), a.value.span)),
                [] => Some(("".into(), a.value.span)),
                _ => None,
            },
            _ => None,
        });
        match literal {
            Some((kind, span)) if !kind.is_empty() => match NodeKind::from_name(&kind) {
                Some(k) => Ty::list(Ty::Node(NodeTy::Kind(k))),
                None => {
                    self.error(unknown_kind_diagnostic(file, span, &kind));
                    Ty::list(Ty::Node(NodeTy::Any))
                }
            },
            _ => Ty::list(Ty::Node(NodeTy::Any)),
        }
    }

    fn assertion(&mut self, a: &Assertion) {
        let t = self.infer(&a.cond);
        self.expect_known(&t, a.cond.span, "an assertion");
        self.expect_ty(&t, &Ty::Bool, a.cond.span);
        if let Some(msg) = &a.message {
            let t = self.infer(msg);
            self.expect_ty(&t, &Ty::Str, msg.span);
        }
    }

    // ---- top-level values ---------------------------------------------------------------

    fn global_value_ty(&mut self, m: ModuleId, name: &Rc<str>, use_span: Span) -> Ty {
        let key = (m, name.clone());
        match self.value_memo.get(&key) {
            Some(Some(t)) => return t.clone(),
            Some(None) => return Ty::Unknown, // recursive: the evaluator reports real cycles
            None => {}
        }
        if self.depth >= MAX_BINDING_DEPTH {
            let file = self.file();
            self.error(binding_depth_diagnostic(file, use_span));
            return Ty::Unknown;
        }
        self.depth += 1;
        self.value_memo.insert(key.clone(), None);
        let ty = match self.globals[m].get(name).cloned() {
            Some(Global::Let(i)) => {
                let ItemKind::Let(b) = &self.items(m)[i].kind else {
                    unreachable!()
                };
                self.in_module(m, |c| c.binding(b))
            }
            Some(Global::Fn(i)) => {
                let ItemKind::Fn(f) = &self.items(m)[i].kind else {
                    unreachable!()
                };
                self.in_module(m, |c| c.fn_decl(f))
            }
            Some(Global::Param(i)) => {
                let ItemKind::Param { ty, default, .. } = &self.items(m)[i].kind else {
                    unreachable!()
                };
                self.in_module(m, |c| {
                    let t = c.resolve_type(ty);
                    if let Some(d) = default {
                        let dt = c.infer(d);
                        // A secret is named now and read at deploy: it may be a default.
                        if !matches!(t.base(), Ty::Secret) {
                            c.expect_known(&dt, d.span, "a parameter's default");
                        }
                        c.expect_ty(&dt, &t, d.span);
                    }
                    t
                })
            }
            Some(Global::Import(id)) => Ty::Module(id),
            _ => Ty::Unknown,
        };
        self.value_memo.insert(key, Some(ty.clone()));
        self.depth -= 1;
        ty
    }

    fn binding(&mut self, b: &Binding) -> Ty {
        let t = self.infer(&b.value);
        match &b.ty {
            Some(annot) => {
                let want = self.resolve_type(annot);
                self.expect_ty(&t, &want, b.value.span);
                if t.is_deferred() {
                    Ty::deferred(want)
                } else {
                    want
                }
            }
            None => t,
        }
    }

    fn fn_decl(&mut self, f: &FnDecl) -> Ty {
        // Parameters come into scope one by one: a default may use the ones before it.
        let depth = self.locals.len();
        let mut params = Vec::new();
        for p in &f.params {
            let annot = p.ty.as_ref().map(|t| self.resolve_type(t));
            let ty = match (&annot, &p.default) {
                (Some(a), Some(d)) => {
                    let dt = self.infer(d);
                    self.expect_ty(&dt, a, d.span);
                    a.clone()
                }
                (Some(a), None) => a.clone(),
                (None, Some(d)) => self.infer(d),
                (None, None) => Ty::Unknown,
            };
            self.locals
                .push((p.name.name.clone(), ty.clone(), p.name.span));
            params.push(ParamTy {
                name: p.name.name.clone(),
                ty,
                required: p.default.is_none(),
                known: false,
            });
        }
        let declared_ret = f.ret.as_ref().map(|t| self.resolve_type(t));
        let body_ty = self.infer(&f.body);
        self.close_scope(depth, f.body.span);
        let ret = match declared_ret {
            Some(r) => {
                self.expect_ty(&body_ty, &r, body_span(&f.body));
                r
            }
            None => body_ty,
        };
        Ty::Fn(Rc::new(FnTy { params, ret }))
    }

    // ---- types --------------------------------------------------------------------------

    fn named_type(&mut self, m: ModuleId, name: &Rc<str>, use_span: Span) -> Option<Ty> {
        let key = (m, name.clone());
        match self.type_memo.get(&key) {
            Some(Some(t)) => return Some(t.clone()),
            Some(None) => {
                let file = self.file();
                self.error(
                    Diagnostic::new("type::recursive", format!("type `{name}` refers to itself"))
                        .label(file, use_span, "used inside its own definition")
                        .help("a record type cannot contain itself; use a list of names or ids instead"),
                );
                return Some(Ty::Unknown);
            }
            None => {}
        }
        let Some(Global::Type(i)) = self.globals[m].get(&*format!("type {name}")).cloned() else {
            return None;
        };
        self.type_memo.insert(key.clone(), None);
        let ItemKind::Type { ty, .. } = &self.items(m)[i].kind else {
            unreachable!()
        };
        let resolved = self.in_module(m, |c| c.resolve_type(ty));
        let resolved = match resolved {
            Ty::Record(r) => Ty::Record(Rc::new(RecordTy {
                name: Some(name.clone()),
                fields: r.fields.clone(),
            })),
            t => t,
        };
        self.type_memo.insert(key, Some(resolved.clone()));
        Some(resolved)
    }

    pub fn resolve_type(&mut self, t: &TypeExpr) -> Ty {
        let ty = self.resolve_type_inner(t);
        self.table
            .insert((self.file(), t.span.start, t.span.end), ty.clone());
        ty
    }

    fn resolve_type_inner(&mut self, t: &TypeExpr) -> Ty {
        let file = self.file();
        match &t.kind {
            TypeExprKind::Error => Ty::Unknown,
            TypeExprKind::Name(path) if path.len() == 1 => {
                let n = &path[0];
                if let Some(ty) = self.named_type(self.module, &n.name, n.span) {
                    let module = self.module;
                    self.refer(
                        n.span,
                        Def::Type {
                            module,
                            name: n.name.clone(),
                        },
                    );
                    return ty;
                }
                if let Some(ty) = builtin_type(&n.name) {
                    return ty;
                }
                if n.name.as_ref() == "list" || n.name.as_ref() == "dict" {
                    self.error(
                        Diagnostic::new(
                            "type::missing-argument",
                            format!("`{}` needs an element type", n.name),
                        )
                        .label(file, n.span, "which elements?")
                        .help(format!("write `{}[str]`, `{}[int]`, …", n.name, n.name)),
                    );
                    return Ty::Unknown;
                }
                let user: Vec<String> = self.globals[self.module]
                    .keys()
                    .filter_map(|k| k.strip_prefix("type ").map(str::to_string))
                    .collect();
                let candidates = user
                    .iter()
                    .map(String::as_str)
                    .chain(BUILTIN_TYPE_NAMES.iter().copied());
                let mut d =
                    Diagnostic::new("name::unknown-type", format!("unknown type `{}`", n.name))
                        .label(file, n.span, "not a type");
                if let Some(s) = did_you_mean(&n.name, candidates) {
                    d = d.help(s);
                } else {
                    d = d.help("built-in types are int, str, bool, size, mode, path, list[T], dict[T], target, node and the node kinds; declare others with `type`");
                }
                self.error(d);
                Ty::Unknown
            }
            TypeExprKind::Name(path) => {
                // `module.Type`
                let first = &path[0];
                let Some(Global::Import(m)) = self.globals[self.module].get(&first.name).cloned()
                else {
                    self.error(
                        Diagnostic::new(
                            "name::unknown-module",
                            format!("no imported module `{}`", first.name),
                        )
                        .label(file, first.span, "not an import")
                        .help(format!(
                            "add `import \"std/{}\"` or `import \"./{}.env\"`",
                            first.name, first.name
                        )),
                    );
                    return Ty::Unknown;
                };
                let last = &path[path.len() - 1];
                self.refer(
                    first.span,
                    Def::Global {
                        module: self.module,
                        name: first.name.clone(),
                    },
                );
                match self.named_type(m, &last.name, last.span) {
                    Some(t) if path.len() == 2 => {
                        self.refer(
                            last.span,
                            Def::Type {
                                module: m,
                                name: last.name.clone(),
                            },
                        );
                        t
                    }
                    _ => {
                        let names: Vec<String> = self.globals[m]
                            .keys()
                            .filter_map(|k| k.strip_prefix("type ").map(str::to_string))
                            .collect();
                        let mut d = Diagnostic::new(
                            "name::unknown-type",
                            format!("module `{}` has no type `{}`", first.name, last.name),
                        )
                        .label(file, t.span, "not a type of that module");
                        if let Some(s) = did_you_mean(&last.name, names.iter().map(String::as_str))
                        {
                            d = d.help(s);
                        }
                        self.error(d);
                        Ty::Unknown
                    }
                }
            }
            TypeExprKind::Apply { name, arg } => {
                let inner = self.resolve_type(arg);
                match name.name.as_ref() {
                    "list" => Ty::list(inner),
                    "dict" => Ty::Dict(Rc::new(inner)),
                    other => {
                        let mut d = Diagnostic::new(
                            "type::not-generic",
                            format!("`{other}` takes no type argument"),
                        )
                        .label(
                            file,
                            name.span,
                            "only list[T] and dict[T] take one",
                        );
                        if let Some(s) = did_you_mean(other, ["list", "dict"]) {
                            d = d.help(s);
                        }
                        self.error(d);
                        Ty::Unknown
                    }
                }
            }
            TypeExprKind::Range {
                base,
                lo,
                hi,
                inclusive,
            } => {
                let b = self.resolve_type(base);
                if !matches!(b, Ty::Int | Ty::Size) {
                    self.error(
                        Diagnostic::new("type::bad-range", format!("`{b}` cannot have a range"))
                            .label(file, base.span, "only int and size take bounds")
                            .help("write `int(1..=65535)` or `size(1GiB..=64GiB)`"),
                    );
                    return Ty::Unknown;
                }
                let (Some(l), Some(h)) = (self.const_bound(lo, &b), self.const_bound(hi, &b))
                else {
                    return b;
                };
                let h = if *inclusive { h } else { h - 1 };
                if l > h {
                    self.error(
                        Diagnostic::new("type::empty-range", "this range is empty")
                            .label(
                                file,
                                lo.span.to(hi.span),
                                format!("no value is at least {l} and at most {h}"),
                            )
                            .help("put the lower bound first"),
                    );
                }
                Ty::Ranged(Rc::new(b), l, h)
            }
            TypeExprKind::Record(fields) => {
                let mut out = BTreeMap::new();
                for f in fields {
                    let ty = self.resolve_type(&f.ty);
                    let default = f.default.as_ref().map(|d| {
                        // Defaults are evaluated in the declaring module, where local
                        // variables do not exist: check them the same way.
                        let saved = std::mem::take(&mut self.locals);
                        let dt = self.infer(d);
                        self.locals = saved;
                        self.expect_known(&dt, d.span, "a default value");
                        self.expect_ty(&dt, &ty, d.span);
                        (self.module, Rc::new(d.clone()))
                    });
                    out.insert(f.name.name.clone(), FieldTy { ty, default });
                }
                Ty::Record(Rc::new(RecordTy {
                    name: None,
                    fields: out,
                }))
            }
        }
    }

    /// A literal bound of a range type, checked against the base type (`int` or `size`).
    fn const_bound(&mut self, e: &Expr, base: &Ty) -> Option<i128> {
        let file = self.file();
        let (n, is_size) = match &e.kind {
            ExprKind::Int(n) => (*n as i128, false),
            ExprKind::Size(n) => (*n as i128, true),
            ExprKind::Unary(UnaryOp::Neg, x) => match &x.kind {
                ExprKind::Int(n) => (-(*n as i128), false),
                ExprKind::Size(_) => {
                    self.error(
                        Diagnostic::new("type::bad-range", "a size cannot be negative")
                            .label(file, e.span, "a negative size")
                            .help("size bounds are 0B or more"),
                    );
                    return None;
                }
                _ => return self.const_bound(x, base).map(|n| -n),
            },
            ExprKind::Error => return None,
            _ => {
                self.error(
                    Diagnostic::new("type::bound-not-literal", "a range bound must be a number")
                        .label(file, e.span, "not a literal number")
                        .help("write the bound out, e.g. `int(1..=65535)`"),
                );
                return None;
            }
        };
        let want_size = matches!(base, Ty::Size);
        if is_size != want_size {
            let (what, hint) = if want_size {
                (
                    "a size range needs size bounds",
                    "give units: `size(1GiB..=8GiB)`",
                )
            } else {
                (
                    "an int range needs int bounds",
                    "drop the unit: `int(1..=65535)`",
                )
            };
            self.error(
                Diagnostic::new("type::bad-range", what)
                    .label(
                        file,
                        e.span,
                        if is_size {
                            "this is a size"
                        } else {
                            "this is an int"
                        },
                    )
                    .help(hint),
            );
            return None;
        }
        Some(n)
    }

    // ---- expressions --------------------------------------------------------------------

    fn expect_ty(&mut self, actual: &Ty, expected: &Ty, span: Span) {
        if let Err(m) = assignable(actual, expected) {
            let file = self.file();
            // An unknown field is its key, in the record literal (this one or one inside it)
            // that wrote it.
            let span = match &m {
                Mismatch::UnknownField { field, .. } => self
                    .record_keys
                    .iter()
                    .filter(|((f, s), _)| *f == file && s.start >= span.start && s.end <= span.end)
                    .flat_map(|(_, keys)| keys.iter())
                    .filter(|(k, _)| k == field)
                    .map(|(_, s)| *s)
                    .min_by_key(|s| s.start)
                    .unwrap_or(span),
                _ => span,
            };
            let quoted = match &m {
                Mismatch::Types { found, .. } if found == "str" => {
                    let text = &self.program.sources.get(file).text;
                    text.get(span.range())
                        .and_then(|t| unquoted_literal(t, expected))
                }
                _ => None,
            };
            let listed = match &m {
                Mismatch::Types { expected, found }
                    if found == "str" && expected == "list[str]" =>
                {
                    let text = &self.program.sources.get(file).text;
                    text.get(span.range()).and_then(as_list)
                }
                _ => None,
            };
            let mut d = mismatch_diagnostic(m, file, span);
            if let Some(help) = listed {
                d = d.help(help);
            }
            if let Some(bare) = quoted {
                d = d.help(format!(
                    "drop the quotes: a {} is written `{bare}`, not `\"{bare}\"`",
                    expected.base()
                ));
            }
            self.error(d);
        }
    }

    fn expect_known(&mut self, t: &Ty, span: Span, what: &str) {
        if t.is_deferred() {
            let file = self.file();
            self.error(deferred_diagnostic(file, span, what, t));
        }
    }

    fn lookup_local(&self, name: &str) -> Option<(&Ty, Span)> {
        self.locals
            .iter()
            .rev()
            .find(|(n, _, _)| &**n == name)
            .map(|(_, t, s)| (t, *s))
    }

    fn name_ty(&mut self, name: &Rc<str>, span: Span) -> Ty {
        if let Some((t, def)) = self.lookup_local(name) {
            let t = t.clone();
            let file = self.file();
            self.refer(span, Def::Local { file, span: def });
            return t;
        }
        if self.globals[self.module].contains_key(name) {
            let module = self.module;
            self.refer(
                span,
                Def::Global {
                    module,
                    name: name.clone(),
                },
            );
            return self.global_value_ty(self.module, name, span);
        }
        if let Some(b) = builtins::lookup(name) {
            self.refer(span, Def::Builtin(b));
            return Ty::Fn(Rc::new(b.signature()));
        }
        let file = self.file();
        let builtin_names: Vec<&str> = builtins::names().collect();
        let candidates = (self.locals.iter().map(|(n, _, _)| &**n))
            .chain(
                self.globals[self.module]
                    .keys()
                    .filter(|k| !k.contains(' '))
                    .map(|k| &**k),
            )
            .chain(builtin_names.iter().copied());
        let mut d = Diagnostic::new("name::unknown", format!("unknown name `{name}`")).label(
            file,
            span,
            "not defined",
        );
        let names = self.locals.len() + self.globals[self.module].len() + builtin_names.len();
        if self.errors.len() >= envc_lang::diag::SHOWN || self.compared + names > SUGGESTION_BUDGET
        {
            // Past what is shown, a suggestion (a pass over every name) is not worth its
            // cost: the error is counted, not read. And a generated module of a million
            // names with a hundred unknown ones would make even those cost seconds.
        } else if crate::stdlib::get(&format!("std/{name}")).is_some() {
            // `files.template(…)` without the import: the module, not `file`, was meant.
            d = d.help(format!(
                "`{name}` is a module of the standard library: add `import \"std/{name}\"`"
            ));
        } else if let Some(s) = {
            self.compared += names;
            did_you_mean(name, candidates)
        } {
            d = d.help(s);
        } else if let Some(b) = builtins::alias_of(name) {
            d = d.help(format!("did you mean `{b}`?"));
        } else if self.globals[self.module].contains_key(&*format!("type {name}")) {
            d = d.help(format!(
                "`{name}` is a type; annotate a value with it: `let x: {name} = {{ … }}`"
            ));
        }
        self.error(d);
        Ty::Unknown
    }

    pub fn infer(&mut self, e: &Expr) -> Ty {
        let t = self.infer_kind(e);
        if let Some(ix) = &mut self.index {
            ix.exprs
                .push((self.program.modules[self.module].file, e.span, t.clone()));
        }
        t
    }

    fn infer_kind(&mut self, e: &Expr) -> Ty {
        let file = self.file();
        match &e.kind {
            ExprKind::Int(_) => Ty::Int,
            ExprKind::Size(_) => Ty::Size,
            ExprKind::Mode(_) => Ty::Mode,
            ExprKind::Bool(_) => Ty::Bool,
            ExprKind::Error => Ty::Unknown,
            ExprKind::Str(parts) => {
                let mut part_tys = Vec::new();
                for p in parts {
                    if let StrPart::Interp(x) = p {
                        let t = self.infer(x);
                        part_tys.push(t.clone());
                        if !matches!(
                            t.base(),
                            Ty::Unknown
                                | Ty::Int
                                | Ty::Str
                                | Ty::Secret
                                | Ty::Bool
                                | Ty::Size
                                | Ty::Mode
                        ) {
                            let help = match t.base() {
                                Ty::List(_) => "join the elements: `${join(xs, \",\")}`",
                                Ty::Node(_) => {
                                    "interpolate one of its fields, such as `.name` or `.address`"
                                }
                                _ => "convert it to text first, e.g. with `to_json(…)`",
                            };
                            self.error(
                                Diagnostic::new(
                                    "type::not-interpolable",
                                    format!("cannot put a {t} into a string"),
                                )
                                .label(file, x.span, format!("this is {t}"))
                                .help(help),
                            );
                        }
                    }
                }
                text_of(&part_tys)
            }
            ExprKind::Name(n) => self.name_ty(n, e.span),
            ExprKind::Paren(x) => self.infer(x),
            ExprKind::List(items) => {
                let mut acc: Option<Ty> = None;
                for x in items {
                    let t = self.infer(x);
                    acc = Some(match acc {
                        None => t,
                        Some(a) => match join(&a, &t) {
                            Some(j) => j,
                            None => {
                                self.error(
                                    Diagnostic::new("type::mixed-list", "list elements have different types")
                                        .label(file, x.span, format!("this is {t}"))
                                        .label(file, items[0].span, format!("the list holds {a}"))
                                        .help("a list holds one type of element; use a record to group different things"),
                                );
                                a
                            }
                        },
                    });
                }
                Ty::list(acc.unwrap_or(Ty::Unknown))
            }
            ExprKind::Record(fields) => {
                self.record_keys.insert(
                    (file, e.span),
                    fields
                        .iter()
                        .map(|f| (f.name.name.clone(), f.name.span))
                        .collect(),
                );
                let mut out = BTreeMap::new();
                for f in fields {
                    let ty = self.infer(&f.value);
                    out.insert(f.name.name.clone(), FieldTy { ty, default: None });
                }
                Ty::Record(Rc::new(RecordTy {
                    name: None,
                    fields: out,
                }))
            }
            ExprKind::ListComp { clauses, body } => {
                let depth = self.locals.len();
                self.clauses(clauses);
                let t = self.infer(body);
                self.close_scope(depth, e.span);
                Ty::list(t)
            }
            ExprKind::RecordComp {
                clauses,
                key,
                value,
            } => {
                let depth = self.locals.len();
                self.clauses(clauses);
                let kt = self.infer(key);
                self.expect_known(&kt, key.span, "a record key");
                self.expect_ty(&kt, &Ty::Str, key.span);
                let vt = self.infer(value);
                self.close_scope(depth, e.span);
                Ty::Dict(Rc::new(vt))
            }
            ExprKind::Field(base, field) => {
                let bt = self.infer(base);
                self.field_ty(&bt, field, base.span)
            }
            ExprKind::Index(base, index) => {
                let bt = self.infer(base);
                let it = self.infer(index);
                self.expect_known(&it, index.span, "an index");
                match bt.base() {
                    Ty::List(t) => {
                        self.expect_ty(&it, &Ty::Int, index.span);
                        keep_deferred(&bt, (**t).clone())
                    }
                    Ty::Dict(t) => {
                        self.expect_ty(&it, &Ty::Str, index.span);
                        keep_deferred(&bt, (**t).clone())
                    }
                    Ty::Record(_) => {
                        self.expect_ty(&it, &Ty::Str, index.span);
                        keep_deferred(&bt, Ty::Unknown)
                    }
                    Ty::Unknown => Ty::Unknown,
                    _ => {
                        self.error(
                            Diagnostic::new(
                                "type::not-indexable",
                                format!("cannot index into {bt}"),
                            )
                            .label(file, base.span, format!("this is {bt}"))
                            .help("only lists (by position) and records (by key) can be indexed"),
                        );
                        Ty::Unknown
                    }
                }
            }
            ExprKind::Call { callee, args } => self.call(e, callee, args),
            ExprKind::Unary(op, x) => {
                let t = self.infer(x);
                self.expect_known(&t, x.span, "an operator");
                let want = match op {
                    UnaryOp::Neg => Ty::Int,
                    UnaryOp::Not => Ty::Bool,
                };
                self.expect_ty(&t, &want, x.span);
                want
            }
            ExprKind::Binary(op, l, r) => self.binary(*op, l, r),
            ExprKind::Range { lo, hi, .. } => {
                for b in [lo, hi] {
                    let t = self.infer(b);
                    self.expect_known(&t, b.span, "a range bound");
                    self.expect_ty(&t, &Ty::Int, b.span);
                }
                Ty::list(Ty::Int)
            }
            ExprKind::If { cond, then, else_ } => {
                let ct = self.infer(cond);
                self.expect_known(&ct, cond.span, "an `if` condition");
                self.expect_ty(&ct, &Ty::Bool, cond.span);
                let a = self.infer(then);
                let b = self.infer(else_);
                match join(&a, &b) {
                    Some(t) => t,
                    None => {
                        self.error(
                            Diagnostic::new(
                                "type::branch-mismatch",
                                "`if` and `else` give different types",
                            )
                            .label(file, body_span(then), format!("this is {a}"))
                            .label(file, body_span(else_), format!("this is {b}"))
                            .help("both branches must give the same type of value"),
                        );
                        a
                    }
                }
            }
            ExprKind::Block { stmts, value } => {
                let depth = self.locals.len();
                for s in stmts {
                    match s {
                        Stmt::Let(b) => {
                            let t = self.binding(b);
                            self.locals.push((b.name.name.clone(), t, b.name.span));
                        }
                        Stmt::Assert(a) => self.assertion(a),
                    }
                }
                let t = self.infer(value);
                self.close_scope(depth, e.span);
                t
            }
            ExprKind::Lambda(f) => self.fn_decl(f),
        }
    }

    fn clauses(&mut self, clauses: &[Clause]) {
        let file = self.file();
        for c in clauses {
            match c {
                Clause::For {
                    first,
                    second,
                    iter,
                } => {
                    let t = self.infer(iter);
                    self.expect_known(&t, iter.span, "a `for` loop");
                    let (a, b) = match t.base() {
                        Ty::List(el) => (Ty::Int, (**el).clone()),
                        Ty::Dict(v) => (Ty::Str, (**v).clone()),
                        Ty::Record(r) => {
                            let v = r
                                .fields
                                .values()
                                .map(|f| f.ty.clone())
                                .reduce(|a, b| join(&a, &b).unwrap_or(Ty::Unknown));
                            (Ty::Str, v.unwrap_or(Ty::Unknown))
                        }
                        Ty::Unknown => (Ty::Unknown, Ty::Unknown),
                        _ => {
                            self.error(
                                Diagnostic::new(
                                    "type::not-iterable",
                                    format!("cannot loop over {t}"),
                                )
                                .label(file, iter.span, format!("this is {t}"))
                                .help("loop over a list, a range such as `0..3`, or a record"),
                            );
                            (Ty::Unknown, Ty::Unknown)
                        }
                    };
                    match second {
                        // `for x in list` binds the element; `for k in record` binds the key.
                        None => {
                            let single = if matches!(t.base(), Ty::List(_)) {
                                b
                            } else {
                                a
                            };
                            self.locals.push((first.name.clone(), single, first.span));
                        }
                        Some(s) => {
                            self.locals.push((first.name.clone(), a, first.span));
                            self.locals.push((s.name.clone(), b, s.span));
                        }
                    }
                }
                Clause::If(cond) => {
                    let t = self.infer(cond);
                    self.expect_known(&t, cond.span, "a filter");
                    self.expect_ty(&t, &Ty::Bool, cond.span);
                }
            }
        }
    }

    fn field_ty(&mut self, bt: &Ty, field: &Ident, base_span: Span) -> Ty {
        let file = self.file();
        let unknown_field = |c: &mut Self, what: String, names: Vec<String>| {
            let mut d = Diagnostic::new(
                "type::unknown-field",
                format!("{what} has no field `{}`", field.name),
            )
            .label(c.file(), field.span, "unknown field");
            d = d.help(
                did_you_mean(&field.name, names.iter().map(String::as_str)).unwrap_or_else(|| {
                    if names.is_empty() {
                        "it has no fields".to_string()
                    } else {
                        format!("its fields are: {}", names.join(", "))
                    }
                }),
            );
            c.error(d);
            Ty::Unknown
        };
        match bt.base() {
            Ty::Unknown => Ty::Unknown,
            Ty::Record(r) => match r.fields.get(&field.name) {
                Some(f) => keep_deferred(bt, f.ty.clone()),
                None if self.refused_output(r, field).is_some() => Ty::Unknown,
                None => unknown_field(
                    self,
                    format!("`{bt}`"),
                    r.fields.keys().map(|k| k.to_string()).collect(),
                ),
            },
            Ty::Dict(t) => keep_deferred(bt, (**t).clone()),
            Ty::Node(NodeTy::Kind(_)) if field.name.as_ref() == "name" => Ty::Str,
            Ty::Node(NodeTy::Kind(k)) => match builtins::schema(*k).field_ty(&field.name) {
                Some(t) => t,
                None if builtins::schema(*k).open_outputs => Ty::deferred(Ty::Str),
                None => unknown_field(
                    self,
                    format!("a `{}` node", k.name()),
                    builtins::schema(*k)
                        .field_names()
                        .iter()
                        .map(|s| s.to_string())
                        .collect(),
                ),
            },
            Ty::Node(_) => {
                if field.name.as_ref() == "name" {
                    Ty::Str
                } else {
                    Ty::Unknown
                }
            }
            Ty::Module(m) => {
                let m = *m;
                if self.globals[m].contains_key(&field.name) {
                    self.refer(
                        field.span,
                        Def::Global {
                            module: m,
                            name: field.name.clone(),
                        },
                    );
                    return self.global_value_ty(m, &field.name, field.span);
                }
                let path = self.program.modules[m].path.clone();
                let names: Vec<String> = self.globals[m]
                    .keys()
                    .filter(|k| !k.contains(' '))
                    .map(|k| k.to_string())
                    .collect();
                unknown_field(self, format!("module `{path}`"), names)
            }
            _ => {
                self.error(
                    Diagnostic::new("type::no-fields", format!("{bt} has no fields"))
                        .label(file, base_span, format!("this is {bt}"))
                        .help("only records, nodes and modules have fields"),
                );
                Ty::Unknown
            }
        }
    }

    fn binary(&mut self, op: BinaryOp, l: &Expr, r: &Expr) -> Ty {
        use BinaryOp::*;
        let file = self.file();
        let lt = self.infer(l);
        let rt = self.infer(r);
        if op == Add
            && matches!(lt.base(), Ty::Str | Ty::Secret)
            && matches!(rt.base(), Ty::Str | Ty::Secret)
        {
            // Concatenation is interpolation: it keeps deferred values deferred.
            return text_of(&[lt, rt]);
        }
        self.expect_known(&lt, l.span, "an operator");
        self.expect_known(&rt, r.span, "an operator");
        if lt.is_unknown() || rt.is_unknown() {
            // `x * 2` with `x` unknown may be an int or a size: only the evaluator knows.
            return match op {
                Or | And | Eq | NotEq | Lt | Le | Gt | Ge => Ty::Bool,
                _ => Ty::Unknown,
            };
        }
        let (a, b) = (lt.base().clone(), rt.base().clone());
        let result = match (op, &a, &b) {
            (Or | And, Ty::Bool, Ty::Bool) => Some(Ty::Bool),
            (Eq | NotEq, _, _) if join(&a, &b).is_some() => Some(Ty::Bool),
            (Lt | Le | Gt | Ge, Ty::Int, Ty::Int)
            | (Lt | Le | Gt | Ge, Ty::Size, Ty::Size)
            | (Lt | Le | Gt | Ge, Ty::Str, Ty::Str) => Some(Ty::Bool),
            (Add | Sub | Mul | Div | Rem, Ty::Int, Ty::Int) => Some(Ty::Int),
            (Add | Sub, Ty::Size, Ty::Size) => Some(Ty::Size),
            (Mul, Ty::Size, Ty::Int) | (Mul, Ty::Int, Ty::Size) | (Div, Ty::Size, Ty::Int) => {
                Some(Ty::Size)
            }
            (Div, Ty::Size, Ty::Size) => Some(Ty::Int),
            (Add, Ty::List(x), Ty::List(y)) => join(x, y).map(Ty::list),
            _ => None,
        };
        result.unwrap_or_else(|| {
            let help = match (op, &a, &b) {
                (Add, Ty::Str, _) | (Add, _, Ty::Str) => "to build a string, interpolate: \"${a}${b}\"".to_string(),
                (Or | And, _, _) => "`and`/`or` take booleans; compare first, e.g. `x > 0 and y > 0`".to_string(),
                _ => format!("`{}` works on ints, sizes (+, -, * int, / int), strings (+, comparisons) and lists (+)", op.symbol()),
            };
            self.error(
                Diagnostic::new("type::bad-operands", format!("cannot apply `{}` to {a} and {b}", op.symbol()))
                    .label(file, l.span, format!("this is {a}"))
                    .label(file, r.span, format!("this is {b}"))
                    .help(help),
            );
            Ty::Unknown
        })
    }

    fn call(&mut self, call: &Expr, callee: &Expr, args: &[Arg]) -> Ty {
        let file = self.file();
        let builtin = match &callee.kind {
            ExprKind::Name(n)
                if self.lookup_local(n).is_none() && !self.globals[self.module].contains_key(n) =>
            {
                builtins::lookup(n)
            }
            _ => None,
        };
        let ct = self.infer(callee);
        self.expect_known(&ct, callee.span, "a function call");
        let arg_tys: Vec<Ty> = args.iter().map(|a| self.infer(&a.value)).collect();
        let sig = match ct.base() {
            Ty::Fn(f) => f.clone(),
            Ty::Unknown => return Ty::Unknown,
            other => {
                self.error(
                    Diagnostic::new("type::not-callable", format!("{other} is not a function"))
                        .label(file, callee.span, format!("this is {other}"))
                        .help("only functions and node constructors can be called"),
                );
                return Ty::Unknown;
            }
        };
        let name = match &callee.kind {
            ExprKind::Name(n) => n.to_string(),
            ExprKind::Field(_, f) => f.name.to_string(),
            _ => "this function".to_string(),
        };
        let names: Vec<(Rc<str>, bool)> = sig
            .params
            .iter()
            .map(|p| (p.name.clone(), p.required))
            .collect();
        let (slots, errors) = bind_args(&name, &names, args, file, call.span);
        self.errors.extend(errors);
        for (p, slot) in sig.params.iter().zip(&slots) {
            let Some(i) = slot else { continue };
            let (t, span) = (&arg_tys[*i], args[*i].value.span);
            if p.known {
                self.expect_known(t, span, "a node's name");
            }
            self.expect_ty(t, &p.ty, span);
        }
        let arg = |i: usize| {
            slots
                .get(i)
                .copied()
                .flatten()
                .map(|a| arg_tys[a].clone())
                .unwrap_or(Ty::Unknown)
        };
        match builtin {
            Some(Builtin::Nodes) => self.nodes_call(call, args),
            Some(Builtin::Node(NodeKind::Stack)) => {
                match self.program.stacks.get(&(file, call.span)) {
                    Some(s) => {
                        let defaults = args
                            .iter()
                            .zip(&arg_tys)
                            .find(|(a, _)| a.name.as_ref().is_some_and(|n| &*n.name == "defaults"));
                        if let Some((a, t)) = defaults {
                            self.stack_defaults(s, &a.value, t);
                        }
                        crate::stack::record_ty(s)
                    }
                    None => {
                        self.error(
                        Diagnostic::new("type::stack-placement", "a stack reference must be a top-level `let` of a file name")
                            .label(file, call.span, "not `let NAME = stack(\"FILE\")` at the top level")
                            .message("Which environments this one reads is fixed before anything is evaluated, so that `envc check` can type their outputs.")
                            .help("bind it once at the top level, `let core = stack(\"core.env\")`, and use `core.NAME` where it is needed"),
                    );
                        Ty::Unknown
                    }
                }
            }
            Some(Builtin::Sort) => arg(0),
            // The field's type, which the default shares.
            Some(Builtin::Get) => match arg(0).base() {
                Ty::Dict(t) => (**t).clone(),
                _ => arg(2),
            },
            Some(Builtin::Min | Builtin::Max) => match arg(0).base() {
                Ty::List(t) => (**t).clone(),
                _ => Ty::Unknown,
            },
            Some(Builtin::Values) => match arg(0).base() {
                Ty::Dict(t) => Ty::list((**t).clone()),
                _ => Ty::list(Ty::Unknown),
            },
            Some(Builtin::Join) => match arg(0).base() {
                Ty::List(t) => text_of(&[(**t).clone(), arg(0)]),
                _ => text_of(&[arg(0)]),
            },
            Some(Builtin::Merge) => match (arg(0).base(), arg(1).base()) {
                (Ty::Record(a), Ty::Record(b)) => {
                    let mut fields = a.fields.clone();
                    fields.extend(b.fields.iter().map(|(k, f)| (k.clone(), f.clone())));
                    Ty::Record(Rc::new(RecordTy { name: None, fields }))
                }
                _ => Ty::Unknown,
            },
            Some(Builtin::ToStr) => text_of(&[arg(0)]),
            _ => sig.ret.clone(),
        }
    }
}

fn keep_deferred(outer: &Ty, inner: Ty) -> Ty {
    if outer.is_deferred() {
        Ty::deferred(inner)
    } else {
        inner
    }
}

/// Where to point at the value of a block: its last expression.
pub fn body_span(e: &Expr) -> Span {
    match &e.kind {
        ExprKind::Block { value, .. } => body_span(value),
        _ => e.span,
    }
}

/// `"2GiB"` where a size is wanted: the text between the quotes, when it is a literal of
/// the wanted type (a size, number, mode or bool) and the string holds nothing else.
fn unquoted_literal<'t>(text: &'t str, expected: &Ty) -> Option<&'t str> {
    let inner = text.strip_prefix('"')?.strip_suffix('"')?;
    if inner.is_empty() || inner.contains(['"', '\\', '$']) {
        return None;
    }
    let (e, errs) = envc_lang::parse_expr(inner, 0);
    let fits = matches!(
        (&e.kind, expected.base()),
        (ExprKind::Size(_), Ty::Size)
            | (ExprKind::Int(_), Ty::Int)
            | (ExprKind::Mode(_), Ty::Mode)
            | (ExprKind::Bool(_), Ty::Bool)
    );
    (errs.is_empty() && fits).then_some(inner)
}

/// `"test -e /x"` where a list of strings is wanted (a guard, an `undo`, `argv`): the list
/// it was likely meant as.
fn as_list(text: &str) -> Option<String> {
    let inner = text.strip_prefix('"')?.strip_suffix('"')?;
    if inner.contains(['"', '\\', '$']) {
        return None;
    }
    let words: Vec<String> = inner
        .split_whitespace()
        .map(|w| format!("\"{w}\""))
        .collect();
    Some(match words.len() {
        0 => return None,
        1 => format!("give a list: `[{}]`", words[0]),
        _ => format!(
            "a command is a list, the program and its arguments, run with no shell: `[{}]` (for a shell: `[\"sh\", \"-c\", \"{inner}\"]`)",
            words.join(", ")
        ),
    })
}

pub fn mismatch_diagnostic(m: Mismatch, file: FileId, span: Span) -> Diagnostic {
    match m {
        Mismatch::Types { expected, found } => {
            let mut d = Diagnostic::new(
                "type::mismatch",
                format!("expected {expected}, found {found}"),
            )
            .label(file, span, format!("this is {found}"));
            if expected.starts_with("path") && found == "str" {
                d = d
                    .help("project files are named with `path(\"…\")`, which hashes their content");
            } else if expected.starts_with("mode") && found == "int" {
                d = d.help("write file modes in octal: 0o644");
            } else if expected.starts_with("size") && found == "int" {
                d = d.help("give a unit: 512MiB, 2GiB");
            } else if expected == "secret" {
                d = d.help("a secret is read by envc at deploy, never written in the source: `secret(\"NAME\")`, with the value set by `envc secret set FILE NAME`");
            }
            d
        }
        Mismatch::MissingField { field, record } => Diagnostic::new(
            "type::missing-field",
            format!("missing field `{field}` of `{record}`"),
        )
        .label(file, span, format!("has no `{field}`"))
        .help(format!("add `{field} = …`")),
        Mismatch::UnknownField {
            field,
            record,
            suggestion,
        } => {
            let d = Diagnostic::new(
                "type::unknown-field",
                format!("`{record}` has no field `{field}`"),
            )
            .label(
                file,
                span,
                format!("`{field}` is not a field of `{record}`"),
            );
            match suggestion {
                Some(s) => d.help(s),
                None => d.help(format!(
                    "remove `{field}`, or add it to the type `{record}`"
                )),
            }
        }
    }
}

pub fn deferred_diagnostic(file: FileId, span: Span, what: &str, t: &Ty) -> Diagnostic {
    Diagnostic::new("type::deferred", format!("{what} needs a value known before deploy"))
        .label(file, span, format!("this is {t}: known only after deploy"))
        .message(DEFERRED_MESSAGE)
        .help("decide with something known now (a param, a literal); pass deferred values to node attributes or template vars")
}

/// `nodes(…)` where no graph is known yet: outside a policy.
pub fn nodes_placement_diagnostic(file: FileId, span: Span) -> Diagnostic {
    Diagnostic::new("type::nodes-placement", "`nodes(…)` is read only by a policy")
        .label(file, span, "outside a `policy`")
        .message("The graph is known once the whole environment is evaluated, so only a policy, checked after that, can range over its nodes.")
        .help("write the rule as `policy \"NAME\": for n in nodes(\"vm\") => …`")
}

/// `nodes("vms")`: the checker's, for a literal kind, and the evaluator's, for a computed
/// one.
pub fn unknown_kind_diagnostic(file: FileId, span: Span, kind: &str) -> Diagnostic {
    let kinds = || NodeKind::ALL.iter().map(|k| k.name());
    Diagnostic::new("type::unknown-kind", format!("no node kind `{kind}`"))
        .label(file, span, "not a kind of node")
        .help(did_you_mean(kind, kinds()).unwrap_or_else(|| {
            format!("the kinds are: {}", kinds().collect::<Vec<_>>().join(", "))
        }))
}

pub fn binding_depth_diagnostic(file: FileId, span: Span) -> Diagnostic {
    Diagnostic::new("name::too-deep", "bindings depend on each other too deeply")
        .label(file, span, format!("more than {MAX_BINDING_DEPTH} top-level bindings deep"))
        .help("build long sequences with a comprehension over a range instead of one binding per element")
}

/// The type of a string built from values of these types (an interpolation, `+`, `join`):
/// secret if any part is, deferred if any part is, else a plain string.
fn text_of(parts: &[Ty]) -> Ty {
    if parts.iter().any(|t| matches!(t.base(), Ty::Secret)) {
        Ty::deferred(Ty::Secret)
    } else if parts.iter().any(Ty::is_deferred) {
        Ty::deferred(Ty::Str)
    } else {
        Ty::Str
    }
}
