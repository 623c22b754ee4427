//! Values of the compiled graph as people read them: deferred parts named by where they
//! will come from (`graph`'s text, the picture's attributes before a node resolves).

/// A part of a deferred string as it reads inside the string.
fn part(p: &envc_compiler::value::Value) -> String {
    use envc_compiler::value::{Deferred, Value};
    match p {
        Value::Str(s) => s.to_string(),
        Value::Deferred(d) => match &**d {
            Deferred::Output { node, output } => format!("${{{}.{output}}}", node.name),
            Deferred::Concat(parts) => parts.iter().map(part).collect(),
            // `to_json`'s deferred leaf: the value it writes (as JSON, once known).
            Deferred::Json(inner) => part(inner),
            Deferred::Secret(name) => format!("${{secret({name:?})}}"),
        },
        other => human(other),
    }
}

/// A value as a person reads it; deferred parts show where they will come from.
pub fn human(v: &envc_compiler::value::Value) -> String {
    use envc_compiler::value::{Deferred, Value};
    match v {
        Value::Deferred(d) => match &**d {
            Deferred::Output { node, output } => {
                format!("({}.{output}, known after deploy)", node.name)
            }
            Deferred::Secret(name) => format!("(secret {name:?})"),
            Deferred::Json(inner) => human(inner),
            Deferred::Concat(parts) => {
                let text: String = parts.iter().map(part).collect();
                format!("{text:?} (known after deploy)")
            }
        },
        Value::List(xs) => format!("[{}]", xs.iter().map(human).collect::<Vec<_>>().join(", ")),
        other => envc_compiler::derivation::value_json(other).to_string(),
    }
}
