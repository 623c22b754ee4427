//! The pure library functions (`len`, `join`, `path`, …). They ask the evaluator only for
//! what [`Context`] names, so the evaluator calls them and they never name it back.

use std::collections::BTreeMap;
use std::rc::Rc;

use envc_lang::{Diagnostic, FileId, Span};

use crate::builtins::Builtin;
use crate::derivation::value_json;
use crate::stop::Stop;
use crate::value::{display, Deferred, ProjectFile, Value};

type R<T> = Result<T, Stop>;

/// What a library function asks of the evaluator that calls it (`eval.rs` implements it):
/// the file being evaluated, for messages; the string limit; and the evaluator's own
/// concatenation, equality and project files, so that `join`, `contains`, `read` and
/// `path` behave exactly as the language does elsewhere.
pub(crate) trait Context {
    fn file(&self) -> FileId;
    fn max_string_bytes(&self) -> usize;
    /// `what`, written out, would pass the size limit.
    fn too_large(&self, span: Span, what: &str) -> Diagnostic;
    fn concat(&mut self, parts: Vec<Value>, span: Span) -> R<Value>;
    fn equal(&mut self, a: &Value, b: &Value, span: Span) -> R<bool>;
    fn read_project_file(&mut self, p: &ProjectFile, span: Span) -> R<Value>;
    fn project_file(&mut self, rel: &str, span: Span) -> R<Value>;
}

fn wrong(ev: &impl Context, f: &str, expected: &str, v: &Value, span: Span) -> Stop {
    Stop::from(
        Diagnostic::new(
            "type::mismatch",
            format!("`{f}` expected {expected}, found {}", v.type_name()),
        )
        .label(ev.file(), span, format!("this is {}", v.type_name())),
    )
}

fn no_deferred(ev: &impl Context, f: &str, v: &Value, span: Span) -> R<()> {
    if v.is_deferred() {
        return Err(Stop::from(crate::check::deferred_diagnostic(
            ev.file(),
            span,
            &format!("`{f}`"),
            &crate::types::Ty::deferred(crate::types::Ty::Str),
        )));
    }
    Ok(())
}

/// The elements of a list of ints, strings or sizes (all alike), in ascending order.
fn sorted(ev: &impl Context, name: &str, (v, s): (Value, Span)) -> R<Vec<Value>> {
    no_deferred(ev, name, &v, s)?;
    let Value::List(xs) = &v else {
        return Err(wrong(ev, name, "a list", &v, s));
    };
    let mut ints: Vec<i64> = Vec::new();
    let mut strs: Vec<Rc<str>> = Vec::new();
    let mut sizes: Vec<u64> = Vec::new();
    for x in xs.iter() {
        no_deferred(ev, name, x, s)?;
        match x {
            Value::Int(n) if strs.is_empty() && sizes.is_empty() => ints.push(*n),
            Value::Str(t) if ints.is_empty() && sizes.is_empty() => strs.push(t.clone()),
            Value::Size(n) if ints.is_empty() && strs.is_empty() => sizes.push(*n),
            other => {
                return Err(wrong(
                    ev,
                    name,
                    "a list of ints, strings or sizes, all alike",
                    other,
                    s,
                ))
            }
        }
    }
    ints.sort_unstable();
    strs.sort_unstable();
    sizes.sort_unstable();
    Ok(ints
        .into_iter()
        .map(Value::Int)
        .chain(strs.into_iter().map(Value::Str))
        .chain(sizes.into_iter().map(Value::Size))
        .collect())
}

