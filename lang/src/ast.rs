//! The syntax tree. Every node carries its byte span; nodes that failed to parse are
//! `Error` variants so later stages can skip them without cascading errors.

use std::rc::Rc;

use crate::span::Span;

#[derive(Clone, Debug, PartialEq)]
pub struct Ident {
    pub name: Rc<str>,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Module {
    pub items: Vec<Item>,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Item {
    pub kind: ItemKind,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub enum ItemKind {
    /// `import "std/debian"` or `import "./lib.env" as lib`.
    Import {
        path: Rc<str>,
        path_span: Span,
        alias: Option<Ident>,
    },
    Let(Binding),
    Fn(Rc<FnDecl>),
    /// `type Port = int(1..=65535)`.
    Type {
        name: Ident,
        ty: TypeExpr,
    },
    /// `param replicas: int(1..=7) = 3`.
    Param {
        name: Ident,
        ty: TypeExpr,
        default: Option<Expr>,
    },
    Output {
        name: Ident,
        value: Expr,
    },
    Assert(Assertion),
    /// `policy "vm-owner": for n in nodes("vm") => …`: a rule over the whole graph.
    Policy(Rc<Policy>),
    /// `default tags = { owner = "platform" }`: tags every node made in this module gets.
    DefaultTags(Expr),
    /// `moved "vm:web-0" -> "vm:web-a"`: the records of a node carried to its new name.
    Moved(Moved),
    /// `rollout "web": webs, batch = 2, max_failures = 0`: a group of machines that a build
    /// updates batch by batch.
    Rollout(Rc<Rollout>),
    /// `adopt "web-0/file:/etc/motd"`: the node takes over what already exists.
    Adopt(Rc<Adopt>),
    /// `test "NAME" { env = "./prod.env"  mocks = {…}  expect COND }`: a unit test of an
    /// environment or a component, run by `envc test` (never by a build).
    Test(Rc<Test>),
    Error,
}

/// A test: what to evaluate (`env`, `set`, `mocks`, `policies`) and what must hold of the
/// result (`expect` lines), in the order written.
#[derive(Clone, Debug, PartialEq)]
pub struct Test {
    pub name: Rc<str>,
    pub name_span: Span,
    pub body: Vec<TestLine>,
    /// Where the body's `{` … `}` is.
    pub body_span: Span,
}

/// One line of a test's body.
#[derive(Clone, Debug, PartialEq)]
pub enum TestLine {
    /// `env = "./prod.env"`, `set = { replicas = 1 }`, `mocks = {…}`, `policies = […]`.
    Field(RecordField),
    /// `expect COND [, MESSAGE]`.
    Expect(Assertion),
}

impl Test {
    /// The fields a test takes.
    pub const FIELDS: [&'static str; 4] = ["env", "set", "mocks", "policies"];

    pub fn field(&self, name: &str) -> Option<&RecordField> {
        self.body.iter().find_map(|l| match l {
            TestLine::Field(f) if &*f.name.name == name => Some(f),
            _ => None,
        })
    }

    pub fn expects(&self) -> impl Iterator<Item = &Assertion> {
        self.body.iter().filter_map(|l| match l {
            TestLine::Expect(a) => Some(a),
            TestLine::Field(_) => None,
        })
    }
}

/// A rename: the node keyed `from` in the state is now the node keyed `to`. Both are state
/// keys as `envc plan` prints them, read by the compiler once the graph is known.
#[derive(Clone, Debug, PartialEq)]
pub struct Moved {
    pub from: Rc<str>,
    pub from_span: Span,
    pub to: Rc<str>,
    pub to_span: Span,
}

/// A group of machines updated a batch at a time (Ansible's `serial`): what `rollout` says.
#[derive(Clone, Debug, PartialEq)]
pub struct Rollout {
    pub name: Rc<str>,
    pub name_span: Span,
    /// The machines, in the order the batches take them.
    pub targets: Expr,
    /// `batch = …`, `max_failures = …`, as written (names checked by the parser).
    pub options: Vec<RecordField>,
}

impl Rollout {
    /// The options a rollout takes.
    pub const OPTIONS: [&'static str; 2] = ["batch", "max_failures"];

    pub fn option(&self, name: &str) -> Option<&RecordField> {
        self.options.iter().find(|o| &*o.name.name == name)
    }
}

/// `adopt "NODE" [from { … }]`: a node (named by its state key, as `plan` prints it) that
/// is recorded as found rather than created (Terraform's `import` block).
#[derive(Clone, Debug, PartialEq)]
pub struct Adopt {
    pub node: Rc<str>,
    pub node_span: Span,
    /// `from { disk = …, port = … }`: where a machine made outside envc is found.
    pub from: Option<Expr>,
    /// Where `from` is written.
    pub from_span: Option<Span>,
}

/// A rule every node it ranges over must keep, checked on the evaluated graph.
#[derive(Clone, Debug, PartialEq)]
pub struct Policy {
    pub name: Rc<str>,
    pub name_span: Span,
    pub level: PolicyLevel,
    /// Where the level is written, if it is.
    pub level_span: Option<Span>,
    /// `for n in nodes("vm") if …`: what it ranges over.
    pub clauses: Vec<Clause>,
    /// What must hold for each element.
    pub cond: Expr,
    pub message: Option<Expr>,
}

/// What a broken policy does (Pulumi CrossGuard's enforcement levels).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PolicyLevel {
    /// An error: `check` fails and nothing is built.
    Mandatory,
    /// A warning: reported, nothing stops.
    Advisory,
}

impl PolicyLevel {
    pub const ALL: [(&'static str, PolicyLevel); 2] = [
        ("mandatory", PolicyLevel::Mandatory),
        ("advisory", PolicyLevel::Advisory),
    ];

    pub fn name(self) -> &'static str {
        match self {
            PolicyLevel::Mandatory => "mandatory",
            PolicyLevel::Advisory => "advisory",
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Binding {
    pub name: Ident,
    pub ty: Option<TypeExpr>,
    pub value: Expr,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Assertion {
    pub cond: Expr,
    pub message: Option<Expr>,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub struct FnDecl {
    /// `None` for an anonymous `fn(x) => …`.
    pub name: Option<Ident>,
    pub params: Vec<ParamDecl>,
    pub ret: Option<TypeExpr>,
    pub body: Expr,
    /// The body was written `=> expr` rather than `{ … }` (kept for the formatter).
    pub arrow: bool,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub struct ParamDecl {
    pub name: Ident,
    pub ty: Option<TypeExpr>,
    pub default: Option<Expr>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct TypeExpr {
    pub kind: TypeExprKind,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub enum TypeExprKind {
    /// `int`, `Port`, `debian.Mirror`.
    Name(Vec<Ident>),
    /// `list[T]`, `dict[T]`.
    Apply {
        name: Ident,
        arg: Box<TypeExpr>,
    },
    /// `int(1..=65535)`: a base type narrowed by a range.
    Range {
        base: Box<TypeExpr>,
        lo: Box<Expr>,
        hi: Box<Expr>,
        inclusive: bool,
    },
    Record(Vec<FieldDecl>),
    Error,
}

#[derive(Clone, Debug, PartialEq)]
pub struct FieldDecl {
    pub name: Ident,
    pub ty: TypeExpr,
    pub default: Option<Expr>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Expr {
    pub kind: ExprKind,
    pub span: Span,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UnaryOp {
    Neg,
    Not,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BinaryOp {
    Or,
    And,
    Eq,
    NotEq,
    Lt,
    Le,
    Gt,
    Ge,
    Add,
    Sub,
    Mul,
    Div,
    Rem,
}

impl BinaryOp {
    pub fn symbol(self) -> &'static str {
        use BinaryOp::*;
        match self {
            Or => "or",
            And => "and",
            Eq => "==",
            NotEq => "!=",
            Lt => "<",
            Le => "<=",
            Gt => ">",
            Ge => ">=",
            Add => "+",
            Sub => "-",
            Mul => "*",
            Div => "/",
            Rem => "%",
        }
    }

    /// Binding power: higher binds tighter.
    pub fn precedence(self) -> u8 {
        use BinaryOp::*;
        match self {
            Or => 1,
            And => 2,
            Eq | NotEq | Lt | Le | Gt | Ge => 4,
            Add | Sub => 6,
            Mul | Div | Rem => 7,
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum StrPart {
    /// Literal text, escapes resolved (and indentation stripped for `"""` strings).
    Lit(Rc<str>),
    Interp(Expr),
}

#[derive(Clone, Debug, PartialEq)]
pub struct Arg {
    pub name: Option<Ident>,
    pub value: Expr,
}

#[derive(Clone, Debug, PartialEq)]
pub struct RecordField {
    pub name: Ident,
    pub value: Expr,
}

/// One `for x in xs` or `for k, v in r` or `if cond` clause of a comprehension.
#[derive(Clone, Debug, PartialEq)]
pub enum Clause {
    For {
        first: Ident,
        second: Option<Ident>,
        iter: Expr,
    },
    If(Expr),
}

#[derive(Clone, Debug, PartialEq)]
pub enum Stmt {
    Let(Binding),
    Assert(Assertion),
}

#[derive(Clone, Debug, PartialEq)]
pub enum ExprKind {
    Int(i64),
    Size(u64),
    Mode(u32),
    Bool(bool),
    Str(Vec<StrPart>),
    Name(Rc<str>),
    List(Vec<Expr>),
    Record(Vec<RecordField>),
    ListComp {
        clauses: Vec<Clause>,
        body: Box<Expr>,
    },
    RecordComp {
        clauses: Vec<Clause>,
        key: Box<Expr>,
        value: Box<Expr>,
    },
    Field(Box<Expr>, Ident),
    Index(Box<Expr>, Box<Expr>),
    Call {
        callee: Box<Expr>,
        args: Vec<Arg>,
    },
    Unary(UnaryOp, Box<Expr>),
    Binary(BinaryOp, Box<Expr>, Box<Expr>),
    Range {
        lo: Box<Expr>,
        hi: Box<Expr>,
        inclusive: bool,
    },
    If {
        cond: Box<Expr>,
        then: Box<Expr>,
        else_: Box<Expr>,
    },
    /// `{ let a = 1  assert …  a + 1 }`, only as the body of `if`/`else`/`fn`.
    Block {
        stmts: Vec<Stmt>,
        value: Box<Expr>,
    },
    Lambda(Rc<FnDecl>),
    Paren(Box<Expr>),
    Error,
}

impl Expr {
    pub fn error(span: Span) -> Expr {
        Expr {
            kind: ExprKind::Error,
            span,
        }
    }
}
