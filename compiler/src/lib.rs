//! The envc compiler: from a root `.env` file (read through a `SourceLoader`) to a
//! derivation graph whose node ids are blake3 hashes of canonical encodings.
//!
//! ```text
//! load (imports, parse) → check (names, types) → eval (values, nodes) → lower (graph)
//! ```
//! Pure and deterministic: the same sources, project files and parameters give the same
//! graph on any machine.

pub mod adopt;
pub mod args;
pub mod builtins;
pub mod check;
pub mod derivation;
pub mod eval;
pub mod graph;
pub mod id;
mod library;
pub mod manifest;
pub mod moved;
mod names;
pub mod network;
pub mod program;
pub mod rollout;
pub mod size;
pub mod source;
pub mod stack;
pub mod stack_load;
mod stand_in;
pub mod stdlib;
mod stop;
pub mod testing;

/// The pin codec lives with the other identities, below the compiler (the lockfile crate
/// uses it without the language).
pub use envc_ids::pin;
/// The Kubernetes API version `manifest`s are checked against (pinned as `tool:kubernetes`).
pub use envc_ids::KUBERNETES_VERSION;
pub mod types;
pub mod value;

use std::collections::BTreeMap;

use envc_lang::ast::{ExprKind, ItemKind, StrPart};
use envc_lang::{Diagnostic, FileId, Span};

pub use eval::Limits;
pub use graph::Graph;
pub use id::DerivationId;
pub use program::Program;
pub use source::{
    LoadError, MemoryLoader, PolicyPack, ProjectRoot, RootFoundBy, SourceLoader, SourceMap,
};

#[derive(Default)]
pub struct CompileOptions {
    /// `--set name=value`, as given on the command line.
    pub params: BTreeMap<String, String>,
    /// Lockfile pins by key (`package:hello` → its value): each node carries, and is
    /// identified by, the pins it uses.
    pub pins: BTreeMap<pin::PinKey, String>,
    pub limits: Limits,
    /// Hosts replaced by stand-ins (`envc verify`'s lab), by host name: the host node and
    /// everything that reads its address see the stand-in, as if the source named it.
    pub stand_ins: BTreeMap<String, StandIn>,
    /// Policy packs whose policies judge the graph too (`--policy DIR`).
    pub policy_packs: Vec<PolicyPack>,
}

pub use stand_in::StandIn;

pub struct Compiled {
    /// Every source read, for rendering diagnostics.
    pub sources: SourceMap,
    pub graph: Option<Graph>,
    pub diagnostics: Vec<Diagnostic>,
    /// What is likely a mistake but not an error (`network::warnings`): only for a graph.
    pub warnings: Vec<Diagnostic>,
}

/// Compiles `root` (a path relative to the loader's project directory).
pub fn compile(root: &str, loader: &dyn SourceLoader, options: &CompileOptions) -> Compiled {
    let a = run(root, loader, options, false);
    Compiled {
        sources: a.program.sources,
        warnings: a.warnings,
        graph: a.graph,
        diagnostics: a.diagnostics,
    }
}

/// Everything an editor asks about a root file: the program as loaded, what the checker
/// found (with its [`check::Index`]), the same diagnostics as [`compile`], and, when the
/// file evaluates, its graph and the root's top-level values.
pub struct Analysis {
    pub program: Program,
    pub checked: check::Checked,
    pub diagnostics: Vec<Diagnostic>,
    /// As [`Compiled::warnings`].
    pub warnings: Vec<Diagnostic>,
    pub graph: Option<Graph>,
    pub bindings: Vec<(std::rc::Rc<str>, value::Value)>,
}

/// [`compile`], keeping what it found on the way (the language server's view).
pub fn analyze(root: &str, loader: &dyn SourceLoader, options: &CompileOptions) -> Analysis {
    run(root, loader, options, true)
}

