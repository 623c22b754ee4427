//! Recursive-descent parser over the token stream, with a Pratt loop for operators.
//!
//! Parsing never fails: it returns a module plus every error found. After an error the parser
//! resynchronises at `,` `]` `}` `)` (inside brackets) or at a new line that starts an item
//! (at top level), so one run reports all independent problems. Nesting is bounded
//! (`MAX_DEPTH`), so no input can overflow the stack of this or any later tree walk.

use std::rc::Rc;

use crate::ast::*;
use crate::diag::Diagnostic;
use crate::lexer::{lex, unescape, SIZE_UNITS};
use crate::span::{FileId, Span};
use crate::token::{Comment, Token, TokenKind as T};

pub const MAX_DEPTH: u32 = 128;
const MAX_ERRORS: usize = 100;

pub struct Parsed {
    pub module: Module,
    pub comments: Vec<Comment>,
    pub errors: Vec<Diagnostic>,
    /// Names of items that did not parse (`fn f(` with an error in it): their errors are
    /// reported, and a checker does not report their uses as unknown again.
    pub broken: Vec<Rc<str>>,
}

pub fn parse(src: &str, file: FileId) -> Parsed {
    let (mut p, comments) = Parser::new(src, file);
    let module = p.module();
    let mut errors = p.errors;
    errors.truncate(MAX_ERRORS);
    Parsed {
        module,
        comments,
        errors,
        broken: p.broken,
    }
}

/// Parses a single expression (used for `--set name=value` on the command line).
pub fn parse_expr(src: &str, file: FileId) -> (Expr, Vec<Diagnostic>) {
    let (mut p, _) = Parser::new(src, file);
    let e = p.expr();
    if !p.at(T::Eof) {
        p.error_expected("the end of the value");
    }
    (e, p.errors)
}

struct Parser<'a> {
    src: &'a str,
    file: FileId,
    toks: Vec<Token>,
    pos: usize,
    errors: Vec<Diagnostic>,
    depth: u32,
    last_error_at: Option<u32>,
    /// The current item passed the nesting limit: what follows in it is not reported.
    abandoned: bool,
    /// The current item has an error already.
    item_failed: bool,
    broken: Vec<Rc<str>>,
}

enum RawPiece {
    Lit(String),
    Interp(Expr),
}

impl<'a> Parser<'a> {
    /// A parser over `src`'s tokens, and the comments the lexer set aside.
    fn new(src: &'a str, file: FileId) -> (Parser<'a>, Vec<Comment>) {
        let lexed = lex(src, file);
        let p = Parser {
            src,
            file,
            toks: lexed.tokens,
            pos: 0,
            errors: lexed.errors,
            depth: 0,
            last_error_at: None,
            abandoned: false,
            item_failed: false,
            broken: Vec::new(),
        };
        (p, lexed.comments)
    }

    // ---- token plumbing -------------------------------------------------------------

    fn tok(&self) -> Token {
        self.toks[self.pos]
    }

    fn kind(&self) -> T {
        self.toks[self.pos].kind
    }

    fn nth(&self, n: usize) -> T {
        self.toks.get(self.pos + n).map_or(T::Eof, |t| t.kind)
    }

    fn at(&self, k: T) -> bool {
        self.kind() == k
    }

    fn bump(&mut self) -> Token {
        let t = self.tok();
        if t.kind != T::Eof {
            self.pos += 1;
        }
        t
    }

    fn eat(&mut self, k: T) -> Option<Token> {
        if self.at(k) {
            Some(self.bump())
        } else {
            None
        }
    }

    fn prev_end(&self) -> usize {
        if self.pos == 0 {
            0
        } else {
            self.toks[self.pos - 1].span.end as usize
        }
    }

