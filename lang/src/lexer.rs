//! The lexer: nom parsers for each token shape, driven by a loop that keeps a mode stack
//! for string interpolation (`"a ${ {x = "}"}.x } b"` nests arbitrarily). Lexing never
//! fails: bad bytes become `Error` tokens plus a diagnostic, and lexing goes on.

use nom::branch::alt;
use nom::bytes::complete::{tag, take_while, take_while1};
use nom::character::complete::{char, satisfy};
use nom::combinator::{opt, recognize};
use nom::sequence::pair;
use nom::{IResult, Parser};

use crate::diag::Diagnostic;
use crate::span::{FileId, Span};
use crate::token::{Comment, Token, TokenKind};

pub struct Lexed {
    pub tokens: Vec<Token>,
    pub comments: Vec<Comment>,
    pub errors: Vec<Diagnostic>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Code { brace_depth: u32 },
    Str { multiline: bool },
}

pub const SIZE_UNITS: &[(&str, u64)] = &[
    ("KiB", 1 << 10),
    ("MiB", 1 << 20),
    ("GiB", 1 << 30),
    ("TiB", 1 << 40),
    ("KB", 1_000),
    ("MB", 1_000_000),
    ("GB", 1_000_000_000),
    ("TB", 1_000_000_000_000),
    ("B", 1),
];

fn ident(i: &str) -> IResult<&str, &str> {
    recognize(pair(
        satisfy(|c| c.is_ascii_alphabetic() || c == '_'),
        take_while(|c: char| c.is_ascii_alphanumeric() || c == '_'),
    ))
    .parse(i)
}

/// Whether `s` is a name as the lexer reads one, and not a keyword: what can name a
/// binding, and what a field name need not quote.
pub fn is_name(s: &str) -> bool {
    matches!(ident(s), Ok(("", _))) && crate::token::TokenKind::keyword(s).is_none()
}

/// Digits with `_` separators, optionally followed by a unit suffix (letters).
fn number(i: &str) -> IResult<&str, (&str, Option<&str>)> {
    (
        recognize(pair(
            satisfy(|c| c.is_ascii_digit()),
            take_while(|c: char| c.is_ascii_digit() || c == '_'),
        )),
        opt(take_while1(|c: char| c.is_ascii_alphanumeric() || c == '_')),
    )
        .parse(i)
}

fn octal(i: &str) -> IResult<&str, &str> {
    recognize(pair(
        tag("0o"),
        take_while(|c: char| c.is_ascii_alphanumeric() || c == '_'),
    ))
    .parse(i)
}

fn punct(i: &str) -> IResult<&str, TokenKind> {
    use TokenKind::*;
    alt((
        alt((
            tag("..=").map(|_| DotDotEq),
            tag("..").map(|_| DotDot),
            tag("==").map(|_| EqEq),
            tag("!=").map(|_| NotEq),
            tag("<=").map(|_| Le),
            tag(">=").map(|_| Ge),
            tag("->").map(|_| Arrow),
            tag("=>").map(|_| FatArrow),
        )),
        alt((
            char('(').map(|_| LParen),
            char(')').map(|_| RParen),
            char('[').map(|_| LBracket),
            char(']').map(|_| RBracket),
            char('{').map(|_| LBrace),
            char('}').map(|_| RBrace),
            char(',').map(|_| Comma),
            char('.').map(|_| Dot),
            char(':').map(|_| Colon),
            char(';').map(|_| Semi),
            char('=').map(|_| Eq),
            char('<').map(|_| Lt),
            char('>').map(|_| Gt),
            char('+').map(|_| Plus),
            char('-').map(|_| Minus),
            char('*').map(|_| Star),
            char('/').map(|_| Slash),
            char('%').map(|_| Percent),
        )),
    ))
    .parse(i)
}

struct Lexer<'a> {
    src: &'a str,
    file: FileId,
    pos: usize,
    out: Lexed,
    newline: bool,
    modes: Vec<Mode>,
}

pub fn lex(src: &str, file: FileId) -> Lexed {
    let mut lx = Lexer {
        src,
        file,
        pos: 0,
        out: Lexed {
            tokens: Vec::new(),
            comments: Vec::new(),
            errors: Vec::new(),
        },
        newline: true,
        modes: vec![Mode::Code { brace_depth: 0 }],
    };
    lx.run();
    lx.out
}