fn run(root: &str, loader: &dyn SourceLoader, options: &CompileOptions, indexed: bool) -> Analysis {
    let mut program = program::load_with_packs(root, loader, &options.policy_packs);
    stack_load::resolve(&mut program, loader);
    let mut diagnostics = std::mem::take(&mut program.errors);
    let (checked, type_errors) = if indexed {
        check::check_indexed(&program)
    } else {
        check::check(&program)
    };
    let stop = |program, checked, diagnostics| Analysis {
        program,
        checked,
        diagnostics,
        warnings: Vec::new(),
        graph: None,
        bindings: Vec::new(),
    };
    if program.modules.is_empty() {
        return stop(program, checked, diagnostics);
    }
    diagnostics.extend(type_errors);
    let params = parse_params(&mut program, &checked, &options.params, &mut diagnostics);
    if !diagnostics.is_empty() {
        return stop(program, checked, diagnostics);
    }
    let limits = Limits { ..options.limits };
    let mut evaluator =
        eval::Evaluator::new(&program, &checked, loader, &params, &options.pins, limits)
            .with_stand_ins(&options.stand_ins);
    let evaluated = evaluator.evaluate();
    diagnostics.append(&mut evaluator.errors);
    let mut graph = if diagnostics.is_empty() {
        match graph::lower(&evaluated) {
            Ok(g) => Some(g),
            Err(errs) => {
                diagnostics.extend(errs);
                None
            }
        }
    } else {
        None
    };
    // Policies judge the graph as a whole: a broken mandatory one leaves no graph.
    let mut warnings = graph.as_ref().map(network::warnings).unwrap_or_default();
    warnings.extend(
        graph
            .as_ref()
            .map(|g| manifest::warnings(g.nodes()))
            .unwrap_or_default(),
    );
    if let Some(g) = &mut graph {
        let (broken_advisory, count) = evaluator.policies(g.nodes().cloned().collect());
        warnings.extend(broken_advisory);
        g.policies = count;
        g.rollouts = rollout::evaluate(&mut evaluator);
        let (adoptions, wrong) = adopt::collect(&program, &mut evaluator, g.nodes().cloned());
        g.adoptions = adoptions;
        evaluator.errors.extend(wrong);
        if !evaluator.errors.is_empty() {
            diagnostics.append(&mut evaluator.errors);
            graph = None;
        }
    }
    drop(evaluator);
    if let Some(g) = &mut graph {
        let (moves, errors) = moved::check(&program, g.nodes());
        if errors.is_empty() {
            g.moved = moves;
        } else {
            diagnostics.extend(errors);
            graph = None;
        }
    }
    // A failing function called from several places reports the same problem once.
    let mut seen = std::collections::HashSet::new();
    diagnostics.retain(|d| {
        seen.insert((
            d.code,
            d.title.clone(),
            d.labels.first().map(|l| (l.file, l.span)),
        ))
    });
    Analysis {
        program,
        checked,
        diagnostics,
        warnings,
        graph,
        bindings: evaluated.bindings,
    }
}

/// What kind of literal other than a string `e` is (`a list`), if it is one.
fn non_string_literal(e: &envc_lang::ast::Expr) -> Option<&'static str> {
    Some(match &e.kind {
        ExprKind::Int(_) => "a number",
        ExprKind::Size(_) => "a size",
        ExprKind::Mode(_) => "a mode",
        ExprKind::Bool(_) => "a bool",
        ExprKind::List(_) => "a list",
        ExprKind::Record(_) => "a record",
        ExprKind::Unary(envc_lang::ast::UnaryOp::Neg, x) | ExprKind::Paren(x) => {
            non_string_literal(x)?
        }
        _ => return None,
    })
}

/// What a value of a scalar parameter type looks like, and an example: for a `--set` value
/// that does not parse.
fn accepts(ty: &types::Ty) -> Option<(&'static str, &'static str)> {
    use types::Ty;
    Some(match ty.base() {
        Ty::Int => ("a whole number, such as `3`", "3"),
        Ty::Size => (
            "a whole number and a unit with nothing between them: B, KiB, MiB, GiB, TiB (or KB, MB, GB, TB), such as `2GiB`",
            "2GiB",
        ),
        Ty::Bool => ("`true` or `false`", "true"),
        Ty::Mode => ("an octal mode, such as `0o644`", "0o644"),
        _ => return None,
    })
}

