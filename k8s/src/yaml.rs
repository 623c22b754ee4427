//! The canonical YAML of an object: one way to write each value, so that the same object
//! is the same bytes and a changed field is a one-line diff.
//!
//! - `apiVersion`, `kind`, `metadata` first, then the other fields in sorted order; in
//!   `metadata`, `name` and `namespace` first. Every other map is sorted by key.
//! - Block style, two spaces; `[]` and `{}` for empty lists and maps.
//! - A string is plain when it cannot be read as anything else, a literal block (`|`,
//!   `|-`) when it spans lines, and double-quoted (JSON escapes) otherwise.

use serde_json::Value as Json;

/// The object's canonical YAML, ending in a newline.
pub fn to_yaml(object: &Json) -> String {
    let mut out = String::new();
    match object {
        Json::Object(_) => map(&mut out, object, 0, &["apiVersion", "kind", "metadata"]),
        other => {
            scalar(&mut out, other, 0);
            out.push('\n');
        }
    }
    out
}

fn ordered<'a>(value: &'a Json, first: &[&str]) -> Vec<(&'a String, &'a Json)> {
    let Json::Object(m) = value else {
        return Vec::new();
    };
    let mut fields: Vec<(&String, &Json)> = m.iter().collect();
    fields.sort_by_key(|(k, _)| {
        (
            first.iter().position(|f| f == k).unwrap_or(first.len()),
            k.as_str(),
        )
    });
    fields
}

fn map(out: &mut String, value: &Json, indent: usize, first: &[&str]) {
    for (k, v) in ordered(value, first) {
        out.push_str(&" ".repeat(indent));
        key(out, k);
        out.push(':');
        let inner: &[&str] = if indent == 0 && k == "metadata" {
            &["name", "namespace"]
        } else {
            &[]
        };
        nested(out, v, indent, inner);
    }
}

/// What follows `key:` or `-`: a scalar on the same line, or a block on the next ones.
fn nested(out: &mut String, v: &Json, indent: usize, first: &[&str]) {
    match v {
        Json::Object(m) if !m.is_empty() => {
            out.push('\n');
            map(out, v, indent + 2, first);
        }
        Json::Array(xs) if !xs.is_empty() => {
            out.push('\n');
            list(out, xs, indent);
        }
        _ => {
            out.push(' ');
            scalar(out, v, indent + 2);
            out.push('\n');
        }
    }
}

fn list(out: &mut String, xs: &[Json], indent: usize) {
    for x in xs {
        out.push_str(&" ".repeat(indent));
        out.push('-');
        match x {
            // `- a: 1` with the map's other keys under it.
            Json::Object(m) if !m.is_empty() => {
                let mut inner = String::new();
                map(&mut inner, x, indent + 2, &[]);
                out.push(' ');
                out.push_str(&inner[indent + 2..]);
            }
            Json::Array(ys) if !ys.is_empty() => {
                out.push('\n');
                list(out, ys, indent + 2);
            }
            _ => {
                out.push(' ');
                scalar(out, x, indent + 2);
                out.push('\n');
            }
        }
    }
}

fn key(out: &mut String, k: &str) {
    if plain(k) {
        out.push_str(k);
    } else {
        out.push_str(&Json::String(k.to_string()).to_string());
    }
}

fn scalar(out: &mut String, v: &Json, indent: usize) {
    match v {
        Json::String(s) if plain(s) => out.push_str(s),
        Json::String(s) if block(s) => {
            // `|` keeps one final newline, `|-` none.
            out.push_str(if s.ends_with('\n') { "|" } else { "|-" });
            for line in s.strip_suffix('\n').unwrap_or(s).split('\n') {
                out.push('\n');
                if !line.is_empty() {
                    out.push_str(&" ".repeat(indent));
                    out.push_str(line);
                }
            }
        }
        Json::Object(_) => out.push_str("{}"),
        Json::Array(_) => out.push_str("[]"),
        other => out.push_str(&other.to_string()),
    }
}

