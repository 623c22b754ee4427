//! cty, the type system providers speak: types as the schema's JSON gives them, and values
//! in the two wire encodings (msgpack, which carries unknowns, and JSON, which raw state
//! uses). Decoding is directed by the type, as cty's own is: a msgpack map is an object or a
//! map only by what the schema says.
//!
//! Objects and maps are `BTreeMap`s and a set keeps the order it was given, so the same value
//! encodes to the same bytes on every machine.

use std::collections::{BTreeMap, BTreeSet};

use crate::error::ValueError;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Type {
    String,
    Number,
    Bool,
    /// `"dynamic"`: any type, the value carrying its own (`DynamicPseudoType`).
    Dynamic,
    List(Box<Type>),
    Set(Box<Type>),
    Map(Box<Type>),
    Object(ObjectType),
    Tuple(Vec<Type>),
}

#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct ObjectType {
    pub attributes: BTreeMap<String, Type>,
    /// Attributes a value may leave null in a type constraint (`["object", {…}, [optional]]`).
    pub optional: BTreeSet<String>,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    Null,
    /// Known only after apply: a computed attribute the plan cannot tell.
    Unknown,
    String(String),
    /// cty numbers are arbitrary-precision decimals; kept as their decimal text.
    Number(String),
    Bool(bool),
    List(Vec<Value>),
    Set(Vec<Value>),
    Map(BTreeMap<String, Value>),
    Object(BTreeMap<String, Value>),
    Tuple(Vec<Value>),
}

impl Type {
    pub fn from_json(bytes: &[u8]) -> Result<Type, ValueError> {
        let json: serde_json::Value = serde_json::from_slice(bytes)
            .map_err(|e| ValueError::new(format!("a type that is not JSON: {e}")))?;
        Type::from_json_value(&json)
    }

    fn from_json_value(json: &serde_json::Value) -> Result<Type, ValueError> {
        use serde_json::Value as J;
        match json {
            J::String(s) => match s.as_str() {
                "string" => Ok(Type::String),
                "number" => Ok(Type::Number),
                "bool" => Ok(Type::Bool),
                "dynamic" => Ok(Type::Dynamic),
                other => Err(ValueError::new(format!(
                    "an unknown primitive type `{other}`"
                ))),
            },
            J::Array(parts) => {
                let kind = parts.first().and_then(J::as_str).unwrap_or_default();
                let element = || -> Result<Box<Type>, ValueError> {
                    match parts.get(1) {
                        Some(t) => Ok(Box::new(Type::from_json_value(t)?)),
                        None => Err(ValueError::new(format!(
                            "`{kind}` without its element type"
                        ))),
                    }
                };
                match kind {
                    "list" => Ok(Type::List(element()?)),
                    "set" => Ok(Type::Set(element()?)),
                    "map" => Ok(Type::Map(element()?)),
                    "object" => {
                        let Some(J::Object(attrs)) = parts.get(1) else {
                            return Err(ValueError::new("`object` without its attributes"));
                        };
                        let mut object = ObjectType::default();
                        for (name, t) in attrs {
                            object
                                .attributes
                                .insert(name.clone(), Type::from_json_value(t)?);
                        }
                        if let Some(J::Array(optional)) = parts.get(2) {
                            object.optional = optional
                                .iter()
                                .filter_map(|o| o.as_str().map(str::to_string))
                                .collect();
                        }
                        Ok(Type::Object(object))
                    }
                    "tuple" => {
                        let Some(J::Array(elements)) = parts.get(1) else {
                            return Err(ValueError::new("`tuple` without its element types"));
                        };
                        Ok(Type::Tuple(
                            elements
                                .iter()
                                .map(Type::from_json_value)
                                .collect::<Result<_, _>>()?,
                        ))
                    }
                    other => Err(ValueError::new(format!(
                        "an unknown type constructor `{other}`"
                    ))),
                }
            }
            other => Err(ValueError::new(format!("a type written as `{other}`"))),
        }
    }