/// Turns `--set` values into expressions in synthetic source files (so errors point into
/// them). A bare word for a `str` parameter is the string itself; a value that reads as
/// another literal (`12`, `[1]`, `true`) must be quoted.
fn parse_params(
    program: &mut Program,
    checked: &check::Checked,
    raw: &BTreeMap<String, String>,
    diagnostics: &mut Vec<Diagnostic>,
) -> BTreeMap<String, (FileId, envc_lang::ast::Expr)> {
    let root = &program.modules[program.root];
    let root_file = root.file;
    // Each parameter's type, resolved (so that `type Region = str` counts as `str`), and
    // where it is declared.
    let declared: BTreeMap<String, (Option<types::Ty>, Span)> = root
        .ast
        .items
        .iter()
        .filter_map(|it| match &it.kind {
            ItemKind::Param { name, ty, .. } => {
                let resolved = checked.types.get(&(root_file, ty.span.start, ty.span.end));
                Some((name.name.to_string(), (resolved.cloned(), name.span)))
            }
            _ => None,
        })
        .collect();
    let mut out = BTreeMap::new();
    for (name, value) in raw {
        let file = program
            .sources
            .add(format!("--set {name}"), value.as_str().into());
        let Some((declared_ty, declared_at)) = declared.get(name) else {
            let mut d = Diagnostic::new("param::unknown", format!("no parameter `{name}`")).label(
                file,
                Span::new(0, value.len()),
                "set on the command line",
            );
            d = d.help(
                envc_lang::did_you_mean(name, declared.keys().map(String::as_str)).unwrap_or_else(
                    || {
                        if declared.is_empty() {
                            "this environment declares no `param`".to_string()
                        } else {
                            format!(
                                "its parameters are: {}",
                                declared.keys().cloned().collect::<Vec<_>>().join(", ")
                            )
                        }
                    },
                ),
            );
            diagnostics.push(d);
            continue;
        };
        // Its default as written, to show what a value looks like.
        let example = |name: &str| {
            root.ast
                .items
                .iter()
                .find_map(|it| match &it.kind {
                    ItemKind::Param {
                        name: n,
                        default: Some(d),
                        ..
                    } if &*n.name == name => {
                        Some(program.sources.get(root_file).text[d.span.range()].to_string())
                    }
                    _ => None,
                })
                .unwrap_or_else(|| "…".into())
        };
        let base = declared_ty.as_ref().map(types::Ty::base);
        let quoted = value.starts_with('"');
        let expr = if matches!(base, Some(types::Ty::Secret)) {
            // The value itself would be in shell history and the process list: only
            // `secret("name")` is taken, and the executor reads the value.
            let (e, errs) = envc_lang::parse_expr(value, file);
            let names_a_secret = errs.is_empty()
                && matches!(&e.kind, ExprKind::Call { callee, .. }
                    if matches!(&callee.kind, ExprKind::Name(n) if &**n == "secret"));
            if !names_a_secret {
                diagnostics.push(
                    Diagnostic::new(
                        "param::secret-value",
                        format!("`{name}` is a secret parameter: name the secret, not its value"),
                    )
                    // Labelled at the declaration: what was typed may be the secret itself.
                    .label(root_file, *declared_at, "declared a `secret` here")
                    .message("A value given on the command line is kept in shell history and shows in the process list, so a secret parameter takes only `secret(\"NAME\")`.")
                    .help(format!(
                        "--set '{name}=secret(\"NAME\")', with the value in the project's secrets (`envc secret set {} NAME`) or `[secrets.from]`",
                        program.sources.get(root_file).name
                    )),
                );
                continue;
            }
            e
        } else if matches!(base, Some(types::Ty::Str)) && !quoted {
            // A value that reads as another literal is not a bare word: `--set s=[1]` was
            // meant as a list (or the quotes were lost to the shell); say so, not `"[1]"`.
            let (e, errs) = envc_lang::parse_expr(value, file);
            if let (true, Some(what)) = (errs.is_empty(), non_string_literal(&e)) {
                diagnostics.push(
                    Diagnostic::new(
                        "param::not-a-string",
                        format!("`{name}` is a str parameter, but `{value}` is {what}"),
                    )
                    .label(file, e.span, format!("{what}, not a string"))
                    .help(format!(
                        "to pass it as a string, quote it: --set '{name}=\"{}\"'",
                        value.replace('\\', "\\\\").replace('"', "\\\"")
                    )),
                );
                continue;
            }
            envc_lang::ast::Expr {
                kind: ExprKind::Str(vec![StrPart::Lit(value.as_str().into())]),
                span: Span::new(0, value.len()),
            }
        } else {
            let (e, errs) = envc_lang::parse_expr(value, file);
            if !errs.is_empty() {
                // The parser's own words (`expected a field name after .` for `3.5`) are
                // about source code; say what the parameter takes instead.
                match declared_ty.as_ref().and_then(accepts) {
                    Some((what, fallback)) => {
                        let ty = declared_ty
                            .as_ref()
                            .map_or(String::new(), |t| t.to_string());
                        let given = example(name);
                        let e_g = if given == "…" {
                            fallback.to_string()
                        } else {
                            given
                        };
                        diagnostics.push(
                            Diagnostic::new(
                                "param::not-a-value",
                                format!("`{value}` is not a value of `{name}`, which is `{ty}`"),
                            )
                            .label(
                                file,
                                Span::new(0, value.len()),
                                format!("not of type `{ty}`"),
                            )
                            .label(root_file, *declared_at, format!("declared `{ty}` here"))
                            .message(format!("`{name}` takes {what}."))
                            .help(format!(
                                "give a value of type `{ty}`, e.g. --set {name}={e_g}"
                            )),
                        );
                    }
                    None => diagnostics.extend(errs),
                }
                continue;
            }
            // A bare word for a parameter that is not a string: the word is not a value.
            if let (ExprKind::Name(word), Some(ty)) = (&e.kind, declared_ty) {
                diagnostics.push(
                    Diagnostic::new(
                        "param::not-a-value",
                        format!("`{word}` is not a value of `{name}`, which is `{ty}`"),
                    )
                    .label(file, e.span, "a word")
                    .label(root_file, *declared_at, format!("declared `{ty}` here"))
                    .message("A bare word is taken as a string only for a `str` parameter.")
                    .help(format!(
                        "give a value of type `{ty}`, e.g. --set {name}={}",
                        match (example(name), accepts(ty)) {
                            (given, Some((_, fallback))) if given == "…" => fallback.to_string(),
                            (given, _) => given,
                        }
                    )),
                );
                continue;
            }
            e
        };
        out.insert(name.clone(), (file, expr));
    }
    out
}
