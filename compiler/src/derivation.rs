//! The canonical, versioned encoding of a derivation and its id.
//!
//! The encoding is binary and self-delimiting: every value carries a type tag, strings and
//! collections carry their lengths, record keys are sorted (records are `BTreeMap`s), and
//! there are no floats. Nodes referenced from attributes appear as their ids, deferred values
//! as (producer id, output name): so an id covers everything upstream (a Merkle DAG) and
//! nothing about spans, comments, formatting or evaluation order.

use std::collections::BTreeMap;
use std::rc::Rc;

use crate::pin::PinKey;
use crate::value::{Check, Deferred, Node, Value};

/// Where it always was: `graph.rs` and other crates name it through this path.
pub use crate::id::DerivationId;

/// Bumped whenever the encoding changes: it is hashed, so every id changes with it.
pub const ENCODING_VERSION: u32 = 1;

/// What the encoder refuses (a function stored in a node, say); the evaluator reports it.
#[derive(Debug)]
pub struct NotEncodable(pub &'static str);

struct Encoder {
    buf: Vec<u8>,
}

impl Encoder {
    fn tag(&mut self, t: u8) {
        self.buf.push(t);
    }

    fn len(&mut self, n: usize) {
        self.buf.extend_from_slice(&(n as u64).to_le_bytes());
    }

    fn str(&mut self, s: &str) {
        self.len(s.len());
        self.buf.extend_from_slice(s.as_bytes());
    }

    fn id(&mut self, id: &DerivationId) {
        self.buf.extend_from_slice(&id.0);
    }

    fn value(&mut self, v: &Value) -> Result<(), NotEncodable> {
        match v {
            Value::Int(n) => {
                self.tag(b'i');
                self.buf.extend_from_slice(&n.to_le_bytes());
            }
            Value::Str(s) => {
                self.tag(b's');
                self.str(s);
            }
            Value::Bool(b) => {
                self.tag(b'b');
                self.buf.push(u8::from(*b));
            }
            Value::Size(n) => {
                self.tag(b'z');
                self.buf.extend_from_slice(&n.to_le_bytes());
            }
            Value::Mode(m) => {
                self.tag(b'm');
                self.buf.extend_from_slice(&m.to_le_bytes());
            }
            Value::Path(p) => {
                // The path relative to the project and the content: never an absolute path.
                self.tag(b'p');
                self.str(&p.path);
                self.buf.extend_from_slice(p.hash.as_bytes());
            }
            Value::List(xs) => {
                self.tag(b'l');
                self.len(xs.len());
                for x in xs.iter() {
                    self.value(x)?;
                }
            }
            Value::Record(r) => {
                self.tag(b'r');
                self.record(r)?;
            }
            Value::Node(n) => {
                self.tag(b'n');
                self.id(&n.id);
            }
            Value::Deferred(d) => match &**d {
                Deferred::Output { node, output } => {
                    self.tag(b'd');
                    self.id(&node.id);
                    self.str(output);
                }
                Deferred::Concat(parts) => {
                    self.tag(b'c');
                    self.len(parts.len());
                    for p in parts {
                        self.value(p)?;
                    }
                }
                Deferred::Json(inner) => {
                    self.tag(b'j');
                    self.value(inner)?;
                }
                // Its name only: the value never reaches the compiler.
                Deferred::Secret(name) => {
                    self.tag(b'e');
                    self.str(name);
                }
            },
            Value::Fn(_) | Value::Builtin(_) => return Err(NotEncodable("a function")),
            Value::Module(_) => return Err(NotEncodable("a module")),
            // Checks live beside a node's attributes, never in them (see `node_json`).
            Value::Check(_) => return Err(NotEncodable("a check")),
        }
        Ok(())
    }

    fn record(&mut self, r: &BTreeMap<Rc<str>, Value>) -> Result<(), NotEncodable> {
        self.len(r.len());
        for (k, v) in r {
            self.str(k);
            self.value(v)?;
        }
        Ok(())
    }
}

/// The fields of a derivation, borrowed from the node being built.
pub struct DerivationRef<'a> {
    pub kind: &'a str,
    pub name: &'a str,
    pub target: Option<&'a DerivationId>,
    pub attrs: &'a BTreeMap<Rc<str>, Value>,
    pub inputs: &'a [Rc<Node>],
    /// Lockfile pins this derivation uses (empty until the lockfile feeds them in).
    pub pins: &'a BTreeMap<PinKey, Rc<str>>,
}

