//! Between the protocol's positions (line, UTF-16 code unit) and URIs, and envc's byte
//! offsets and paths.

use std::path::{Path, PathBuf};
use std::str::FromStr;

use lsp_types::{Position, Range, Uri};

use envc_lang::Span;

/// Byte offset of `pos` in `text`; past the end of a line is its end, past the last line
/// the end of the text (editors send both while a file changes under them).
pub fn offset(text: &str, pos: Position) -> u32 {
    let mut line_start = 0;
    for _ in 0..pos.line {
        match text[line_start..].find('\n') {
            Some(i) => line_start += i + 1,
            None => return text.len() as u32,
        }
    }
    let line = &text[line_start..];
    let line = &line[..line.find('\n').unwrap_or(line.len())];
    let mut units = 0u32;
    for (i, c) in line.char_indices() {
        if units >= pos.character {
            return (line_start + i) as u32;
        }
        units += c.len_utf16() as u32;
    }
    (line_start + line.len()) as u32
}

/// The position of byte `offset` in `text`.
pub fn position(text: &str, offset: u32) -> Position {
    let mut offset = (offset as usize).min(text.len());
    while !text.is_char_boundary(offset) {
        offset -= 1;
    }
    let before = &text[..offset];
    let line = before.matches('\n').count() as u32;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let character = before[line_start..]
        .chars()
        .map(|c| c.len_utf16() as u32)
        .sum();
    Position { line, character }
}

pub fn range(text: &str, span: Span) -> Range {
    Range {
        start: position(text, span.start),
        end: position(text, span.end),
    }
}

pub fn span(text: &str, range: Range) -> Span {
    Span {
        start: offset(text, range.start),
        end: offset(text, range.end),
    }
}

/// The local path a `file:` URI names; `None` for other schemes.
pub fn path(uri: &Uri) -> Option<PathBuf> {
    let rest = uri.as_str().strip_prefix("file://")?;
    // `file:///x` and `file://localhost/x`.
    let rest = rest.strip_prefix("localhost").unwrap_or(rest);
    if !rest.starts_with('/') {
        return None;
    }
    let bytes = rest.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match (bytes[i], bytes.get(i + 1..i + 3)) {
            (b'%', Some(hex)) => {
                let hex = std::str::from_utf8(hex).ok()?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 3;
            }
            (b'?' | b'#', _) => break,
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    use std::os::unix::ffi::OsStringExt;
    Some(PathBuf::from(std::ffi::OsString::from_vec(out)))
}

/// The `file:` URI of an absolute path.
pub fn uri(path: &Path) -> Option<Uri> {
    use std::os::unix::ffi::OsStrExt;
    let mut s = String::from("file://");
    for &b in path.as_os_str().as_bytes() {
        if b.is_ascii_alphanumeric() || b"/-._~".contains(&b) {
            s.push(b as char);
        } else {
            s.push_str(&format!("%{b:02X}"));
        }
    }
    Uri::from_str(&s).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_count_utf16_units() {
        let text = "ab\né😀x\n";
        for (offset, line, character) in [
            (0, 0, 0),
            (2, 0, 2),
            (3, 1, 0),
            (5, 1, 1),
            (9, 1, 3),
            (10, 1, 4),
            (11, 2, 0),
        ] {
            let p = Position { line, character };
            assert_eq!(position(text, offset), p, "{offset}");
            assert_eq!(super::offset(text, p), offset, "{p:?}");
        }
        // Past a line's end, past the text's end, inside a surrogate pair.
        assert_eq!(
            super::offset(
                text,
                Position {
                    line: 0,
                    character: 9
                }
            ),
            2
        );
        assert_eq!(
            super::offset(
                text,
                Position {
                    line: 7,
                    character: 0
                }
            ),
            11
        );
        assert_eq!(
            position(text, 7),
            Position {
                line: 1,
                character: 1
            }
        );
    }

    #[test]
    fn file_uris_round_trip() {
        for p in ["/tmp/a b/prod.env", "/srv/ü/x%y.env", "/plain/path.env"] {
            let u = uri(Path::new(p)).unwrap();
            assert_eq!(path(&u).unwrap(), Path::new(p), "{}", u.as_str());
        }
        assert_eq!(
            path(&Uri::from_str("file:///tmp/x%20y.env").unwrap()).unwrap(),
            Path::new("/tmp/x y.env")
        );
        assert!(path(&Uri::from_str("untitled:Untitled-1").unwrap()).is_none());
    }
}
