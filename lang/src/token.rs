//! Tokens. A string literal is a run of tokens: `StrStart`, then `StrText` and
//! `InterpStart … InterpEnd` pieces, then `StrEnd`, so interpolated expressions are ordinary
//! tokens and the parser needs no second lexing pass.

use crate::span::Span;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TokenKind {
    Ident,
    Int,
    Size,
    Octal,
    StrStart {
        multiline: bool,
    },
    StrText,
    InterpStart,
    InterpEnd,
    StrEnd,
    // keywords
    Let,
    Fn,
    If,
    Else,
    For,
    In,
    Import,
    As,
    Type,
    Param,
    Output,
    Assert,
    Policy,
    Moved,
    Rollout,
    Adopt,
    True,
    False,
    And,
    Or,
    Not,
    // punctuation
    LParen,
    RParen,
    LBracket,
    RBracket,
    LBrace,
    RBrace,
    Comma,
    Dot,
    DotDot,
    DotDotEq,
    Colon,
    Semi,
    Eq,
    EqEq,
    NotEq,
    Lt,
    Le,
    Gt,
    Ge,
    Plus,
    Minus,
    Star,
    Slash,
    Percent,
    Arrow,
    FatArrow,
    /// Bytes the lexer could not make sense of; already reported.
    Error,
    Eof,
}

impl TokenKind {
    pub fn keyword(ident: &str) -> Option<TokenKind> {
        use TokenKind::*;
        Some(match ident {
            "let" => Let,
            "fn" => Fn,
            "if" => If,
            "else" => Else,
            "for" => For,
            "in" => In,
            "import" => Import,
            "as" => As,
            "type" => Type,
            "param" => Param,
            "output" => Output,
            "assert" => Assert,
            "policy" => Policy,
            "moved" => Moved,
            "rollout" => Rollout,
            "adopt" => Adopt,
            "true" => True,
            "false" => False,
            "and" => And,
            "or" => Or,
            "not" => Not,
            _ => return None,
        })
    }

    /// What to call this token in "expected X, found Y".
    pub fn describe(self) -> &'static str {
        use TokenKind::*;
        match self {
            Ident => "a name",
            Int => "an integer",
            Size => "a size",
            Octal => "an octal number",
            StrStart { .. } | StrText | StrEnd => "a string",
            InterpStart => "`${`",
            InterpEnd => "`}`",
            Let => "`let`",
            Fn => "`fn`",
            If => "`if`",
            Else => "`else`",
            For => "`for`",
            In => "`in`",
            Import => "`import`",
            As => "`as`",
            Type => "`type`",
            Param => "`param`",
            Output => "`output`",
            Assert => "`assert`",
            Policy => "`policy`",
            Moved => "`moved`",
            Rollout => "`rollout`",
            Adopt => "`adopt`",
            True => "`true`",
            False => "`false`",
            And => "`and`",
            Or => "`or`",
            Not => "`not`",
            LParen => "`(`",
            RParen => "`)`",
            LBracket => "`[`",
            RBracket => "`]`",
            LBrace => "`{`",
            RBrace => "`}`",
            Comma => "`,`",
            Dot => "`.`",
            DotDot => "`..`",
            DotDotEq => "`..=`",
            Colon => "`:`",
            Semi => "`;`",
            Eq => "`=`",
            EqEq => "`==`",
            NotEq => "`!=`",
            Lt => "`<`",
            Le => "`<=`",
            Gt => "`>`",
            Ge => "`>=`",
            Plus => "`+`",
            Minus => "`-`",
            Star => "`*`",
            Slash => "`/`",
            Percent => "`%`",
            Arrow => "`->`",
            FatArrow => "`=>`",
            Error => "invalid input",
            Eof => "the end of the file",
        }
    }

    /// Keywords that begin a top-level item: where the parser resynchronises after an error.
    pub fn starts_item(self) -> bool {
        use TokenKind::*;
        matches!(
            self,
            Let | Fn | Import | Type | Param | Output | Assert | Policy | Moved | Rollout | Adopt
        )
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Token {
    pub kind: TokenKind,
    pub span: Span,
    /// A line break stands between this token and the previous one. Calls and indexing
    /// must start on the same line as their callee, so a new line can begin a new statement.
    pub newline_before: bool,
}

/// A `#` comment, kept so that the formatter can put it back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Comment {
    pub span: Span,
    /// Code precedes it on the same line (a trailing comment).
    pub trailing: bool,
}