pub(crate) fn call<E: Context>(
    ev: &mut E,
    b: Builtin,
    arg: &dyn Fn(usize) -> (Value, Span),
    span: Span,
) -> R<Value> {
    let name = b.name();
    let str_arg = |ev: &E, i: usize| -> R<Rc<str>> {
        let (v, s) = arg(i);
        no_deferred(ev, name, &v, s)?;
        match v {
            Value::Str(x) => Ok(x),
            other => Err(wrong(ev, name, "str", &other, s)),
        }
    };
    Ok(match b {
        Builtin::Len => {
            let (v, s) = arg(0);
            no_deferred(ev, name, &v, s)?;
            Value::Int(match &v {
                Value::List(xs) => xs.len() as i64,
                Value::Str(x) => x.chars().count() as i64,
                Value::Record(r) => r.len() as i64,
                other => return Err(wrong(ev, name, "a list, string or record", other, s)),
            })
        }
        Builtin::Keys | Builtin::Values => {
            let (v, s) = arg(0);
            match &v {
                Value::Record(r) if b == Builtin::Keys => Value::List(
                    r.keys()
                        .map(|k| Value::Str(k.clone()))
                        .collect::<Vec<_>>()
                        .into(),
                ),
                Value::Record(r) => Value::List(r.values().cloned().collect::<Vec<_>>().into()),
                other => return Err(wrong(ev, name, "a record", other, s)),
            }
        }
        Builtin::Join => {
            let (items, s) = arg(0);
            let sep = str_arg(ev, 1)?;
            let Value::List(xs) = &items else {
                return Err(wrong(ev, name, "a list", &items, s));
            };
            let mut parts = Vec::with_capacity(xs.len() * 2);
            for (i, x) in xs.iter().enumerate() {
                if i > 0 {
                    parts.push(Value::Str(sep.clone()));
                }
                match x {
                    Value::Str(_) | Value::Deferred(_) => parts.push(x.clone()),
                    other => return Err(wrong(ev, name, "a list of strings", other, s)),
                }
            }
            ev.concat(parts, span)?
        }
        Builtin::Split => {
            let text = str_arg(ev, 0)?;
            let sep = str_arg(ev, 1)?;
            if sep.is_empty() {
                let (_, s) = arg(1);
                return Err(Stop::from(
                    Diagnostic::new(
                        "eval::empty-separator",
                        "cannot split on an empty separator",
                    )
                    .label(ev.file(), s, "this is \"\""),
                ));
            }
            Value::List(
                text.split(&*sep)
                    .map(|p| Value::Str(p.into()))
                    .collect::<Vec<_>>()
                    .into(),
            )
        }
        Builtin::Get => {
            let (r, s) = arg(0);
            no_deferred(ev, name, &r, s)?;
            let key = str_arg(ev, 1)?;
            match &r {
                Value::Record(fields) => match fields.get(&key) {
                    Some(v) => v.clone(),
                    None => arg(2).0,
                },
                other => return Err(wrong(ev, name, "a record", other, s)),
            }
        }
        Builtin::Contains => {
            let (hay, s) = arg(0);
            let (needle, ns) = arg(1);
            no_deferred(ev, name, &hay, s)?;
            no_deferred(ev, name, &needle, ns)?;
            match (&hay, &needle) {
                (Value::Str(h), Value::Str(n)) => Value::Bool(h.contains(&**n)),
                (Value::Record(r), Value::Str(k)) => Value::Bool(r.contains_key(k)),
                (Value::List(xs), _) => {
                    let mut found = false;
                    for x in xs.iter() {
                        if ev.equal(x, &needle, span)? {
                            found = true;
                            break;
                        }
                    }
                    Value::Bool(found)
                }
                (other, _) => return Err(wrong(ev, name, "a list, string or record", other, s)),
            }
        }
        Builtin::StartsWith => Value::Bool(str_arg(ev, 0)?.starts_with(&*str_arg(ev, 1)?)),
        Builtin::EndsWith => Value::Bool(str_arg(ev, 0)?.ends_with(&*str_arg(ev, 1)?)),
        Builtin::Upper => Value::Str(str_arg(ev, 0)?.to_uppercase().into()),
        Builtin::Lower => Value::Str(str_arg(ev, 0)?.to_lowercase().into()),
        Builtin::Trim => Value::Str(str_arg(ev, 0)?.trim().into()),
        Builtin::Replace => {
            let text = str_arg(ev, 0)?;
            let from = str_arg(ev, 1)?;
            let to = str_arg(ev, 2)?;
            if from.is_empty() {
                Value::Str(text)
            } else {
                let grown = text.matches(&*from).count().saturating_mul(to.len());
                if grown > ev.max_string_bytes() {
                    return Err(Stop::from(
                        Diagnostic::new("eval::too-large", "string too large").label(
                            ev.file(),
                            span,
                            "the replacement makes a huge string",
                        ),
                    ));
                }
                Value::Str(text.replace(&*from, &to).into())
            }
        }
        Builtin::ToStr => {
            let (v, s) = arg(0);
            match &v {
                Value::Str(_) | Value::Deferred(_) => v,
                Value::Int(_) | Value::Bool(_) | Value::Size(_) | Value::Mode(_) => {
                    Value::Str(display(&v).into())
                }
                other => {
                    return Err(wrong(
                        ev,
                        name,
                        "a string, number, size, mode or bool",
                        other,
                        s,
                    ))
                }
            }
        }
        Builtin::Sort => Value::List(sorted(ev, name, arg(0))?.into()),
        Builtin::Min | Builtin::Max => {
            let (v, s) = arg(0);
            let xs = sorted(ev, name, (v, s))?;
            let pick = if b == Builtin::Min {
                xs.first()
            } else {
                xs.last()
            };
            match pick {
                Some(x) => x.clone(),
                None => {
                    return Err(Stop::from(
                        Diagnostic::new("eval::empty-list", format!("`{name}` of an empty list"))
                            .label(ev.file(), s, "has no elements")
                            .help(format!(
                                "an empty list has no {}; check `len(…) > 0` first",
                                if b == Builtin::Min {
                                    "least element"
                                } else {
                                    "greatest element"
                                }
                            )),
                    ))
                }
            }
        }
        Builtin::All | Builtin::Any => {
            let (v, s) = arg(0);
            no_deferred(ev, name, &v, s)?;
            let Value::List(xs) = &v else {
                return Err(wrong(ev, name, "a list of bools", &v, s));
            };
            let mut bools = Vec::with_capacity(xs.len());
            for x in xs.iter() {
                no_deferred(ev, name, x, s)?;
                match x {
                    Value::Bool(t) => bools.push(*t),
                    other => return Err(wrong(ev, name, "a list of bools", other, s)),
                }
            }
            Value::Bool(if b == Builtin::All {
                bools.iter().all(|t| *t)
            } else {
                bools.iter().any(|t| *t)
            })
        }
        Builtin::Read => {
            let (v, s) = arg(0);
            let Value::Path(p) = &v else {
                return Err(wrong(ev, name, "a project file (`path(\"x.txt\")`)", &v, s));
            };
            ev.read_project_file(p, s)?
        }
        Builtin::Merge => {
            let (a, sa) = arg(0);
            let (b2, sb) = arg(1);
            match (&a, &b2) {
                (Value::Record(x), Value::Record(y)) => {
                    let mut out: BTreeMap<Rc<str>, Value> = (**x).clone();
                    out.extend(y.iter().map(|(k, v)| (k.clone(), v.clone())));
                    Value::Record(Rc::new(out))
                }
                (Value::Record(_), other) => return Err(wrong(ev, name, "a record", other, sb)),
                (other, _) => return Err(wrong(ev, name, "a record", other, sa)),
            }
        }
        Builtin::Path => {
            let p = str_arg(ev, 0)?;
            let (_, s) = arg(0);
            ev.project_file(&p, s)?
        }
        Builtin::Secret => {
            let secret = str_arg(ev, 0)?;
            if !crate::value::is_secret_name(&secret) {
                let (_, s) = arg(0);
                return Err(Stop::Error(Box::new(
                    Diagnostic::new(
                        "eval::bad-secret-name",
                        format!("invalid secret name: `{}`", secret.escape_debug()),
                    )
                    .label(ev.file(), s, "not a secret name")
                    .help("name it with letters, digits and `_-.`, starting with a letter, at most 64 characters: `pg_replication_password`"),
                )));
            }
            Value::Deferred(Rc::new(Deferred::Secret(secret)))
        }
        Builtin::ToJson => {
            let (v, s) = arg(0);
            if !crate::value::expands_within(&v, ev.max_string_bytes()) {
                return Err(Stop::Error(Box::new(ev.too_large(s, "this value as JSON"))));
            }
            if contains_deferred(&v) {
                // Deferred like any string that holds a deferred value: the known JSON
                // around each deferred leaf now, the leaf written (and escaped) as JSON by
                // the executor once it is known.
                let mut parts = Vec::new();
                let mut text = String::new();
                json_parts(&v, &mut text, &mut parts);
                if !text.is_empty() {
                    parts.push(Value::Str(text.into()));
                }
                ev.concat(parts, span)?
            } else {
                Value::Str(value_json(&v).to_string().into())
            }
        }
        Builtin::Node(_) | Builtin::Check(_) | Builtin::Nodes => {
            unreachable!("nodes and checks are built by the evaluator")
        }
    })
}