    fn text(&self, span: Span) -> &'a str {
        &self.src[span.range()]
    }

    fn push_error(&mut self, d: Diagnostic) {
        let at = d.primary().map_or(0, |l| l.span.start);
        // One error per position: after a failure the callers up the stack would each
        // report the same missing token again.
        if self.abandoned || self.last_error_at == Some(at) || self.errors.len() >= MAX_ERRORS {
            return;
        }
        self.last_error_at = Some(at);
        self.item_failed = true;
        self.errors.push(d);
    }

    fn error_expected(&mut self, what: &str) {
        let t = self.tok();
        if t.kind == T::Error {
            return; // the lexer already reported these bytes
        }
        if self.item_failed && self.at_item_line() {
            // Recovery after the item's error stopped at the next item: the brackets it
            // leaves open are that error's, not new ones.
            return;
        }
        let found = t.kind.describe();
        let mut d = Diagnostic::new(
            "parse::unexpected-token",
            format!("expected {what}, found {found}"),
        )
        .label(self.file, t.span, format!("expected {what} here"));
        if t.kind == T::Eof && self.pos > 0 {
            let end = self.prev_end();
            d.labels[0].span = Span::at(end);
        }
        if let Some(h) = hint_for(what, t.kind) {
            d = d.help(h);
        }
        self.push_error(d);
    }

    fn expect(&mut self, k: T, what: &str) -> Option<Token> {
        if let Some(t) = self.eat(k) {
            return Some(t);
        }
        self.error_expected(what);
        None
    }

    /// Expects the closing bracket `k`; when it is not next, reports it and skips to it.
    fn close(&mut self, k: T, what: &str) {
        if self.eat(k).is_none() {
            self.error_expected(what);
            self.recover(&[k]);
            self.eat(k);
        }
    }

    /// A record field's name: a name, a keyword (`type`, `for`: fields of systemd units and
    /// Kubernetes objects are called that, and nothing else can stand there), or a quoted
    /// string (`"cost-center"`).
    fn field_name(&mut self, what: &str) -> Option<Ident> {
        self.field_name_or(what, true)
    }

    /// [`Parser::field_name`], without quoted names where `quoted` is false (after `.`).
    fn field_name_or(&mut self, what: &str, quoted: bool) -> Option<Ident> {
        if quoted && matches!(self.kind(), T::StrStart { .. }) {
            return self.plain_string(what).map(|(s, span)| Ident {
                name: s.into(),
                span,
            });
        }
        if is_keyword(self.kind()) {
            let t = self.bump();
            return Some(Ident {
                name: self.text(t.span).into(),
                span: t.span,
            });
        }
        self.ident(what)
    }

    fn ident(&mut self, what: &str) -> Option<Ident> {
        if self.at(T::Ident) {
            let t = self.bump();
            return Some(Ident {
                name: self.text(t.span).into(),
                span: t.span,
            });
        }
        if is_keyword(self.kind()) {
            let t = self.tok();
            let d = Diagnostic::new(
                "parse::keyword-as-name",
                format!("`{}` is a keyword", self.text(t.span)),
            )
            .label(self.file, t.span, format!("expected {what}"))
            .help("choose another name, e.g. add a suffix: `type_`, `for_host`");
            self.push_error(d);
            self.bump();
            return Some(Ident {
                name: self.text(t.span).into(),
                span: t.span,
            });
        }
        self.error_expected(what);
        None
    }

    /// Skips to one of `stops` at bracket depth 0, or to a closer of an enclosing bracket,
    /// or to a line that starts a top-level item. Does not consume the stop token.
    fn recover(&mut self, stops: &[T]) {
        let mut depth = 0i32;
        loop {
            let t = self.tok();
            match t.kind {
                T::Eof => return,
                k if depth == 0 && stops.contains(&k) => return,
                k if depth == 0 && t.newline_before && k.starts_item() && k != T::Assert => return,
                T::LParen | T::LBracket | T::LBrace | T::InterpStart | T::StrStart { .. } => {
                    depth += 1
                }
                T::RParen | T::RBracket | T::RBrace | T::InterpEnd | T::StrEnd => {
                    if depth == 0 {
                        return;
                    }
                    depth -= 1;
                }
                _ => {}
            }
            self.bump();
        }
    }

    /// A line that starts a top-level item: an unclosed bracket before it ends here.
    fn at_item_line(&self) -> bool {
        let t = self.tok();
        // `type = "oneshot"` on a line of its own is a field named by a keyword: no item
        // has `=` right after its keyword.
        t.newline_before && t.kind.starts_item() && t.kind != T::Assert && self.nth(1) != T::Eq
    }

    fn enter(&mut self) -> bool {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            let t = self.tok();
            let d = Diagnostic::new("parse::too-deep", "expression nested too deeply")
                .label(
                    self.file,
                    t.span,
                    format!("more than {MAX_DEPTH} levels of nesting"),
                )
                .help("split the expression into named `let` bindings");
            self.push_error(d);
            self.depth -= 1;
            // The rest of this item is beyond the limit too: skip it rather than report
            // every level again.
            self.sync_item();
            self.abandoned = true;
            return false;
        }
        true
    }

    fn leave(&mut self) {
        self.depth -= 1;
    }

    /// One more link of a chain built in a loop (`a + b + c`, `a.b.c`, `else if`, clauses):
    /// each is a level of the tree, so each counts against `MAX_DEPTH` like nesting does.
    fn deepen(&mut self, links: &mut u32) -> bool {
        let ok = self.enter();
        if ok {
            *links += 1;
        }
        ok
    }

    // ---- items ------------------------------------------------------------------------

    fn module(&mut self) -> Module {
        let mut items = Vec::new();
        while !self.at(T::Eof) {
            let start = self.pos;
            if self.kind().starts_item() || self.at_default_tags() || self.at_test() {
                self.abandoned = false;
                let item = self.item();
                items.push(item);
                if !self.at(T::Eof) && !self.tok().newline_before && self.eat(T::Semi).is_none() {
                    self.error_expected("a new line after this item");
                    self.sync_item();
                }
            } else {
                let t = self.tok();
                if t.kind != T::Error {
                    let mut d = Diagnostic::new(
                        "parse::expected-item",
                        format!("expected an item, found {}", t.kind.describe()),
                    )
                    .label(self.file, t.span, "not allowed at the top level")
                    .help("a file is a list of `let`, `fn`, `type`, `param`, `import`, `output`, `assert`, `policy`, `adopt` and `default tags` items");
                    if t.kind == T::Ident && self.nth(1) == T::Eq {
                        d = d.help(format!(
                            "to bind a name, write `let {} = …`",
                            self.text(t.span)
                        ));
                    }
                    self.push_error(d);
                }
                self.bump();
                self.sync_item();
            }
            if self.pos == start {
                self.bump();
            }
        }
        Module {
            items,
            span: Span::new(0, self.src.len()),
        }
    }

    fn sync_item(&mut self) {
        loop {
            let t = self.tok();
            if t.kind == T::Eof
                || (t.newline_before
                    && (t.kind.starts_item() || self.at_default_tags() || self.at_test()))
            {
                break;
            }
            self.bump();
        }
    }

    fn item(&mut self) -> Item {
        let start = self.tok().span.start as usize;
        self.item_failed = false;
        // `let x`, `fn f`, `type T`, `param p`: the name, should the item not parse.
        let named = (matches!(self.kind(), T::Let | T::Fn | T::Type | T::Param)
            && self.nth(1) == T::Ident)
            .then(|| self.text(self.toks[self.pos + 1].span).to_string());
        let kind = match self.kind() {
            T::Import => self.import(),
            T::Let => {
                self.bump();
                match self.binding() {
                    Some(b) => ItemKind::Let(b),
                    None => ItemKind::Error,
                }
            }
            T::Fn => {
                self.bump();
                match self.fn_decl(true) {
                    Some(f) => ItemKind::Fn(Rc::new(f)),
                    None => ItemKind::Error,
                }
            }
            T::Type => self.type_item(),
            T::Param => self.param_item(),
            T::Output => {
                self.bump();
                match self.ident("an output name") {
                    Some(name) => {
                        if self.expect(T::Eq, "`=`").is_some() {
                            ItemKind::Output {
                                name,
                                value: self.expr(),
                            }
                        } else {
                            ItemKind::Error
                        }
                    }
                    None => ItemKind::Error,
                }
            }
            T::Assert => {
                let a = self.assertion();
                ItemKind::Assert(a)
            }
            T::Policy => self.policy_item(),
            T::Moved => self.moved_item(),
            T::Rollout => self.rollout_item(),
            T::Adopt => self.adopt_item(),
            T::Ident if self.at_test() => self.test_item(),
            T::Ident => {
                // `default tags`: the words are names elsewhere, so not keywords.
                self.bump();
                self.bump();
                match self.expect(T::Eq, "`=`") {
                    Some(_) => ItemKind::DefaultTags(self.expr()),
                    None => ItemKind::Error,
                }
            }
            _ => unreachable!("item() is only called at an item keyword"),
        };
        if matches!(kind, ItemKind::Error) {
            self.broken.extend(named.map(Rc::from));
            self.sync_item();
        }
        Item {
            kind,
            span: Span::new(start, self.prev_end().max(start)),
        }
    }

    /// At `default tags` (two names: neither is a keyword).
    fn at_default_tags(&self) -> bool {
        let word = |i: usize, w: &str| {
            self.toks
                .get(self.pos + i)
                .is_some_and(|t| t.kind == T::Ident && self.text(t.span) == w)
        };
        word(0, "default") && word(1, "tags")
    }

    /// At `test "…"` (`test` is a name elsewhere, so not a keyword).
    fn at_test(&self) -> bool {
        self.at(T::Ident)
            && self.text(self.tok().span) == "test"
            && matches!(self.nth(1), T::StrStart { .. })
    }

    /// `test "NAME" { FIELD = EXPR … expect COND [, MESSAGE] … }`, a line each.
    fn test_item(&mut self) -> ItemKind {
        self.bump();
        let Some((name, name_span)) = self.plain_string("the test's name, as a string") else {
            return ItemKind::Error;
        };
        let Some(open) = self.expect(T::LBrace, "`{` and the test's body") else {
            return ItemKind::Error;
        };
        let mut body: Vec<TestLine> = Vec::new();
        loop {
            match self.kind() {
                T::RBrace => break,
                T::Eof => {
                    self.error_expected("`}` closing the test");
                    return ItemKind::Error;
                }
                T::Ident if self.text(self.tok().span) == "expect" && self.nth(1) != T::Eq => {
                    body.push(TestLine::Expect(self.assertion()));
                }
                T::Ident if self.nth(1) == T::Eq => {
                    let t = self.bump();
                    let name = Ident {
                        name: self.text(t.span).into(),
                        span: t.span,
                    };
                    self.bump();
                    let value = self.expr();
                    if !Test::FIELDS.contains(&&*name.name) {
                        let d = Diagnostic::new(
                            "parse::test-field",
                            format!("`{}` is not a field of a test", name.name),
                        )
                        .label(self.file, name.span, "not a test field")
                        .help(
                            crate::did_you_mean(&name.name, Test::FIELDS.iter().copied())
                                .unwrap_or_else(|| {
                                    "a test takes `env`, `set`, `mocks` and `policies`, then `expect` lines".into()
                                }),
                        );
                        self.push_error(d);
                    } else if let Some(first) = body.iter().find_map(|l| match l {
                        TestLine::Field(f) if f.name.name == name.name => Some(f.name.span),
                        _ => None,
                    }) {
                        let d = Diagnostic::new(
                            "parse::test-field",
                            format!("`{}` is given twice", name.name),
                        )
                        .label(self.file, name.span, "given again here")
                        .label(self.file, first, "first given here")
                        .help("keep one of them");
                        self.push_error(d);
                    }
                    body.push(TestLine::Field(RecordField { name, value }));
                }
                k if self.tok().newline_before && k.starts_item() => {
                    // The next item: the body was not closed.
                    self.error_expected("`}` closing the test");
                    return ItemKind::Error;
                }
                _ => {
                    let t = self.tok();
                    let d = Diagnostic::new(
                        "parse::test-line",
                        format!("expected a test's field or `expect`, found {}", t.kind.describe()),
                    )
                    .label(self.file, t.span, "not a line of a test")
                    .help("write `expect` before a condition; a test's other lines are `env = …`, `set = …`, `mocks = …` and `policies = …`");
                    self.push_error(d);
                    self.recover(&[T::RBrace]);
                    if self.at(T::RBrace) {
                        break;
                    }
                    // `recover` stops before a line that starts an item: the body is over.
                    return ItemKind::Error;
                }
            }
            if !self.at(T::RBrace) && !self.tok().newline_before && self.eat(T::Semi).is_none() {
                self.error_expected("a new line after this line of the test");
                self.recover(&[T::RBrace]);
            }
        }
        let close = self.bump();
        ItemKind::Test(Rc::new(Test {
            name: name.into(),
            name_span,
            body,
            body_span: Span::new(open.span.start as usize, close.span.end as usize),
        }))
    }

    /// `policy "NAME" [LEVEL]: for x in xs [if …] => cond [, message]`.
    fn policy_item(&mut self) -> ItemKind {
        self.bump();
        let Some((name, name_span)) = self.plain_string("the policy's name, as a string") else {
            return ItemKind::Error;
        };
        let (level, level_span) = if self.at(T::Ident) {
            let t = self.bump();
            let word = self.text(t.span).to_string();
            match PolicyLevel::ALL.iter().find(|(w, _)| *w == word) {
                Some((_, l)) => (*l, Some(t.span)),
                None => {
                    let levels = PolicyLevel::ALL.iter().map(|(w, _)| *w);
                    let d = Diagnostic::new(
                        "parse::policy-level",
                        format!("`{word}` is not a policy level"),
                    )
                    .label(self.file, t.span, "a policy level, or `:`")
                    .help(crate::did_you_mean(&word, levels).unwrap_or_else(|| {
                        "a policy is `mandatory` (the default: it fails the check) or `advisory` (it warns)".into()
                    }));
                    self.push_error(d);
                    (PolicyLevel::Mandatory, Some(t.span))
                }
            }
        } else {
            (PolicyLevel::Mandatory, None)
        };
        if self.expect(T::Colon, "`:`").is_none() {
            return ItemKind::Error;
        }
        if !self.at(T::For) {
            self.error_expected("`for` and the nodes the policy ranges over");
            return ItemKind::Error;
        }
        let clauses = self.clauses();
        let cond = self.expr();
        let message = if self.eat(T::Comma).is_some() {
            Some(self.expr())
        } else {
            None
        };
        ItemKind::Policy(Rc::new(Policy {
            name: name.into(),
            name_span,
            level,
            level_span,
            clauses,
            cond,
            message,
        }))
    }

    /// `moved "OLD" -> "NEW"`: two plain strings (node keys, checked against the graph).
    fn moved_item(&mut self) -> ItemKind {
        self.bump();
        let Some((from, from_span)) = self.plain_string("the node's old key, as a string") else {
            return ItemKind::Error;
        };
        if self.expect(T::Arrow, "`->`").is_none() {
            return ItemKind::Error;
        }
        let Some((to, to_span)) = self.plain_string("the node's new key, as a string") else {
            return ItemKind::Error;
        };
        ItemKind::Moved(Moved {
            from: from.into(),
            from_span,
            to: to.into(),
            to_span,
        })
    }

    /// `rollout "NAME": MACHINES [, batch = N|"P%"] [, max_failures = N|"P%"]`.
    fn rollout_item(&mut self) -> ItemKind {
        self.bump();
        let Some((name, name_span)) = self.plain_string("the rollout's name, as a string") else {
            return ItemKind::Error;
        };
        if self.expect(T::Colon, "`:`").is_none() {
            return ItemKind::Error;
        }
        let targets = self.expr();
        let mut options: Vec<RecordField> = Vec::new();
        while self.eat(T::Comma).is_some() {
            let Some(name) = self.ident("`batch` or `max_failures`") else {
                return ItemKind::Error;
            };
            if !Rollout::OPTIONS.contains(&&*name.name) {
                let d = Diagnostic::new(
                    "parse::rollout-option",
                    format!("`{}` is not an option of a rollout", name.name),
                )
                .label(self.file, name.span, "not a rollout option")
                .help(
                    crate::did_you_mean(&name.name, Rollout::OPTIONS.iter().copied())
                        .unwrap_or_else(|| {
                            "a rollout takes `batch = N` (or \"P%\") and `max_failures = N` (or \"P%\")".into()
                        }),
                );
                self.push_error(d);
            } else if let Some(first) = options.iter().find(|o| o.name.name == name.name) {
                let d = Diagnostic::new(
                    "parse::rollout-option",
                    format!("`{}` is given twice", name.name),
                )
                .label(self.file, name.span, "given again here")
                .label(self.file, first.name.span, "first given here")
                .help("keep one of them");
                self.push_error(d);
            }
            if self.expect(T::Eq, "`=`").is_none() {
                return ItemKind::Error;
            }
            let value = self.expr();
            options.push(RecordField { name, value });
        }
        ItemKind::Rollout(Rc::new(Rollout {
            name: name.into(),
            name_span,
            targets,
            options,
        }))
    }

    /// `adopt "NODE" [from EXPR]` (`from` is a name elsewhere, so not a keyword).
    fn adopt_item(&mut self) -> ItemKind {
        self.bump();
        let Some((node, node_span)) =
            self.plain_string("the adopted node, as a string (`\"web-0/file:/etc/motd\"`)")
        else {
            return ItemKind::Error;
        };
        let from_span =
            (self.at(T::Ident) && self.text(self.tok().span) == "from").then(|| self.bump().span);
        let from = from_span.map(|_| self.expr());
        ItemKind::Adopt(Rc::new(Adopt {
            node: node.into(),
            node_span,
            from,
            from_span,
        }))
    }

    fn import(&mut self) -> ItemKind {
        self.bump();
        let Some((path, path_span)) = self.plain_string("the module path, as a string") else {
            return ItemKind::Error;
        };
        let alias = if self.eat(T::As).is_some() {
            self.ident("a module alias")
        } else {
            None
        };
        ItemKind::Import {
            path: path.into(),
            path_span,
            alias,
        }
    }

    /// A string literal without interpolation (import paths, quoted record keys).
    fn plain_string(&mut self, what: &str) -> Option<(String, Span)> {
        if !matches!(self.kind(), T::StrStart { multiline: false }) {
            self.error_expected(what);
            return None;
        }
        let e = self.string();
        match e.kind {
            ExprKind::Str(parts) if parts.iter().all(|p| matches!(p, StrPart::Lit(_))) => {
                let s: String = parts
                    .iter()
                    .map(|p| if let StrPart::Lit(s) = p { &**s } else { "" })
                    .collect();
                Some((s, e.span))
            }
            _ => {
                let d = Diagnostic::new(
                    "parse::interpolated-path",
                    "this string cannot be interpolated",
                )
                .label(self.file, e.span, "contains `${…}`")
                .message(format!("{what} must be known without evaluating anything"));
                self.push_error(d);
                None
            }
        }
    }

    fn binding(&mut self) -> Option<Binding> {
        let name = self.ident("a name to bind")?;
        let ty = if self.eat(T::Colon).is_some() {
            Some(self.type_expr())
        } else {
            None
        };
        self.expect(T::Eq, "`=`")?;
        let value = self.expr();
        Some(Binding { name, ty, value })
    }

    fn assertion(&mut self) -> Assertion {
        let start = self.bump().span.start as usize;
        let cond = self.expr();
        let message = if self.eat(T::Comma).is_some() {
            Some(self.expr())
        } else {
            None
        };
        Assertion {
            cond,
            message,
            span: Span::new(start, self.prev_end()),
        }
    }

    fn type_item(&mut self) -> ItemKind {
        self.bump();
        let Some(name) = self.ident("a type name") else {
            return ItemKind::Error;
        };
        if self.expect(T::Eq, "`=`").is_none() {
            return ItemKind::Error;
        }
        ItemKind::Type {
            name,
            ty: self.type_expr(),
        }
    }

    fn param_item(&mut self) -> ItemKind {
        self.bump();
        let Some(name) = self.ident("a parameter name") else {
            return ItemKind::Error;
        };
        if self
            .expect(T::Colon, "`:` and the parameter's type")
            .is_none()
        {
            return ItemKind::Error;
        }
        let ty = self.type_expr();
        let default = if self.eat(T::Eq).is_some() {
            Some(self.expr())
        } else {
            None
        };
        ItemKind::Param { name, ty, default }
    }

    /// After `fn`: `name(params) -> T { body }` (named) or `(params) => expr` (anonymous).
    fn fn_decl(&mut self, named: bool) -> Option<FnDecl> {
        let start = self.toks[self.pos.saturating_sub(1)].span.start as usize;
        let name = if named {
            Some(self.ident("a function name")?)
        } else {
            None
        };
        self.expect(T::LParen, "`(` and the parameters")?;
        let mut params = Vec::new();
        while !self.at(T::RParen) && !self.at(T::Eof) && !self.at_item_line() {
            let before = self.pos;
            if let Some(pname) = self.ident("a parameter name") {
                let ty = if self.eat(T::Colon).is_some() {
                    Some(self.type_expr())
                } else {
                    None
                };
                let default = if self.eat(T::Eq).is_some() {
                    Some(self.expr())
                } else {
                    None
                };
                params.push(ParamDecl {
                    name: pname,
                    ty,
                    default,
                });
            }
            if self.eat(T::Comma).is_none() && !self.at(T::RParen) {
                self.error_expected("`,` or `)`");
                self.recover(&[T::Comma, T::RParen]);
                self.eat(T::Comma);
            }
            if self.pos == before {
                break;
            }
        }
        self.expect(T::RParen, "`)`")?;
        let ret = if self.eat(T::Arrow).is_some() {
            Some(self.type_expr())
        } else {
            None
        };
        let (body, arrow) = if self.eat(T::FatArrow).is_some() {
            (self.expr(), true)
        } else if self.at(T::LBrace) {
            (self.block(), false)
        } else {
            self.error_expected("`{` or `=>` and the function body");
            return None;
        };
        Some(FnDecl {
            name,
            params,
            ret,
            body,
            arrow,
            span: Span::new(start, self.prev_end()),
        })
    }

    // ---- types ------------------------------------------------------------------------

    fn type_expr(&mut self) -> TypeExpr {
        let start = self.tok().span.start as usize;
        if !self.enter() {
            return TypeExpr {
                kind: TypeExprKind::Error,
                span: self.tok().span,
            };
        }
        let kind = self.type_kind();
        self.leave();
        TypeExpr {
            kind,
            span: Span::new(start, self.prev_end().max(start)),
        }
    }

    fn type_kind(&mut self) -> TypeExprKind {
        if self.eat(T::LBrace).is_some() {
            let mut fields = Vec::new();
            while !self.at(T::RBrace) && !self.at(T::Eof) && !self.at_item_line() {
                let before = self.pos;
                if let Some(name) = self.field_name("a field name") {
                    if self.expect(T::Colon, "`:` and the field's type").is_some() {
                        let ty = self.type_expr();
                        let default = if self.eat(T::Eq).is_some() {
                            Some(self.expr())
                        } else {
                            None
                        };
                        fields.push(FieldDecl { name, ty, default });
                    }
                }
                if self.eat(T::Comma).is_none() && !self.at(T::RBrace) {
                    self.error_expected("`,` or `}`");
                    self.recover(&[T::Comma, T::RBrace]);
                    self.eat(T::Comma);
                }
                if self.pos == before {
                    self.bump();
                }
            }
            self.expect(T::RBrace, "`}`");
            self.check_duplicate_fields(fields.iter().map(|f| &f.name));
            return TypeExprKind::Record(fields);
        }
        let Some(first) = self.ident("a type") else {
            return TypeExprKind::Error;
        };
        if self.at(T::LBracket) && !self.tok().newline_before {
            self.bump();
            let arg = self.type_expr();
            self.expect(T::RBracket, "`]`");
            return TypeExprKind::Apply {
                name: first,
                arg: Box::new(arg),
            };
        }
        let mut path = vec![first];
        while self.eat(T::Dot).is_some() {
            match self.ident("a type name") {
                Some(i) => path.push(i),
                None => return TypeExprKind::Error,
            }
        }
        let base = TypeExpr {
            span: path[0].span.to(path[path.len() - 1].span),
            kind: TypeExprKind::Name(path),
        };
        if self.at(T::LParen) && !self.tok().newline_before {
            self.bump();
            let lo = self.binary(6);
            let inclusive = match self.kind() {
                T::DotDotEq => true,
                T::DotDot => false,
                _ => {
                    self.error_expected("`..=` or `..` between the bounds");
                    self.recover(&[T::RParen]);
                    self.eat(T::RParen);
                    return TypeExprKind::Error;
                }
            };
            self.bump();
            let hi = self.binary(6);
            self.expect(T::RParen, "`)`");
            return TypeExprKind::Range {
                base: Box::new(base),
                lo: Box::new(lo),
                hi: Box::new(hi),
                inclusive,
            };
        }
        base.kind
    }

    fn check_duplicate_fields<'i>(&mut self, names: impl Iterator<Item = &'i Ident>) {
        let mut seen: Vec<&Ident> = Vec::new();
        let mut dups = Vec::new();
        for n in names {
            if let Some(first) = seen.iter().find(|s| s.name == n.name) {
                dups.push((first.span, n.span, n.name.clone()));
            } else {
                seen.push(n);
            }
        }
        for (first, again, name) in dups {
            let d = Diagnostic::new(
                "parse::duplicate-field",
                format!("field `{name}` is given twice"),
            )
            .label(self.file, again, "given again here")
            .label(self.file, first, "first given here")
            .help("remove one of them");
            self.push_error(d);
        }
    }

    // ---- expressions ------------------------------------------------------------------

    pub fn expr(&mut self) -> Expr {
        self.binary(0)
    }

    fn binary(&mut self, min: u8) -> Expr {
        if !self.enter() {
            return Expr::error(self.tok().span);
        }
        let e = self.binary_inner(min);
        self.leave();
        e
    }

    fn binary_inner(&mut self, min: u8) -> Expr {
        let start = self.tok().span;
        let mut lhs = match self.kind() {
            T::Not => {
                self.bump();
                let e = self.binary(3);
                Expr {
                    span: start.to(e.span),
                    kind: ExprKind::Unary(UnaryOp::Not, Box::new(e)),
                }
            }
            T::Minus => {
                self.bump();
                let e = self.binary(8);
                Expr {
                    span: start.to(e.span),
                    kind: ExprKind::Unary(UnaryOp::Neg, Box::new(e)),
                }
            }
            _ => self.postfix(),
        };
        let mut links = 0;
        loop {
            let k = self.kind();
            if matches!(k, T::DotDot | T::DotDotEq) {
                if min > 5 || !self.deepen(&mut links) {
                    break;
                }
                self.bump();
                let hi = self.binary(6);
                lhs = Expr {
                    span: lhs.span.to(hi.span),
                    kind: ExprKind::Range {
                        lo: Box::new(lhs),
                        hi: Box::new(hi),
                        inclusive: k == T::DotDotEq,
                    },
                };
                continue;
            }
            let Some(op) = binary_op(k) else { break };
            let prec = op.precedence();
            if prec < min || !self.deepen(&mut links) {
                break;
            }
            let op_span = self.bump().span;
            let rhs = self.binary(prec + 1);
            if prec == 4 {
                if let Some(next) = binary_op(self.kind()).filter(|o| o.precedence() == 4) {
                    let t = self.tok();
                    let d = Diagnostic::new(
                        "parse::chained-comparison",
                        "comparisons cannot be chained",
                    )
                    .label(
                        self.file,
                        t.span,
                        format!("`{}` after a comparison", next.symbol()),
                    )
                    .label(self.file, op_span, "first comparison")
                    .help("combine them with `and`: `a < b and b < c`");
                    self.push_error(d);
                }
            }
            lhs = Expr {
                span: lhs.span.to(rhs.span),
                kind: ExprKind::Binary(op, Box::new(lhs), Box::new(rhs)),
            };
        }
        self.depth -= links;
        lhs
    }

    fn postfix(&mut self) -> Expr {
        let mut e = self.primary();
        let mut links = 0;
        loop {
            let t = self.tok();
            let link = matches!(t.kind, T::Dot)
                || (matches!(t.kind, T::LParen | T::LBracket) && !t.newline_before);
            if link && !self.deepen(&mut links) {
                break;
            }
            match t.kind {
                T::Dot => {
                    self.bump();
                    let Some(field) = self.field_name_or("a field name after `.`", false) else {
                        break;
                    };
                    e = Expr {
                        span: e.span.to(field.span),
                        kind: ExprKind::Field(Box::new(e), field),
                    };
                }
                T::LParen if !t.newline_before => {
                    self.bump();
                    let args = self.args();
                    let end = self.prev_end();
                    e = Expr {
                        span: Span::new(e.span.start as usize, end),
                        kind: ExprKind::Call {
                            callee: Box::new(e),
                            args,
                        },
                    };
                }
                T::LBracket if !t.newline_before => {
                    self.bump();
                    let index = self.expr();
                    self.expect(T::RBracket, "`]`");
                    let end = self.prev_end();
                    e = Expr {
                        span: Span::new(e.span.start as usize, end),
                        kind: ExprKind::Index(Box::new(e), Box::new(index)),
                    };
                }
                _ => break,
            }
        }
        self.depth -= links;
        e
    }

    fn args(&mut self) -> Vec<Arg> {
        let mut args: Vec<Arg> = Vec::new();
        while !self.at(T::RParen) && !self.at(T::Eof) && !self.at_item_line() {
            let before = self.pos;
            let named = self.at(T::Ident) && self.nth(1) == T::Eq;
            let name = if named {
                let t = self.bump();
                self.bump();
                Some(Ident {
                    name: self.text(t.span).into(),
                    span: t.span,
                })
            } else {
                None
            };
            let value = self.expr();
            if name.is_none() && args.iter().any(|a| a.name.is_some()) {
                let d = Diagnostic::new(
                    "parse::positional-after-named",
                    "positional argument after a named one",
                )
                .label(self.file, value.span, "positional")
                .help("put positional arguments first, or name this one too");
                self.push_error(d);
            }
            args.push(Arg { name, value });
            if self.eat(T::Comma).is_none() && !self.at(T::RParen) {
                if self.at(T::Ident) && self.nth(1) == T::Eq {
                    // A forgotten comma before the next named argument: say so and read
                    // it, so that the call does not also lack it.
                    let d =
                        Diagnostic::new("parse::missing-comma", "missing `,` between arguments")
                            .label(self.file, Span::at(self.prev_end()), "add `,` here");
                    self.push_error(d);
                    continue;
                }
                self.error_expected("`,` or `)`");
                self.recover(&[T::Comma, T::RParen]);
                self.eat(T::Comma);
            }
            if self.pos == before {
                self.bump();
            }
        }
        self.expect(T::RParen, "`)`");
        args
    }

    fn primary(&mut self) -> Expr {
        let t = self.tok();
        let text = self.text(t.span);
        let kind = match t.kind {
            T::Int => {
                self.bump();
                match text.replace('_', "").parse::<i64>() {
                    Ok(n) => ExprKind::Int(n),
                    Err(_) => {
                        self.number_error(t.span, "integer too large", "integers are 64-bit signed")
                    }
                }
            }
            T::Size => {
                self.bump();
                let digits_end = text
                    .find(|c: char| c.is_ascii_alphabetic())
                    .unwrap_or(text.len());
                let unit = SIZE_UNITS
                    .iter()
                    .find(|(n, _)| *n == &text[digits_end..])
                    .map_or(1, |u| u.1);
                match text[..digits_end]
                    .replace('_', "")
                    .parse::<u64>()
                    .ok()
                    .and_then(|n| n.checked_mul(unit))
                {
                    Some(n) => ExprKind::Size(n),
                    None => self.number_error(t.span, "size too large", "sizes are at most 16 EiB"),
                }
            }
            T::Octal => {
                self.bump();
                match u32::from_str_radix(&text[2..].replace('_', ""), 8) {
                    Ok(n) if n <= 0o7777 => ExprKind::Mode(n),
                    _ => {
                        self.number_error(t.span, "file mode too large", "a mode is at most 0o7777")
                    }
                }
            }
            T::True | T::False => {
                self.bump();
                ExprKind::Bool(t.kind == T::True)
            }
            T::Ident => {
                self.bump();
                ExprKind::Name(text.into())
            }
            T::StrStart { .. } => return self.string(),
            T::LParen => {
                self.bump();
                let inner = self.expr();
                self.expect(T::RParen, "`)`");
                ExprKind::Paren(Box::new(inner))
            }
            T::LBracket => return self.list(),
            T::LBrace => return self.record(),
            T::If => return self.if_expr(),
            T::Fn => {
                self.bump();
                match self.fn_decl(false) {
                    Some(f) => ExprKind::Lambda(Rc::new(f)),
                    None => ExprKind::Error,
                }
            }
            _ => {
                self.error_expected("an expression");
                // Consume a stray token unless an enclosing construct can use it to recover.
                let closer = matches!(
                    t.kind,
                    T::Eof
                        | T::RParen
                        | T::RBracket
                        | T::RBrace
                        | T::Comma
                        | T::InterpEnd
                        | T::StrEnd
                );
                let item_line = t.newline_before && t.kind.starts_item();
                if !closer && !item_line {
                    self.bump();
                }
                return Expr::error(t.span);
            }
        };
        Expr {
            kind,
            span: Span::new(t.span.start as usize, self.prev_end()),
        }
    }

    fn number_error(&mut self, span: Span, title: &str, why: &str) -> ExprKind {
        let d = Diagnostic::new("parse::number-too-large", title).label(self.file, span, why);
        self.push_error(d);
        ExprKind::Error
    }

    fn string(&mut self) -> Expr {
        let open = self.bump();
        let multiline = matches!(open.kind, T::StrStart { multiline: true });
        let mut pieces = Vec::new();
        loop {
            match self.kind() {
                T::StrText => {
                    let t = self.bump();
                    pieces.push(RawPiece::Lit(self.text(t.span).to_string()));
                }
                T::InterpStart => {
                    self.bump();
                    let e = if self.at(T::InterpEnd) {
                        self.error_expected("an expression inside `${}`");
                        Expr::error(self.tok().span)
                    } else {
                        self.expr()
                    };
                    if self.eat(T::InterpEnd).is_none() {
                        self.error_expected("`}` to close `${`");
                        self.recover(&[T::InterpEnd, T::StrEnd]);
                        self.eat(T::InterpEnd);
                    }
                    pieces.push(RawPiece::Interp(e));
                }
                T::StrEnd => {
                    self.bump();
                    break;
                }
                _ => {
                    // Only reachable when an interpolation swallowed the string's end.
                    self.error_expected("the end of the string");
                    break;
                }
            }
        }
        if multiline {
            dedent(&mut pieces);
        }
        let parts = pieces
            .into_iter()
            .filter_map(|p| match p {
                RawPiece::Lit(s) if s.is_empty() => None,
                RawPiece::Lit(s) => Some(StrPart::Lit(unescape(&s).into())),
                RawPiece::Interp(e) => Some(StrPart::Interp(e)),
            })
            .collect();
        Expr {
            kind: ExprKind::Str(parts),
            span: Span::new(open.span.start as usize, self.prev_end()),
        }
    }

    fn list(&mut self) -> Expr {
        let open = self.bump();
        if !self.enter() {
            self.recover(&[T::RBracket]);
            self.eat(T::RBracket);
            return Expr::error(open.span);
        }
        let kind = if self.at(T::For) {
            let clauses = self.clauses();
            let body = self.expr();
            ExprKind::ListComp {
                clauses,
                body: Box::new(body),
            }
        } else {
            let mut items = Vec::new();
            while !self.at(T::RBracket) && !self.at(T::Eof) && !self.at_item_line() {
                let before = self.pos;
                items.push(self.expr());
                if self.eat(T::Comma).is_none() && !self.at(T::RBracket) {
                    self.error_expected("`,` or `]`");
                    self.recover(&[T::Comma, T::RBracket]);
                    self.eat(T::Comma);
                }
                if self.pos == before {
                    break;
                }
            }
            ExprKind::List(items)
        };
        self.leave();
        self.close(T::RBracket, "`]`");
        Expr {
            kind,
            span: Span::new(open.span.start as usize, self.prev_end()),
        }
    }

    /// `for x in xs if cond … =>`: one or more clauses, then the arrow.
    fn clauses(&mut self) -> Vec<Clause> {
        let mut clauses = Vec::new();
        let mut links = 0;
        loop {
            // Each clause nests the rest of the comprehension one level deeper.
            if matches!(self.kind(), T::For | T::If) && !self.deepen(&mut links) {
                break;
            }
            match self.kind() {
                T::For => {
                    self.bump();
                    let Some(first) = self.ident("a loop variable") else {
                        break;
                    };
                    let second = if self.eat(T::Comma).is_some() {
                        self.ident("a second loop variable")
                    } else {
                        None
                    };
                    if self.expect(T::In, "`in`").is_none() {
                        break;
                    }
                    let iter = self.binary(1);
                    clauses.push(Clause::For {
                        first,
                        second,
                        iter,
                    });
                }
                T::If => {
                    self.bump();
                    clauses.push(Clause::If(self.binary(1)));
                }
                _ => break,
            }
        }
        if self
            .expect(
                T::FatArrow,
                "`=>` and the element, or another `for`/`if` clause",
            )
            .is_none()
        {
            self.recover(&[T::FatArrow, T::RBracket, T::RBrace]);
            self.eat(T::FatArrow);
        }
        self.depth -= links;
        clauses
    }

    fn record(&mut self) -> Expr {
        let open = self.bump();
        if !self.enter() {
            self.recover(&[T::RBrace]);
            self.eat(T::RBrace);
            return Expr::error(open.span);
        }
        let kind = if self.at(T::For) {
            let clauses = self.clauses();
            let key = self.binary(1);
            self.expect(T::Eq, "`=` between the key and the value");
            let value = self.expr();
            ExprKind::RecordComp {
                clauses,
                key: Box::new(key),
                value: Box::new(value),
            }
        } else {
            let mut fields = Vec::new();
            while !self.at(T::RBrace) && !self.at(T::Eof) && !self.at_item_line() {
                let before = self.pos;
                let name = self.field_name("a field name");
                if let Some(name) = name {
                    if self.expect(T::Eq, "`=` after the field name").is_some() {
                        let value = self.expr();
                        fields.push(RecordField { name, value });
                    } else {
                        self.recover(&[T::Comma, T::RBrace]);
                    }
                } else {
                    self.recover(&[T::Comma, T::RBrace]);
                }
                if self.eat(T::Comma).is_none() && !self.at(T::RBrace) {
                    let t = self.tok();
                    if t.newline_before && t.kind == T::Ident && self.nth(1) == T::Eq {
                        // A forgotten comma at a line end: say so and read the next field.
                        let d =
                            Diagnostic::new("parse::missing-comma", "missing `,` between fields")
                                .label(self.file, Span::at(self.prev_end()), "add `,` here");
                        self.push_error(d);
                    } else {
                        self.error_expected("`,` or `}`");
                        self.recover(&[T::Comma, T::RBrace]);
                        self.eat(T::Comma);
                    }
                }
                if self.pos == before {
                    break;
                }
            }
            self.check_duplicate_fields(fields.iter().map(|f| &f.name));
            ExprKind::Record(fields)
        };
        self.leave();
        self.close(T::RBrace, "`}`");
        Expr {
            kind,
            span: Span::new(open.span.start as usize, self.prev_end()),
        }
    }

    fn if_expr(&mut self) -> Expr {
        let start = self.bump().span;
        let cond = self.expr();
        let then = self.block();
        let else_ = if self.eat(T::Else).is_some() {
            if self.at(T::If) {
                // `else if` chains nest: each link counts.
                if self.enter() {
                    let e = self.if_expr();
                    self.leave();
                    e
                } else {
                    Expr::error(self.tok().span)
                }
            } else {
                self.block()
            }
        } else {
            let d = Diagnostic::new("parse::if-without-else", "`if` without `else`")
                .label(self.file, start.to(then.span), "this `if` has no value when its condition is false")
                .help("`if` is an expression: add `else { … }`; to filter a list, use `[for x in xs if cond => x]`");
            self.push_error(d);
            Expr::error(Span::at(self.prev_end()))
        };
        Expr {
            span: Span::new(start.start as usize, self.prev_end()),
            kind: ExprKind::If {
                cond: Box::new(cond),
                then: Box::new(then),
                else_: Box::new(else_),
            },
        }
    }

    /// `{ stmt* expr }`: the body of `if`, `else` and `fn`.
    fn block(&mut self) -> Expr {
        let Some(open) = self.expect(T::LBrace, "`{`") else {
            return Expr::error(self.tok().span);
        };
        if !self.enter() {
            self.recover(&[T::RBrace]);
            self.eat(T::RBrace);
            return Expr::error(open.span);
        }
        let mut stmts = Vec::new();
        let value = loop {
            let before = self.pos;
            match self.kind() {
                T::Let => {
                    self.bump();
                    match self.binding() {
                        Some(b) => stmts.push(Stmt::Let(b)),
                        None => self.recover(&[T::RBrace, T::Semi]),
                    }
                }
                T::Assert => stmts.push(Stmt::Assert(self.assertion())),
                T::Fn if self.nth(1) == T::Ident => {
                    self.bump();
                    if let Some(f) = self.fn_decl(true) {
                        let name = f.name.clone().expect("named");
                        let span = f.span;
                        stmts.push(Stmt::Let(Binding {
                            name,
                            ty: None,
                            value: Expr {
                                kind: ExprKind::Lambda(Rc::new(f)),
                                span,
                            },
                        }));
                    }
                }
                T::RBrace | T::Eof => {
                    self.error_expected("the block's value (an expression)");
                    break Expr::error(Span::at(self.prev_end()));
                }
                _ => break self.expr(),
            }
            self.eat(T::Semi);
            if self.pos == before {
                self.bump();
            }
        };
        self.leave();
        self.close(T::RBrace, "`}` to end the block");
        Expr {
            span: Span::new(open.span.start as usize, self.prev_end()),
            kind: ExprKind::Block {
                stmts,
                value: Box::new(value),
            },
        }
    }
}

