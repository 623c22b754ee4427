//! Types. The checker is gradual: a parameter without an annotation or default has type
//! `Unknown`, which is compatible with everything statically and checked against the
//! values that actually flow at evaluation. `Deferred(T)` marks a value known only after a
//! node is realized (a VM's address): it may be passed, stored and interpolated, but not
//! branched on, computed with, or used to name a node.

use std::collections::BTreeMap;
use std::fmt;
use std::rc::Rc;

use envc_lang::ast::Expr;

pub type ModuleId = usize;

/// Node kinds are identities, shared with crates that know nothing of the language.
pub use envc_ids::NodeKind;

/// The kinds of check a node can take in `expect` (postconditions) and `require`
/// (preconditions). Each is a probe run on the node's target; `builtins::CHECKS` holds
/// their parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum CheckKind {
    Tcp,
    Http,
    Command,
    Installed,
    OsRelease,
    FreeSpace,
    EmptyDir,
}

impl CheckKind {
    pub const ALL: [CheckKind; 7] = [
        CheckKind::Tcp,
        CheckKind::Http,
        CheckKind::Command,
        CheckKind::Installed,
        CheckKind::OsRelease,
        CheckKind::FreeSpace,
        CheckKind::EmptyDir,
    ];

    pub fn name(self) -> &'static str {
        match self {
            CheckKind::Tcp => "tcp",
            CheckKind::Http => "http",
            CheckKind::Command => "command",
            CheckKind::Installed => "installed",
            CheckKind::OsRelease => "os_release",
            CheckKind::FreeSpace => "free_space",
            CheckKind::EmptyDir => "empty_dir",
        }
    }

    pub fn from_name(s: &str) -> Option<CheckKind> {
        CheckKind::ALL.into_iter().find(|k| k.name() == s)
    }
}

/// What a node-typed slot accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeTy {
    Kind(NodeKind),
    /// `target`: a `vm` or a `host`.
    Target,
    /// `node`: any node.
    Any,
}

impl NodeTy {
    pub fn accepts(self, k: NodeKind) -> bool {
        match self {
            NodeTy::Kind(x) => x == k,
            NodeTy::Target => k.is_target(),
            NodeTy::Any => true,
        }
    }
}

#[derive(Clone, Debug)]
pub enum Ty {
    Unknown,
    Int,
    Str,
    Bool,
    Size,
    Mode,
    /// A file of the project, hashed by content (`path("x.conf")`).
    Path,
    /// A string only the executor reads (`secret("name")`), and whatever is interpolated
    /// from one. Always wrapped in `Deferred`; it stands wherever a `str` may, but a plain
    /// string does not stand where a `secret` is wanted: a component that asks for a
    /// password cannot be handed one written in the source.
    Secret,
    /// `int(1..=65535)`, `size(1GiB..=64GiB)`: the base type, checked against the bounds
    /// whenever a value is given this type.
    Ranged(Rc<Ty>, i128, i128),
    List(Rc<Ty>),
    /// A record with computed keys: `dict[T]`.
    Dict(Rc<Ty>),
    Record(Rc<RecordTy>),
    Fn(Rc<FnTy>),
    Node(NodeTy),
    Deferred(Rc<Ty>),
    Module(ModuleId),
    /// A pre- or postcondition (`http(…)`, `tcp(…)`, …), given to a node's `expect` or
    /// `require`.
    Check,
}

#[derive(Clone, Debug)]
pub struct RecordTy {
    /// The declared name, for messages; `None` for the type of a record literal.
    pub name: Option<Rc<str>>,
    pub fields: BTreeMap<Rc<str>, FieldTy>,
}

#[derive(Clone, Debug)]
pub struct FieldTy {
    pub ty: Ty,
    /// Evaluated in the declaring module when the field is missing.
    pub default: Option<(ModuleId, Rc<Expr>)>,
}

#[derive(Clone, Debug)]
pub struct FnTy {
    pub params: Vec<ParamTy>,
    pub ret: Ty,
}

#[derive(Clone, Debug)]
pub struct ParamTy {
    pub name: Rc<str>,
    pub ty: Ty,
    pub required: bool,
    /// The value must be known at compile time (a node's name).
    pub known: bool,
}

impl Ty {
    pub fn list(t: Ty) -> Ty {
        Ty::List(Rc::new(t))
    }