    pub fn to_json(&self) -> serde_json::Value {
        use serde_json::json;
        match self {
            Type::String => json!("string"),
            Type::Number => json!("number"),
            Type::Bool => json!("bool"),
            Type::Dynamic => json!("dynamic"),
            Type::List(t) => json!(["list", t.to_json()]),
            Type::Set(t) => json!(["set", t.to_json()]),
            Type::Map(t) => json!(["map", t.to_json()]),
            Type::Object(o) => {
                let attrs: serde_json::Map<String, serde_json::Value> = o
                    .attributes
                    .iter()
                    .map(|(k, t)| (k.clone(), t.to_json()))
                    .collect();
                if o.optional.is_empty() {
                    json!(["object", attrs])
                } else {
                    json!(["object", attrs, o.optional.iter().collect::<Vec<_>>()])
                }
            }
            Type::Tuple(ts) => json!(["tuple", ts.iter().map(Type::to_json).collect::<Vec<_>>()]),
        }
    }

    /// How the type reads in a diagnostic: `list(string)`, `object({ name = string })`.
    pub fn describe(&self) -> String {
        match self {
            Type::String => "string".into(),
            Type::Number => "number".into(),
            Type::Bool => "bool".into(),
            Type::Dynamic => "any".into(),
            Type::List(t) => format!("list({})", t.describe()),
            Type::Set(t) => format!("set({})", t.describe()),
            Type::Map(t) => format!("map({})", t.describe()),
            Type::Object(o) => {
                let attrs: Vec<String> = o
                    .attributes
                    .iter()
                    .map(|(k, t)| format!("{k} = {}", t.describe()))
                    .collect();
                format!("object({{ {} }})", attrs.join(", "))
            }
            Type::Tuple(ts) => {
                format!(
                    "tuple([{}])",
                    ts.iter().map(Type::describe).collect::<Vec<_>>().join(", ")
                )
            }
        }
    }
}

/// cty's unknown value: msgpack fixext1 of extension type 0 (what cty itself writes).
const UNKNOWN: [u8; 3] = [0xd4, 0, 0];

impl Value {
    pub fn is_known(&self) -> bool {
        match self {
            Value::Unknown => false,
            Value::List(v) | Value::Set(v) | Value::Tuple(v) => v.iter().all(Value::is_known),
            Value::Map(m) | Value::Object(m) => m.values().all(Value::is_known),
            _ => true,
        }
    }

    /// An object's attribute, `Null` where the object or the attribute is absent.
    pub fn attr(&self, name: &str) -> &Value {
        match self {
            Value::Object(m) => m.get(name).unwrap_or(&Value::Null),
            _ => &Value::Null,
        }
    }

    pub fn to_msgpack(&self, ty: &Type) -> Result<Vec<u8>, ValueError> {
        let mut out = Vec::new();
        encode(&mut out, self, ty)?;
        Ok(out)
    }

    pub fn from_msgpack(bytes: &[u8], ty: &Type) -> Result<Value, ValueError> {
        let mut reader = Reader { bytes, at: 0 };
        let value = reader.value(ty)?;
        if reader.at != bytes.len() {
            return Err(ValueError::new(format!(
                "{} bytes left after the value",
                bytes.len() - reader.at
            )));
        }
        Ok(value)
    }

    /// The JSON form raw state uses: the value's own shape, no type tags except for
    /// `dynamic`, which is `{"value": …, "type": …}` as cty writes it.
    pub fn to_json(&self, ty: &Type) -> Result<serde_json::Value, ValueError> {
        use serde_json::Value as J;
        Ok(match (self, ty) {
            (Value::Null, _) => J::Null,
            (Value::Unknown, _) => {
                return Err(ValueError::new("an unknown value has no JSON form"));
            }
            (v, Type::Dynamic) => {
                let actual = v.implied_type();
                serde_json::json!({ "value": v.to_json(&actual)?, "type": actual.to_json() })
            }
            (Value::String(s), _) => J::String(s.clone()),
            (Value::Bool(b), _) => J::Bool(*b),
            (Value::Number(n), _) => serde_json::from_str::<serde_json::Number>(n)
                .map(J::Number)
                .unwrap_or(J::String(n.clone())),
            (Value::List(items), Type::List(t)) | (Value::Set(items), Type::Set(t)) => J::Array(
                items
                    .iter()
                    .map(|v| v.to_json(t))
                    .collect::<Result<_, _>>()?,
            ),
            (Value::Tuple(items), Type::Tuple(ts)) => J::Array(
                items
                    .iter()
                    .zip(ts)
                    .map(|(v, t)| v.to_json(t))
                    .collect::<Result<_, _>>()?,
            ),
            (Value::Map(m), Type::Map(t)) => J::Object(
                m.iter()
                    .map(|(k, v)| Ok((k.clone(), v.to_json(t)?)))
                    .collect::<Result<_, ValueError>>()?,
            ),
            (Value::Object(m), Type::Object(o)) => J::Object(
                o.attributes
                    .iter()
                    .map(|(k, t)| Ok((k.clone(), m.get(k).unwrap_or(&Value::Null).to_json(t)?)))
                    .collect::<Result<_, ValueError>>()?,
            ),
            (v, t) => return Err(mismatch(v, t)),
        })
    }