fn binary_op(k: T) -> Option<BinaryOp> {
    use BinaryOp::*;
    Some(match k {
        T::Or => Or,
        T::And => And,
        T::EqEq => Eq,
        T::NotEq => NotEq,
        T::Lt => Lt,
        T::Le => Le,
        T::Gt => Gt,
        T::Ge => Ge,
        T::Plus => Add,
        T::Minus => Sub,
        T::Star => Mul,
        T::Slash => Div,
        T::Percent => Rem,
        _ => return None,
    })
}

fn is_keyword(k: T) -> bool {
    use T::*;
    matches!(
        k,
        Let | Fn
            | If
            | Else
            | For
            | In
            | Import
            | As
            | Type
            | Param
            | Output
            | Assert
            | Policy
            | Moved
            | Rollout
            | Adopt
            | True
            | False
            | And
            | Or
            | Not
    )
}

fn hint_for(what: &str, found: T) -> Option<&'static str> {
    match found {
        T::Eq if what.contains("expression") || what.contains("`)`") => {
            Some("`=` binds a name or a field; compare with `==`")
        }
        T::Ident | T::StrStart { .. } | T::Int if what.starts_with("`,`") => {
            Some("separate elements with `,`")
        }
        _ => None,
    }
}

/// Strips the common indentation of a `"""` string: the newline right after the opening
/// quotes and the whitespace before the closing quotes go, and every line loses the
/// indentation that all non-blank lines share. Interpolations count as content.
fn dedent(pieces: &mut [RawPiece]) {
    if let Some(RawPiece::Lit(s)) = pieces.first_mut() {
        let ws = s.len() - s.trim_start_matches([' ', '\t']).len();
        if s[ws..].starts_with('\n') {
            s.drain(..=ws);
        }
    }
    let last = pieces.len().saturating_sub(1);
    if let Some(RawPiece::Lit(s)) = pieces.last_mut() {
        if let Some(nl) = s.rfind('\n') {
            if s[nl + 1..].chars().all(|c| c == ' ' || c == '\t') {
                s.truncate(nl + 1);
            }
        }
    }
    // Line starts: (piece index, byte offset). The string's start is one.
    let mut starts = Vec::new();
    for (i, p) in pieces.iter().enumerate() {
        if let RawPiece::Lit(s) = p {
            if i == 0 {
                starts.push((0, 0));
            }
            starts.extend(s.match_indices('\n').map(|(o, _)| (i, o + 1)));
        } else if i == 0 {
            return; // starts with an interpolation: no common indentation
        }
    }
    let mut min = usize::MAX;
    for &(i, o) in &starts {
        let RawPiece::Lit(s) = &pieces[i] else {
            continue;
        };
        let line = &s[o..];
        let ws = line.len() - line.trim_start_matches([' ', '\t']).len();
        let blank = match line[ws..].chars().next() {
            Some('\n') => true,
            Some(_) => false,
            None => i == last, // runs into an interpolation: content; into the end: blank
        };
        if !blank {
            min = min.min(ws);
        }
    }
    if min == 0 || min == usize::MAX {
        return;
    }
    for (i, p) in pieces.iter_mut().enumerate().rev() {
        let RawPiece::Lit(s) = p else { continue };
        let offsets: Vec<usize> = starts
            .iter()
            .filter(|(pi, _)| *pi == i)
            .map(|&(_, o)| o)
            .rev()
            .collect();
        for o in offsets {
            let line = &s[o..];
            let ws = (line.len() - line.trim_start_matches([' ', '\t']).len()).min(min);
            s.drain(o..o + ws);
        }
    }
}