    pub fn deferred(t: Ty) -> Ty {
        match t {
            Ty::Deferred(_) | Ty::Unknown => t,
            t => Ty::Deferred(Rc::new(t)),
        }
    }

    pub fn is_deferred(&self) -> bool {
        matches!(self, Ty::Deferred(_))
    }

    /// The type without `Deferred` and range bounds.
    pub fn base(&self) -> &Ty {
        match self {
            Ty::Deferred(t) | Ty::Ranged(t, _, _) => t.base(),
            t => t,
        }
    }

    pub fn is_unknown(&self) -> bool {
        matches!(self.base(), Ty::Unknown)
    }
}

impl fmt::Display for Ty {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Ty::Unknown => f.write_str("any"),
            Ty::Int => f.write_str("int"),
            Ty::Str => f.write_str("str"),
            Ty::Bool => f.write_str("bool"),
            Ty::Size => f.write_str("size"),
            Ty::Mode => f.write_str("mode"),
            Ty::Path => f.write_str("path"),
            Ty::Secret => f.write_str("secret"),
            Ty::Ranged(t, lo, hi) if matches!(**t, Ty::Size) => {
                let size = |n: i128| crate::size::format_size(u64::try_from(n).unwrap_or(0));
                write!(f, "size({}..={})", size(*lo), size(*hi))
            }
            Ty::Ranged(t, lo, hi) => write!(f, "{t}({lo}..={hi})"),
            Ty::List(t) => write!(f, "list[{t}]"),
            Ty::Dict(t) => write!(f, "dict[{t}]"),
            Ty::Record(r) => match &r.name {
                Some(n) => f.write_str(n),
                None => {
                    f.write_str("{ ")?;
                    for (i, (k, v)) in r.fields.iter().enumerate() {
                        if i > 0 {
                            f.write_str(", ")?;
                        }
                        write!(f, "{k}: {}", v.ty)?;
                    }
                    f.write_str(" }")
                }
            },
            Ty::Fn(func) => {
                f.write_str("fn(")?;
                for (i, p) in func.params.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{}: {}", p.name, p.ty)?;
                }
                write!(f, ") -> {}", func.ret)
            }
            Ty::Node(NodeTy::Kind(k)) => f.write_str(k.name()),
            Ty::Node(NodeTy::Target) => f.write_str("target"),
            Ty::Node(NodeTy::Any) => f.write_str("node"),
            Ty::Deferred(t) if matches!(**t, Ty::Secret) => f.write_str("secret"),
            Ty::Deferred(t) => write!(f, "deferred {t}"),
            Ty::Module(_) => f.write_str("module"),
            Ty::Check => f.write_str("check"),
        }
    }
}

/// Why a value of one type cannot stand where another is expected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mismatch {
    Types {
        expected: String,
        found: String,
    },
    MissingField {
        field: Rc<str>,
        record: String,
    },
    UnknownField {
        field: Rc<str>,
        record: String,
        suggestion: Option<String>,
    },
}