/// `v` as canonical JSON, exactly as `value_json(v).to_string()` writes it, with each
/// deferred leaf left as a `Deferred::Json` part between the known text.
fn json_parts(v: &Value, text: &mut String, parts: &mut Vec<Value>) {
    match v {
        Value::Deferred(_) => {
            if !text.is_empty() {
                parts.push(Value::Str(std::mem::take(text).into()));
            }
            parts.push(Value::Deferred(Rc::new(Deferred::Json(v.clone()))));
        }
        Value::List(xs) if contains_deferred(v) => {
            text.push('[');
            for (i, x) in xs.iter().enumerate() {
                if i > 0 {
                    text.push(',');
                }
                json_parts(x, text, parts);
            }
            text.push(']');
        }
        Value::Record(r) if contains_deferred(v) => {
            text.push('{');
            for (i, (k, x)) in r.iter().enumerate() {
                if i > 0 {
                    text.push(',');
                }
                text.push_str(&serde_json::Value::from(&**k).to_string());
                text.push(':');
                json_parts(x, text, parts);
            }
            text.push('}');
        }
        known => text.push_str(&value_json(known).to_string()),
    }
}

fn contains_deferred(v: &Value) -> bool {
    match v {
        Value::Deferred(_) => true,
        Value::List(xs) => xs.iter().any(contains_deferred),
        Value::Record(r) => r.values().any(contains_deferred),
        _ => false,
    }
}
