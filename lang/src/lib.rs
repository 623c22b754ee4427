//! The envc language: lexer, parser and formatter. Pure: no I/O, no panics on any input.

pub mod ast;
pub mod diag;
pub mod format;
pub mod lexer;
pub mod parser;
pub mod span;
pub mod token;

pub use diag::{closest, did_you_mean, suggestion, Diagnostic, Label};
pub use parser::{parse, parse_expr, Parsed};
pub use span::{FileId, Span};