/// Can a value of type `actual` be used where `expected` is wanted? Deferred values flow
/// anywhere their base type fits: positions that need a known value check that separately.
pub fn assignable(actual: &Ty, expected: &Ty) -> Result<(), Mismatch> {
    use Ty::*;
    let mismatch = || Mismatch::Types {
        expected: expected.to_string(),
        found: actual.to_string(),
    };
    match (actual, expected) {
        (Unknown, _) | (_, Unknown) => Ok(()),
        // Said here, before `Deferred` is unwrapped, so that the message names the whole
        // type found (`deferred str`).
        (a, e) if matches!(e.base(), Secret) && !matches!(a.base(), Secret | Unknown) => {
            Err(mismatch())
        }
        (Deferred(a), e) | (Ranged(a, _, _), e) => assignable(a, e),
        (a, Deferred(e)) | (a, Ranged(e, _, _)) => assignable(a, e),
        (Int, Int)
        | (Str, Str)
        | (Bool, Bool)
        | (Size, Size)
        | (Mode, Mode)
        | (Path, Path)
        | (Secret, Secret | Str)
        | (Check, Check) => Ok(()),
        // A field wrong inside an element is said as such (at the field); a wrong element
        // type, of the whole list.
        (List(a), List(e)) | (Dict(a), Dict(e)) => assignable(a, e).map_err(|m| match m {
            Mismatch::Types { .. } => mismatch(),
            field => field,
        }),
        (Record(r), Dict(e)) => {
            for f in r.fields.values() {
                assignable(&f.ty, e).map_err(|_| mismatch())?;
            }
            Ok(())
        }
        (Dict(_), Record(_)) => Ok(()),
        (Record(a), Record(e)) => {
            let record = expected.to_string();
            // A misspelt field is one field written wrong, not one missing and one unknown.
            for extra in a.fields.keys().filter(|k| !e.fields.contains_key(*k)) {
                let missing = e
                    .fields
                    .iter()
                    .filter(|(k, f)| f.default.is_none() && !a.fields.contains_key(*k))
                    .map(|(k, _)| &**k);
                if let Some(suggestion) = envc_lang::did_you_mean(extra, missing) {
                    return Err(Mismatch::UnknownField {
                        field: extra.clone(),
                        record,
                        suggestion: Some(suggestion),
                    });
                }
            }
            for (name, ef) in &e.fields {
                match a.fields.get(name) {
                    Some(af) => assignable(&af.ty, &ef.ty).map_err(|m| match m {
                        Mismatch::Types { expected, found } => Mismatch::Types {
                            expected: format!("{expected} for field `{name}`"),
                            found,
                        },
                        other => other,
                    })?,
                    None if ef.default.is_some() => {}
                    None => {
                        return Err(Mismatch::MissingField {
                            field: name.clone(),
                            record,
                        })
                    }
                }
            }
            if let Some(extra) = a.fields.keys().find(|k| !e.fields.contains_key(*k)) {
                let suggestion = envc_lang::did_you_mean(extra, e.fields.keys().map(|k| &**k));
                return Err(Mismatch::UnknownField {
                    field: extra.clone(),
                    record,
                    suggestion,
                });
            }
            Ok(())
        }
        (Fn(_), Fn(_)) => Ok(()),
        (Node(NodeTy::Kind(a)), Node(e)) => {
            if e.accepts(*a) {
                Ok(())
            } else {
                Err(mismatch())
            }
        }
        (Node(a), Node(e)) => {
            // `target` into `node`, or a general node where a specific kind is wanted:
            // the evaluator checks the actual node.
            let _ = (a, e);
            Ok(())
        }
        _ => Err(mismatch()),
    }
}

/// The type of a value that may come from either of two places (branches, list elements).
/// `None` when they have nothing in common.
pub fn join(a: &Ty, b: &Ty) -> Option<Ty> {
    use Ty::*;
    Some(match (a, b) {
        (Unknown, _) | (_, Unknown) => Unknown,
        (Deferred(x), y) | (y, Deferred(x)) => Ty::deferred(join(x, y)?),
        (Ranged(x, _, _), y) | (y, Ranged(x, _, _)) => join(x, y)?,
        // Either a secret or a plain string: only a string is sure.
        (Secret, Str) | (Str, Secret) => Str,
        (List(x), List(y)) => Ty::list(join(x, y)?),
        (Dict(x), Dict(y)) => Dict(Rc::new(join(x, y)?)),
        (Record(x), Record(y)) => {
            if let (Some(nx), Some(ny)) = (&x.name, &y.name) {
                if nx == ny {
                    return Some(a.clone());
                }
            }
            // The fields both have; a record of other shape is still a record.
            let mut fields = BTreeMap::new();
            for (k, fx) in &x.fields {
                if let Some(fy) = y.fields.get(k) {
                    if let Some(t) = join(&fx.ty, &fy.ty) {
                        fields.insert(
                            k.clone(),
                            FieldTy {
                                ty: t,
                                default: None,
                            },
                        );
                    }
                }
            }
            Record(Rc::new(RecordTy { name: None, fields }))
        }
        (Node(NodeTy::Kind(x)), Node(NodeTy::Kind(y))) if x == y => a.clone(),
        (Node(x), Node(y)) => {
            let both_targets = [x, y].iter().all(|n| {
                matches!(
                    n,
                    NodeTy::Target | NodeTy::Kind(NodeKind::Vm | NodeKind::Host)
                )
            });
            Node(if both_targets {
                NodeTy::Target
            } else {
                NodeTy::Any
            })
        }
        (Fn(_), Fn(_)) => a.clone(),
        _ if assignable(a, b).is_ok() && assignable(b, a).is_ok() => a.clone(),
        _ => return None,
    })
}