impl<'a> Lexer<'a> {
    fn rest(&self) -> &'a str {
        &self.src[self.pos..]
    }

    fn push(&mut self, kind: TokenKind, start: usize) {
        let span = Span::new(start, self.pos);
        self.out.tokens.push(Token {
            kind,
            span,
            newline_before: self.newline,
        });
        self.newline = false;
    }

    fn error(
        &mut self,
        code: &'static str,
        span: Span,
        title: &str,
        label: &str,
        help: Option<&str>,
    ) {
        let mut d = Diagnostic::new(code, title).label(self.file, span, label);
        if let Some(h) = help {
            d = d.help(h);
        }
        self.out.errors.push(d);
    }

    fn run(&mut self) {
        while self.pos < self.src.len() {
            match *self.modes.last().expect("mode stack never empties") {
                Mode::Code { .. } => self.code_token(),
                Mode::Str { multiline } => self.string_piece(multiline),
            }
        }
        if let Some(Mode::Str { multiline }) = self.modes.last().copied() {
            self.unterminated(multiline);
        }
        let end = self.src.len();
        self.out.tokens.push(Token {
            kind: TokenKind::Eof,
            span: Span::at(end),
            newline_before: true,
        });
    }

    fn unterminated(&mut self, multiline: bool) {
        let start = self
            .out
            .tokens
            .iter()
            .rev()
            .find(|t| matches!(t.kind, TokenKind::StrStart { .. }))
            .map_or(self.pos, |t| t.span.start as usize);
        let quote = if multiline { "\"\"\"" } else { "\"" };
        self.error(
            "lex::unterminated-string",
            Span::new(start, self.pos),
            "unterminated string",
            "this string is never closed",
            Some(&format!(
                "close it with {quote}; a one-line string cannot span lines, use \"\"\" for that"
            )),
        );
        self.modes.pop();
        self.push(TokenKind::StrEnd, self.pos);
    }

    fn code_token(&mut self) {
        let rest = self.rest();
        let c = rest.chars().next().expect("not at end");
        let start = self.pos;
        if c == '\n' {
            self.pos += 1;
            self.newline = true;
            return;
        }
        if c.is_whitespace() {
            self.pos += c.len_utf8();
            return;
        }
        if c == '#' {
            let len = rest.find('\n').unwrap_or(rest.len());
            self.pos += len;
            let trailing = !self.newline;
            self.out.comments.push(Comment {
                span: Span::new(start, self.pos),
                trailing,
            });
            return;
        }
        if rest.starts_with("\"\"\"") {
            self.pos += 3;
            self.push(TokenKind::StrStart { multiline: true }, start);
            self.modes.push(Mode::Str { multiline: true });
            return;
        }
        if c == '"' {
            self.pos += 1;
            self.push(TokenKind::StrStart { multiline: false }, start);
            self.modes.push(Mode::Str { multiline: false });
            return;
        }
        if let Ok((r, _)) = octal(rest) {
            self.pos += rest.len() - r.len();
            let text = &self.src[start + 2..self.pos];
            if text.is_empty() || !text.chars().all(|c| ('0'..='7').contains(&c) || c == '_') {
                self.error(
                    "lex::bad-octal",
                    Span::new(start, self.pos),
                    "invalid octal number",
                    "only digits 0 to 7 may follow `0o`",
                    Some("write a file mode like 0o644"),
                );
                self.push(TokenKind::Error, start);
            } else {
                self.push(TokenKind::Octal, start);
            }
            return;
        }
        if let Ok((r, (_, unit))) = number(rest) {
            self.pos += rest.len() - r.len();
            match unit {
                None => self.push(TokenKind::Int, start),
                Some(u) if SIZE_UNITS.iter().any(|(n, _)| *n == u) => {
                    self.push(TokenKind::Size, start)
                }
                Some(u) => {
                    self.error(
                        "lex::bad-number",
                        Span::new(start, self.pos),
                        &format!("unknown unit `{u}` on a number"),
                        "not a size unit",
                        Some("sizes take B, KiB, MiB, GiB, TiB (or KB, MB, GB, TB); put a space between a number and a name"),
                    );
                    self.push(TokenKind::Error, start);
                }
            }
            return;
        }
        if let Ok((r, word)) = ident(rest) {
            self.pos += rest.len() - r.len();
            self.push(TokenKind::keyword(word).unwrap_or(TokenKind::Ident), start);
            return;
        }
        if let Ok((r, kind)) = punct(rest) {
            self.pos += rest.len() - r.len();
            let nested = self.modes.len() > 1;
            if let Some(Mode::Code { brace_depth }) = self.modes.last_mut() {
                match kind {
                    TokenKind::LBrace => *brace_depth += 1,
                    TokenKind::RBrace if *brace_depth == 0 && nested => {
                        // Closes `${ … }`: back to the enclosing string.
                        self.modes.pop();
                        self.push(TokenKind::InterpEnd, start);
                        return;
                    }
                    TokenKind::RBrace => *brace_depth = brace_depth.saturating_sub(1),
                    _ => {}
                }
            }
            self.push(kind, start);
            return;
        }
        // Anything else: one bad character; group a run of them into one error.
        let mut end = start + c.len_utf8();
        for ch in self.src[end..].chars() {
            if ch.is_ascii_alphanumeric()
                || ch.is_whitespace()
                || "\"#()[]{},.:;=<>+-*/%!_".contains(ch)
            {
                break;
            }
            end += ch.len_utf8();
        }
        self.pos = end;
        let shown: String = self.src[start..end].chars().take(10).collect();
        let help = match c {
            '\'' => Some("strings use double quotes: \"text\""),
            '&' | '|' => Some("write `and` / `or`"),
            '!' => Some("write `not x`, or `!=` for inequality"),
            _ => None,
        };
        self.error(
            "lex::unexpected-character",
            Span::new(start, end),
            &format!("unexpected character `{}`", shown.escape_debug()),
            "not part of the language",
            help,
        );
        self.push(TokenKind::Error, start);
    }

    fn string_piece(&mut self, multiline: bool) {
        let start = self.pos;
        let bytes = self.src.as_bytes();
        let mut i = self.pos;
        loop {
            if i >= bytes.len() {
                break;
            }
            match bytes[i] {
                b'\\' => {
                    let esc_start = i;
                    i += 1;
                    match self.src[i..].chars().next() {
                        Some('n' | 't' | 'r' | '\\' | '"' | '$' | '0') => i += 1,
                        Some('\n') if multiline => i += 1,
                        // A one-line string ends at the line's end, backslash or not: the
                        // newline below reports it unterminated (with the `"""` hint).
                        Some('\n') => {}
                        Some(ch) => {
                            i += ch.len_utf8();
                            let span = Span::new(esc_start, i);
                            self.error(
                                "lex::bad-escape",
                                span,
                                &format!("unknown escape `\\{}`", ch.escape_debug()),
                                "not an escape sequence",
                                Some("escapes are \\n \\t \\r \\0 \\\\ \\\" and \\$ (for a literal `${`)"),
                            );
                        }
                        None => {}
                    }
                }
                b'"' if !multiline => {
                    self.flush_text(start, i);
                    self.pos = i + 1;
                    self.push(TokenKind::StrEnd, i);
                    self.modes.pop();
                    return;
                }
                b'"' if multiline && self.src[i..].starts_with("\"\"\"") => {
                    self.flush_text(start, i);
                    self.pos = i + 3;
                    self.push(TokenKind::StrEnd, i);
                    self.modes.pop();
                    return;
                }
                b'\n' if !multiline => {
                    self.flush_text(start, i);
                    self.pos = i;
                    self.unterminated(false);
                    return;
                }
                b'$' if self.src[i..].starts_with("${") => {
                    self.flush_text(start, i);
                    self.pos = i + 2;
                    self.push(TokenKind::InterpStart, i);
                    self.modes.push(Mode::Code { brace_depth: 0 });
                    return;
                }
                _ => i += 1,
            }
        }
        self.flush_text(start, bytes.len());
        self.pos = bytes.len();
    }

    fn flush_text(&mut self, start: usize, end: usize) {
        if end > start {
            let nl = self.newline;
            self.out.tokens.push(Token {
                kind: TokenKind::StrText,
                span: Span::new(start, end),
                newline_before: nl,
            });
            self.newline = false;
        }
    }
}