    pub fn from_json(json: &serde_json::Value, ty: &Type) -> Result<Value, ValueError> {
        use serde_json::Value as J;
        Ok(match (json, ty) {
            (J::Null, _) => Value::Null,
            (J::Object(m), Type::Dynamic) => {
                let actual = Type::from_json_value(m.get("type").unwrap_or(&J::Null))?;
                Value::from_json(m.get("value").unwrap_or(&J::Null), &actual)?
            }
            (J::String(s), Type::String) => Value::String(s.clone()),
            // cty's JSON decoder takes a string where a number or bool is expected, as
            // Terraform's configuration does.
            (J::String(s), Type::Number) => Value::Number(s.clone()),
            (J::Number(n), Type::Number) => Value::Number(n.to_string()),
            (J::Number(n), Type::String) => Value::String(n.to_string()),
            (J::Bool(b), Type::Bool) => Value::Bool(*b),
            (J::Bool(b), Type::String) => Value::String(b.to_string()),
            (J::String(s), Type::Bool) if s == "true" || s == "false" => Value::Bool(s == "true"),
            (J::Array(items), Type::List(t)) => Value::List(
                items
                    .iter()
                    .map(|j| Value::from_json(j, t))
                    .collect::<Result<_, _>>()?,
            ),
            (J::Array(items), Type::Set(t)) => Value::Set(
                items
                    .iter()
                    .map(|j| Value::from_json(j, t))
                    .collect::<Result<_, _>>()?,
            ),
            (J::Array(items), Type::Tuple(ts)) if items.len() == ts.len() => Value::Tuple(
                items
                    .iter()
                    .zip(ts)
                    .map(|(j, t)| Value::from_json(j, t))
                    .collect::<Result<_, _>>()?,
            ),
            (J::Object(m), Type::Map(t)) => Value::Map(
                m.iter()
                    .map(|(k, j)| Ok((k.clone(), Value::from_json(j, t)?)))
                    .collect::<Result<_, ValueError>>()?,
            ),
            (J::Object(m), Type::Object(o)) => Value::Object(
                o.attributes
                    .iter()
                    .map(|(k, t)| {
                        Ok((
                            k.clone(),
                            Value::from_json(m.get(k).unwrap_or(&J::Null), t)?,
                        ))
                    })
                    .collect::<Result<_, ValueError>>()?,
            ),
            (j, t) => {
                return Err(ValueError::new(format!(
                    "JSON `{j}` where {} is expected",
                    t.describe()
                )))
            }
        })
    }

    /// The type a value of a `dynamic` attribute is sent with.
    pub fn implied_type(&self) -> Type {
        match self {
            Value::Null | Value::Unknown => Type::Dynamic,
            Value::String(_) => Type::String,
            Value::Number(_) => Type::Number,
            Value::Bool(_) => Type::Bool,
            Value::List(v) => Type::List(Box::new(
                v.first().map(Value::implied_type).unwrap_or(Type::Dynamic),
            )),
            Value::Set(v) => Type::Set(Box::new(
                v.first().map(Value::implied_type).unwrap_or(Type::Dynamic),
            )),
            Value::Map(m) => Type::Map(Box::new(
                m.values()
                    .next()
                    .map(Value::implied_type)
                    .unwrap_or(Type::Dynamic),
            )),
            Value::Tuple(v) => Type::Tuple(v.iter().map(Value::implied_type).collect()),
            Value::Object(m) => Type::Object(ObjectType {
                attributes: m
                    .iter()
                    .map(|(k, v)| (k.clone(), v.implied_type()))
                    .collect(),
                optional: BTreeSet::new(),
            }),
        }
    }
}