/// The built-in type names usable in annotations.
pub fn builtin_type(name: &str) -> Option<Ty> {
    Some(match name {
        "int" => Ty::Int,
        "str" => Ty::Str,
        "bool" => Ty::Bool,
        "size" => Ty::Size,
        "mode" => Ty::Mode,
        "path" => Ty::Path,
        "secret" => Ty::deferred(Ty::Secret),
        "any" => Ty::Unknown,
        "target" => Ty::Node(NodeTy::Target),
        "node" => Ty::Node(NodeTy::Any),
        "check" => Ty::Check,
        // A `stack(…)` is a record of another environment's outputs, never a node value.
        other => Ty::Node(NodeTy::Kind(
            NodeKind::from_name(other).filter(|k| *k != NodeKind::Stack)?,
        )),
    })
}

pub const BUILTIN_TYPE_NAMES: &[&str] = &[
    "int", "str", "bool", "size", "mode", "path", "secret", "any", "target", "node", "vm", "host",
    "package", "file", "service", "manifest", "image", "exec", "gitops", "list", "dict", "check",
];

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(fields: &[(&str, Ty, bool)]) -> Ty {
        Ty::Record(Rc::new(RecordTy {
            name: Some("R".into()),
            fields: fields
                .iter()
                .map(|(n, t, d)| {
                    let default = d.then(|| (0, Rc::new(Expr::error(Default::default()))));
                    (
                        Rc::from(*n),
                        FieldTy {
                            ty: t.clone(),
                            default,
                        },
                    )
                })
                .collect(),
        }))
    }

    fn check(actual: &Ty, expected: &Ty, ok: bool) {
        assert_eq!(
            assignable(actual, expected).is_ok(),
            ok,
            "{actual} into {expected}"
        );
    }

    #[test]
    fn assignability() {
        check(&Ty::Int, &Ty::Int, true);
        check(&Ty::Int, &Ty::Str, false);
        check(&Ty::deferred(Ty::Str), &Ty::Str, true);
        check(&Ty::Unknown, &Ty::Str, true);
        check(
            &Ty::Node(NodeTy::Kind(NodeKind::Vm)),
            &Ty::Node(NodeTy::Target),
            true,
        );
        check(
            &Ty::Node(NodeTy::Kind(NodeKind::File)),
            &Ty::Node(NodeTy::Target),
            false,
        );
        let declared = rec(&[("name", Ty::Str, false), ("port", Ty::Int, true)]);
        let lit = |f: &[(&str, Ty)]| {
            rec(&f
                .iter()
                .map(|(n, t)| (*n, t.clone(), false))
                .collect::<Vec<_>>())
        };
        check(&lit(&[("name", Ty::Str)]), &declared, true);
        check(&lit(&[("port", Ty::Int)]), &declared, false);
        check(
            &lit(&[("name", Ty::Str), ("prot", Ty::Int)]),
            &declared,
            false,
        );
        check(&lit(&[("name", Ty::Int)]), &declared, false);
    }

    /// A secret stands where a string may; a string, deferred or not, never stands where a
    /// secret is wanted, and the message names the whole type found.
    #[test]
    fn secrets_flow_one_way() {
        let secret = builtin_type("secret").unwrap();
        assert_eq!(secret.to_string(), "secret");
        check(&secret, &Ty::Str, true);
        check(&secret, &Ty::deferred(Ty::Str), true);
        check(&secret, &secret, true);
        check(&Ty::Unknown, &secret, true);
        check(&Ty::Str, &secret, false);
        check(&Ty::Int, &secret, false);
        assert_eq!(
            assignable(&Ty::deferred(Ty::Str), &secret),
            Err(Mismatch::Types {
                expected: "secret".into(),
                found: "deferred str".into()
            })
        );
        check(&Ty::list(secret.clone()), &Ty::list(Ty::Str), true);
        check(&Ty::list(Ty::Str), &Ty::list(secret.clone()), false);
        assert_eq!(join(&secret, &Ty::Str).unwrap().to_string(), "deferred str");
        assert_eq!(join(&secret, &secret).unwrap().to_string(), "secret");
    }

    #[test]
    fn joins() {
        assert!(join(&Ty::Int, &Ty::Str).is_none());
        assert_eq!(
            join(&Ty::Str, &Ty::deferred(Ty::Str)).unwrap().to_string(),
            "deferred str"
        );
        let t = join(
            &Ty::Node(NodeTy::Kind(NodeKind::Vm)),
            &Ty::Node(NodeTy::Kind(NodeKind::Host)),
        )
        .unwrap();
        assert_eq!(t.to_string(), "target");
    }
}