/// Whether `s` reads back as this very string when written plain: no indicator, number,
/// boolean or null look-alike, nothing YAML would trim or split.
fn plain(s: &str) -> bool {
    let reserved = [
        "", "~", "null", "Null", "NULL", "true", "True", "TRUE", "false", "False", "FALSE", "yes",
        "Yes", "YES", "no", "No", "NO", "on", "On", "ON", "off", "Off", "OFF", "y", "Y", "n", "N",
        ".inf", ".Inf", ".INF", "-.inf", ".nan", ".NaN", ".NAN", "<<",
    ];
    if reserved.contains(&s) {
        return false;
    }
    let number_like = s.parse::<f64>().is_ok()
        || s.starts_with("0x")
        || s.starts_with("0o")
        || s.starts_with("0b")
        || s.chars().all(|c| {
            c.is_ascii_digit() || c == ':' || c == '_' || c == '.' || c == '-' || c == '+'
        });
    if number_like {
        return false;
    }
    let mut chars = s.chars();
    let first_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphanumeric() || c == '/' || c == '.' || c == '_');
    first_ok
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=@+".contains(c))
}

/// Whether `s` is written as a literal block: several lines, none of them with an edge
/// YAML would change (trailing blanks, tabs, a leading blank on the first line).
fn block(s: &str) -> bool {
    let body = s.strip_suffix('\n').unwrap_or(s);
    body.contains('\n')
        && !body.ends_with('\n')
        && !s.starts_with([' ', '\n'])
        && !s.contains(['\r', '\t', '\u{0}'])
        && body.split('\n').all(|l| !l.ends_with(' '))
        && s.chars().all(|c| !c.is_control() || c == '\n')
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn check(value: Json, expected: &str) {
        let y = to_yaml(&value);
        assert_eq!(y, expected, "\n{y}");
        // What it says is what it was.
        let back: Json = serde_yaml_ng::from_str(&y).unwrap();
        assert_eq!(back, value, "\n{y}");
    }

    #[test]
    fn objects_are_written_one_way() {
        check(
            json!({
                "kind": "ConfigMap",
                "apiVersion": "v1",
                "metadata": { "namespace": "web", "name": "app", "labels": { "tier": "front", "app": "web" } },
                "data": {
                    "app.conf": "listen 80;\nworkers 2;\n",
                    "peers": "10.0.0.1,10.0.0.2",
                    "port": "8080",
                    "debug": "true",
                    "motd": "hello: world",
                    "empty": "",
                    "tail": "no newline\nat the end",
                },
            }),
            "apiVersion: v1
kind: ConfigMap
metadata:
  name: app
  namespace: web
  labels:
    app: web
    tier: front
data:
  app.conf: |
    listen 80;
    workers 2;
  debug: \"true\"
  empty: \"\"
  motd: \"hello: world\"
  peers: \"10.0.0.1,10.0.0.2\"
  port: \"8080\"
  tail: |-
    no newline
    at the end
",
        );
    }

    #[test]
    fn lists_of_records_and_empties() {
        check(
            json!({
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": { "name": "web" },
                "spec": {
                    "replicas": 2,
                    "template": { "spec": { "containers": [
                        { "name": "web", "image": "nginx:1.27", "args": ["-g", "daemon off;"], "ports": [{ "containerPort": 80 }], "env": [] },
                    ] } },
                    "paused": false,
                    "selector": {},
                },
            }),
            "apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  paused: false
  replicas: 2
  selector: {}
  template:
    spec:
      containers:
      - args:
        - \"-g\"
        - \"daemon off;\"
        env: []
        image: \"nginx:1.27\"
        name: web
        ports:
        - containerPort: 80
",
        );
    }

    #[test]
    fn awkward_strings_round_trip() {
        for s in [
            "  lead", "trail ", "a\tb", "a\r\nb", "\nlead", "two\n\n", "- x", "#c", "x #c", "@a",
            "'q'", "\"dq\"", "1e3", "0x1f", "12:30", "é", "a\u{0}b", "null", "~", "- ", "?", ":",
            "a: b", "{x}", "[x]", "*a", "&a", "!t", "%p", "|", ">", "`b`", "x,y",
        ] {
            let v = json!({ "s": s, "l": [s] });
            let back: Json = serde_yaml_ng::from_str(&to_yaml(&v))
                .unwrap_or_else(|e| panic!("{s:?}: {e}\n{}", to_yaml(&v)));
            assert_eq!(back, v, "{s:?}\n{}", to_yaml(&v));
        }
    }
}