pub fn encode(d: &DerivationRef) -> Result<Vec<u8>, NotEncodable> {
    let mut e = Encoder {
        buf: Vec::with_capacity(256),
    };
    e.buf.extend_from_slice(b"envc-derivation\0");
    e.buf.extend_from_slice(&ENCODING_VERSION.to_le_bytes());
    e.str(d.kind);
    e.str(d.name);
    match d.target {
        Some(t) => {
            e.tag(1);
            e.id(t);
        }
        None => e.tag(0),
    }
    e.record(d.attrs)?;
    e.len(d.inputs.len());
    for n in d.inputs {
        e.id(&n.id);
    }
    // In the keys' text order, which `PinKey`'s order is.
    e.len(d.pins.len());
    for (k, v) in d.pins {
        e.str(&k.to_string());
        e.str(v);
    }
    Ok(e.buf)
}

pub fn derivation_id(encoding: &[u8]) -> DerivationId {
    DerivationId(*blake3::hash(encoding).as_bytes())
}

/// The derivation as JSON, for `envc show` and `graph --format json`: the same content the
/// encoding hashes, with types made explicit where JSON has none.
pub fn value_json(v: &Value) -> serde_json::Value {
    use serde_json::json;
    match v {
        Value::Int(n) => json!(n),
        Value::Str(s) => json!(&**s),
        Value::Bool(b) => json!(b),
        Value::Size(n) => json!({ "size": crate::size::format_size(*n) }),
        Value::Mode(m) => json!({ "mode": format!("0o{m:o}") }),
        Value::Path(p) => json!({ "path": &*p.path, "blake3": p.hash.to_hex().as_str() }),
        Value::List(xs) => serde_json::Value::Array(xs.iter().map(value_json).collect()),
        Value::Record(r) => serde_json::Value::Object(
            r.iter()
                .map(|(k, v)| (k.to_string(), value_json(v)))
                .collect(),
        ),
        Value::Node(n) => json!({ "node": n.id.hex(), "kind": n.kind.name(), "name": &*n.name }),
        Value::Deferred(d) => match &**d {
            Deferred::Output { node, output } => {
                json!({ "deferred": { "node": node.id.hex(), "name": &*node.name, "output": &**output } })
            }
            Deferred::Concat(parts) => {
                json!({ "interpolate": parts.iter().map(value_json).collect::<Vec<_>>() })
            }
            Deferred::Secret(name) => json!({ "secret": &**name }),
            Deferred::Json(inner) => json!({ "json": value_json(inner) }),
        },
        Value::Fn(_) | Value::Builtin(_) => json!("<function>"),
        Value::Module(_) => json!("<module>"),
        Value::Check(c) => check_json(c),
    }
}

/// A check as JSON: its kind and arguments (no source location: that is not part of what
/// it checks). Two checks are the same check when their JSON is equal.
pub fn check_json(c: &Check) -> serde_json::Value {
    serde_json::json!({
        "check": c.kind.name(),
        "args": value_json(&Value::Record(Rc::new(c.args.clone()))),
    })
}

pub fn node_json(n: &Node) -> serde_json::Value {
    let mut j = serde_json::json!({
        "encoding": ENCODING_VERSION,
        "id": n.id.hex(),
        "kind": n.kind.name(),
        "name": &*n.name,
        "target": n.target.as_ref().map(|t| t.id.hex()),
        "attrs": value_json(&Value::Record(Rc::new(n.attrs.clone()))),
        "inputs": n.inputs.iter().map(|i| i.id.hex()).collect::<Vec<_>>(),
        "pins": n.pins.iter().map(|(k, v)| (k.to_string(), serde_json::json!(&**v))).collect::<serde_json::Map<_, _>>(),
    });
    // Checks and tags are shown beside the derivation, not in it: they are not part of
    // its id.
    for (name, checks) in [("expect", &n.expect), ("require", &n.require)] {
        if let (false, Some(o)) = (checks.is_empty(), j.as_object_mut()) {
            let list = checks.iter().map(|c| check_json(c)).collect();
            o.insert(name.into(), serde_json::Value::Array(list));
        }
    }
    if let (false, Some(o)) = (n.tags.is_empty(), j.as_object_mut()) {
        let tags = n
            .tags
            .iter()
            .map(|(k, v)| (k.to_string(), serde_json::json!(&**v)));
        o.insert("tags".into(), serde_json::Value::Object(tags.collect()));
    }
    j
}