fn mismatch(value: &Value, ty: &Type) -> ValueError {
    let shape = match value {
        Value::Null => "null",
        Value::Unknown => "unknown",
        Value::String(_) => "a string",
        Value::Number(_) => "a number",
        Value::Bool(_) => "a bool",
        Value::List(_) => "a list",
        Value::Set(_) => "a set",
        Value::Map(_) => "a map",
        Value::Object(_) => "an object",
        Value::Tuple(_) => "a tuple",
    };
    ValueError::new(format!("{shape} where {} is expected", ty.describe()))
}

fn encode(out: &mut Vec<u8>, value: &Value, ty: &Type) -> Result<(), ValueError> {
    match (value, ty) {
        (Value::Unknown, _) => out.extend_from_slice(&UNKNOWN),
        (Value::Null, _) => rmp::encode::write_nil(out).map_err(io)?,
        (v, Type::Dynamic) => {
            let actual = v.implied_type();
            rmp::encode::write_array_len(out, 2).map_err(io)?;
            let json = actual.to_json().to_string();
            rmp::encode::write_bin(out, json.as_bytes()).map_err(io)?;
            encode(out, v, &actual)?;
        }
        (Value::String(s), Type::String) => rmp::encode::write_str(out, s).map_err(io)?,
        (Value::Bool(b), Type::Bool) => rmp::encode::write_bool(out, *b).map_err(io)?,
        (Value::Number(n), Type::Number) => {
            if let Ok(i) = n.parse::<i64>() {
                rmp::encode::write_sint(out, i).map_err(io)?;
            } else if let Some(f) = n
                .parse::<f64>()
                .ok()
                .filter(|f| f.is_finite() && f.to_string() == *n)
            {
                rmp::encode::write_f64(out, f).map_err(io)?;
            } else {
                // What cty does with a number no float holds exactly: its decimal text.
                rmp::encode::write_str(out, n).map_err(io)?;
            }
        }
        (Value::List(items), Type::List(t)) | (Value::Set(items), Type::Set(t)) => {
            rmp::encode::write_array_len(out, len(items.len())?).map_err(io)?;
            for item in items {
                encode(out, item, t)?;
            }
        }
        (Value::Tuple(items), Type::Tuple(ts)) if items.len() == ts.len() => {
            rmp::encode::write_array_len(out, len(items.len())?).map_err(io)?;
            for (item, t) in items.iter().zip(ts) {
                encode(out, item, t)?;
            }
        }
        (Value::Map(m), Type::Map(t)) => {
            rmp::encode::write_map_len(out, len(m.len())?).map_err(io)?;
            for (k, v) in m {
                rmp::encode::write_str(out, k).map_err(io)?;
                encode(out, v, t)?;
            }
        }
        (Value::Object(m), Type::Object(o)) => {
            if let Some(extra) = m.keys().find(|k| !o.attributes.contains_key(*k)) {
                return Err(ValueError::new(format!(
                    "an attribute `{extra}` the type does not have"
                )));
            }
            // Every attribute of the type is written, null where the value has none.
            rmp::encode::write_map_len(out, len(o.attributes.len())?).map_err(io)?;
            for (k, t) in &o.attributes {
                rmp::encode::write_str(out, k).map_err(io)?;
                encode(out, m.get(k).unwrap_or(&Value::Null), t)?;
            }
        }
        (v, t) => return Err(mismatch(v, t)),
    }
    Ok(())
}

/// Writing into a Vec cannot fail; rmp's errors are those of the writer.
fn io<E>(_: E) -> ValueError {
    ValueError::new("msgpack writer failed")
}

fn len(n: usize) -> Result<u32, ValueError> {
    u32::try_from(n).map_err(|_| ValueError::new("a collection too large for msgpack"))
}