/// Turns the raw text of a string piece into its value, resolving escapes
/// (already validated by the lexer; an unknown escape is kept as written).
pub fn unescape(raw: &str) -> String {
    let mut out = String::with_capacity(raw.len());
    let mut chars = raw.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('n') => out.push('\n'),
            Some('t') => out.push('\t'),
            Some('r') => out.push('\r'),
            Some('0') => out.push('\0'),
            Some('\n') => {}
            Some(other) => out.push(other),
            None => out.push('\\'),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(src: &str, expected: &str) {
        let lexed = lex(src, 0);
        let mut got = String::new();
        for t in &lexed.tokens {
            got.push_str(&format!("{:?}:{}", t.kind, &src[t.span.range()]));
            got.push(' ');
        }
        for e in &lexed.errors {
            got.push_str(&format!("!{} ", e.code));
        }
        assert_eq!(got.trim_end(), expected, "lexing {src:?}");
    }

    #[test]
    fn tokens() {
        check("let x = 512MiB", "Let:let Ident:x Eq:= Size:512MiB Eof:");
        check(
            "0o644 1_000 0..=3",
            "Octal:0o644 Int:1_000 Int:0 DotDotEq:..= Int:3 Eof:",
        );
        check("a # c\nb", "Ident:a Ident:b Eof:");
        check("12px", "Error:12px Eof: !lex::bad-number");
        check("0o9", "Error:0o9 Eof: !lex::bad-octal");
        check(
            "x ≠ y",
            "Ident:x Error:≠ Ident:y Eof: !lex::unexpected-character",
        );
    }

    #[test]
    fn strings_nest_through_interpolation() {
        check(
            r#""a${ {k = "}"}.k }b""#,
            "StrStart { multiline: false }:\" StrText:a InterpStart:${ LBrace:{ Ident:k Eq:= \
             StrStart { multiline: false }:\" StrText:} StrEnd:\" RBrace:} Dot:. Ident:k \
             InterpEnd:} StrText:b StrEnd:\" Eof:",
        );
        check("\"open\nx", "StrStart { multiline: false }:\" StrText:open StrEnd: Ident:x Eof: !lex::unterminated-string");
        check(
            r#""\q""#,
            "StrStart { multiline: false }:\" StrText:\\q StrEnd:\" Eof: !lex::bad-escape",
        );
        check(
            "\"\"\"a\n\"b\"\n\"\"\"",
            "StrStart { multiline: true }:\"\"\" StrText:a\n\"b\"\n StrEnd:\"\"\" Eof:",
        );
    }

    #[test]
    fn escapes() {
        assert_eq!(unescape(r#"a\nb\t\"\$\\"#), "a\nb\t\"$\\");
    }
}