/// A msgpack reader over a byte slice that never reads past it.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8], ValueError> {
        let end = self.at.checked_add(n).filter(|e| *e <= self.bytes.len());
        let Some(end) = end else {
            return Err(ValueError::new("msgpack ends in the middle of a value"));
        };
        let slice = &self.bytes[self.at..end];
        self.at = end;
        Ok(slice)
    }

    fn byte(&mut self) -> Result<u8, ValueError> {
        Ok(self.take(1)?[0])
    }

    fn uint(&mut self, n: usize) -> Result<u64, ValueError> {
        Ok(self
            .take(n)?
            .iter()
            .fold(0u64, |acc, b| (acc << 8) | u64::from(*b)))
    }

    fn peek(&self) -> Result<u8, ValueError> {
        self.bytes
            .get(self.at)
            .copied()
            .ok_or_else(|| ValueError::new("msgpack ends where a value was expected"))
    }

    fn value(&mut self, ty: &Type) -> Result<Value, ValueError> {
        let marker = self.peek()?;
        if marker == 0xc0 {
            self.at += 1;
            return Ok(Value::Null);
        }
        if let Some(n) = ext_len(marker) {
            self.at += 1;
            let n = match n {
                ExtLen::Fixed(n) => n,
                ExtLen::Prefixed(width) => self.uint(width)? as usize,
            };
            let code = self.byte()? as i8;
            self.take(n)?;
            // 0 is an unknown; 12 an unknown with refinements (a newer cty), which envc
            // treats as plainly unknown.
            return match code {
                0 | 12 => Ok(Value::Unknown),
                other => Err(ValueError::new(format!(
                    "msgpack extension type {other}, which cty does not use"
                ))),
            };
        }
        match ty {
            Type::Dynamic => {
                if self.array_len()? != 2 {
                    return Err(ValueError::new("a dynamic value that is not [type, value]"));
                }
                let json = self.bytes_or_str()?;
                let actual = Type::from_json(&json)?;
                self.value(&actual)
            }
            Type::String => Ok(Value::String(self.string()?)),
            Type::Number => self.number().map(Value::Number),
            Type::Bool => match self.byte()? {
                0xc2 => Ok(Value::Bool(false)),
                0xc3 => Ok(Value::Bool(true)),
                other => Err(ValueError::new(format!(
                    "msgpack marker {other:#04x} where a bool is expected"
                ))),
            },
            Type::List(t) => {
                let n = self.array_len()?;
                Ok(Value::List(
                    (0..n).map(|_| self.value(t)).collect::<Result<_, _>>()?,
                ))
            }
            Type::Set(t) => {
                let n = self.array_len()?;
                Ok(Value::Set(
                    (0..n).map(|_| self.value(t)).collect::<Result<_, _>>()?,
                ))
            }
            Type::Tuple(ts) => {
                let n = self.array_len()?;
                if n != ts.len() {
                    return Err(ValueError::new(format!(
                        "a tuple of {n} where {} is expected",
                        ty.describe()
                    )));
                }
                Ok(Value::Tuple(
                    ts.iter().map(|t| self.value(t)).collect::<Result<_, _>>()?,
                ))
            }
            Type::Map(t) => {
                let n = self.map_len()?;
                let mut m = BTreeMap::new();
                for _ in 0..n {
                    let k = self.string()?;
                    m.insert(k, self.value(t)?);
                }
                Ok(Value::Map(m))
            }
            Type::Object(o) => {
                let n = self.map_len()?;
                let mut m = BTreeMap::new();
                for _ in 0..n {
                    let k = self.string()?;
                    let Some(t) = o.attributes.get(&k) else {
                        return Err(ValueError::new(format!(
                            "an attribute `{k}` the schema does not have"
                        )));
                    };
                    m.insert(k, self.value(t)?);
                }
                for k in o.attributes.keys() {
                    m.entry(k.clone()).or_insert(Value::Null);
                }
                Ok(Value::Object(m))
            }
        }
    }

    fn array_len(&mut self) -> Result<usize, ValueError> {
        match self.byte()? {
            m @ 0x90..=0x9f => Ok((m & 0x0f) as usize),
            0xdc => Ok(self.uint(2)? as usize),
            0xdd => Ok(self.uint(4)? as usize),
            other => Err(ValueError::new(format!(
                "msgpack marker {other:#04x} where an array is expected"
            ))),
        }
    }

    fn map_len(&mut self) -> Result<usize, ValueError> {
        match self.byte()? {
            m @ 0x80..=0x8f => Ok((m & 0x0f) as usize),
            0xde => Ok(self.uint(2)? as usize),
            0xdf => Ok(self.uint(4)? as usize),
            other => Err(ValueError::new(format!(
                "msgpack marker {other:#04x} where a map is expected"
            ))),
        }
    }

    fn bytes_or_str(&mut self) -> Result<Vec<u8>, ValueError> {
        let n = match self.byte()? {
            m @ 0xa0..=0xbf => (m & 0x1f) as usize,
            0xd9 | 0xc4 => self.uint(1)? as usize,
            0xda | 0xc5 => self.uint(2)? as usize,
            0xdb | 0xc6 => self.uint(4)? as usize,
            other => {
                return Err(ValueError::new(format!(
                    "msgpack marker {other:#04x} where a string is expected"
                )))
            }
        };
        Ok(self.take(n)?.to_vec())
    }

    fn string(&mut self) -> Result<String, ValueError> {
        String::from_utf8(self.bytes_or_str()?)
            .map_err(|_| ValueError::new("a string that is not UTF-8"))
    }

    fn number(&mut self) -> Result<String, ValueError> {
        let marker = self.peek()?;
        Ok(match marker {
            0x00..=0x7f => {
                self.at += 1;
                marker.to_string()
            }
            0xe0..=0xff => {
                self.at += 1;
                (marker as i8).to_string()
            }
            0xcc => {
                self.at += 1;
                self.uint(1)?.to_string()
            }
            0xcd => {
                self.at += 1;
                self.uint(2)?.to_string()
            }
            0xce => {
                self.at += 1;
                self.uint(4)?.to_string()
            }
            0xcf => {
                self.at += 1;
                self.uint(8)?.to_string()
            }
            0xd0 => {
                self.at += 1;
                (self.uint(1)? as u8 as i8).to_string()
            }
            0xd1 => {
                self.at += 1;
                (self.uint(2)? as u16 as i16).to_string()
            }
            0xd2 => {
                self.at += 1;
                (self.uint(4)? as u32 as i32).to_string()
            }
            0xd3 => {
                self.at += 1;
                (self.uint(8)? as i64).to_string()
            }
            0xca => {
                self.at += 1;
                f32::from_bits(self.uint(4)? as u32).to_string()
            }
            0xcb => {
                self.at += 1;
                f64::from_bits(self.uint(8)?).to_string()
            }
            _ => {
                let text = self.string()?;
                if text.parse::<f64>().is_err() {
                    return Err(ValueError::new(format!(
                        "`{text}` where a number is expected"
                    )));
                }
                text
            }
        })
    }
}

enum ExtLen {
    Fixed(usize),
    Prefixed(usize),
}

fn ext_len(marker: u8) -> Option<ExtLen> {
    match marker {
        0xd4 => Some(ExtLen::Fixed(1)),
        0xd5 => Some(ExtLen::Fixed(2)),
        0xd6 => Some(ExtLen::Fixed(4)),
        0xd7 => Some(ExtLen::Fixed(8)),
        0xd8 => Some(ExtLen::Fixed(16)),
        0xc7 => Some(ExtLen::Prefixed(1)),
        0xc8 => Some(ExtLen::Prefixed(2)),
        0xc9 => Some(ExtLen::Prefixed(4)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(pairs: &[(&str, Value)]) -> Value {
        Value::Object(
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.clone()))
                .collect(),
        )
    }

    fn ty(json: &str) -> Type {
        Type::from_json(json.as_bytes()).unwrap()
    }

    /// One value through msgpack: the bytes it encodes to (hex) and back to itself. The
    /// expected bytes were checked against Python's msgpack (an encoder of its own), and
    /// d4 00 00 is the unknown cty itself writes.
    fn check(t: &str, value: Value, hex: &str) {
        let t = ty(t);
        let bytes = value.to_msgpack(&t).unwrap();
        let got: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(got, hex, "encoding of {value:?}");
        assert_eq!(
            Value::from_msgpack(&bytes, &t).unwrap(),
            value,
            "round trip of {hex}"
        );
    }

    #[test]
    fn values_encode_as_cty_does() {
        check(r#""string""#, Value::String("ab".into()), "a26162");
        check(r#""number""#, Value::Number("5".into()), "05");
        check(r#""number""#, Value::Number("-300".into()), "d1fed4");
        check(
            r#""number""#,
            Value::Number("1.5".into()),
            "cb3ff8000000000000",
        );
        // More digits than a float holds: cty writes the decimal text.
        check(
            r#""number""#,
            Value::Number("0.10000000000000000001".into()),
            "b6302e3130303030303030303030303030303030303031",
        );
        check(r#""bool""#, Value::Bool(true), "c3");
        check(r#""string""#, Value::Null, "c0");
        check(r#""string""#, Value::Unknown, "d40000");
        check(
            r#"["list","string"]"#,
            Value::List(vec![Value::String("a".into())]),
            "91a161",
        );
        check(
            r#"["object",{"b":"bool","a":"string"}]"#,
            obj(&[("a", Value::Unknown), ("b", Value::Null)]),
            "82a161d40000a162c0",
        );
        // A dynamic value carries its type's JSON as msgpack bin.
        check(r#""dynamic""#, Value::Bool(false), "92c40622626f6f6c22c2");
    }

    #[test]
    fn an_object_missing_attributes_gets_nulls_and_a_stray_one_is_refused() {
        let t = ty(r#"["object",{"a":"string","b":"string"}]"#);
        let bytes = obj(&[("a", Value::String("x".into()))])
            .to_msgpack(&t)
            .unwrap();
        assert_eq!(
            Value::from_msgpack(&bytes, &t).unwrap().attr("b"),
            &Value::Null
        );
        let err = obj(&[("c", Value::Null)]).to_msgpack(&t).unwrap_err();
        assert_eq!(err.to_string(), "an attribute `c` the type does not have");
    }

    #[test]
    fn malformed_msgpack_is_an_error_never_a_panic() {
        let t = ty(r#"["map",["list","number"]]"#);
        for bytes in [
            &[0x81][..],
            &[0xdf, 0xff, 0xff, 0xff, 0xff],
            &[0x81, 0xa1, 0x61, 0xdd, 0, 0, 0, 9],
            &[0xc1],
        ] {
            assert!(Value::from_msgpack(bytes, &t).is_err(), "{bytes:02x?}");
        }
        assert!(Value::from_msgpack(&[0xc3, 0xc3], &ty(r#""bool""#)).is_err());
    }

    #[test]
    fn types_read_and_write_the_schema_json() {
        for json in [
            r#""string""#,
            r#"["set",["map","number"]]"#,
            r#"["object",{"a":"bool","b":["tuple",["string","dynamic"]]},["b"]]"#,
        ] {
            assert_eq!(ty(json).to_json().to_string(), json);
        }
        assert_eq!(
            ty(r#"["object",{"a":["list","string"]}]"#).describe(),
            "object({ a = list(string) })"
        );
        assert!(Type::from_json(br#"["lisst","string"]"#).is_err());
    }

    #[test]
    fn json_round_trips_with_the_type() {
        let t = ty(r#"["object",{"n":"number","tags":["map","string"],"any":"dynamic"}]"#);
        let v = obj(&[
            ("n", Value::Number("3".into())),
            (
                "tags",
                Value::Map([("k".to_string(), Value::String("v".into()))].into()),
            ),
            ("any", Value::List(vec![Value::Bool(true)])),
        ]);
        let json = v.to_json(&t).unwrap();
        assert_eq!(
            json.to_string(),
            r#"{"any":{"type":["list","bool"],"value":[true]},"n":3,"tags":{"k":"v"}}"#
        );
        assert_eq!(Value::from_json(&json, &t).unwrap(), v);
        assert!(Value::Unknown.to_json(&Type::String).is_err());
    }
}
