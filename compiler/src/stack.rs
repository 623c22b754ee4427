//! Stack references: `let core = stack("core.env")` reads another environment's recorded
//! outputs. Here, what a reference is and the types its outputs cross with: the program
//! holds the references and the checker types them. Finding them and checking the files
//! they name is `stack_load.rs`, above both, since it loads and checks other programs.

use std::collections::BTreeMap;
use std::rc::Rc;

use envc_lang::{FileId, Span};

use crate::types::Ty;

/// What crosses from one environment to another: an output's value as its state records it
/// (JSON), of one of these types: data, nested as deep as it is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OutputTy {
    Str,
    Int,
    Bool,
    /// Crosses whole: one deferred list.
    List(Box<OutputTy>),
    /// Crosses field by field: a record of deferred fields, so that `core.db.host` reads
    /// just that field (the executor reads it as output `db.host`).
    Record(BTreeMap<String, OutputTy>),
}

/// Why an output of the referenced environment does not cross.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NotCrossing {
    /// It holds a secret, which never leaves its own environment.
    Secret,
    /// It holds what is not data (a node, a function, a module…): shown as its type.
    NotData(String),
}

impl std::fmt::Display for NotCrossing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NotCrossing::Secret => f.write_str(
                "it holds a secret, and a secret never leaves its own environment's state",
            ),
            NotCrossing::NotData(t) => write!(
                f,
                "its type is {t}, and only data crosses: str, int, bool, and lists and records of them"
            ),
        }
    }
}

impl OutputTy {
    pub fn name(&self) -> String {
        match self {
            OutputTy::Str => "str".into(),
            OutputTy::Int => "int".into(),
            OutputTy::Bool => "bool".into(),
            OutputTy::List(t) => format!("list[{}]", t.name()),
            OutputTy::Record(fields) => {
                let fields: Vec<String> = fields
                    .iter()
                    .map(|(k, t)| format!("{k}: {}", t.name()))
                    .collect();
                format!("{{ {} }}", fields.join(", "))
            }
        }
    }

    pub fn from_name(s: &str) -> Option<OutputTy> {
        [OutputTy::Str, OutputTy::Int, OutputTy::Bool]
            .into_iter()
            .find(|t| t.name() == s)
    }

    /// How the referencing environment sees it: known only at deploy time (a record, field
    /// by field).
    pub fn ty(&self) -> Ty {
        match self {
            OutputTy::Record(fields) => record(None, fields.iter().map(|(k, t)| (k.as_str(), t))),
            t => Ty::deferred(t.value_ty()),
        }
    }

    /// The type of its value (a default for it is known now).
    pub fn value_ty(&self) -> Ty {
        match self {
            OutputTy::Str => Ty::Str,
            OutputTy::Int => Ty::Int,
            OutputTy::Bool => Ty::Bool,
            OutputTy::List(t) => Ty::List(Rc::new(t.value_ty())),
            OutputTy::Record(fields) => Ty::Record(Rc::new(crate::types::RecordTy {
                name: None,
                fields: fields
                    .iter()
                    .map(|(k, t)| {
                        let ty = t.value_ty();
                        (
                            k.as_str().into(),
                            crate::types::FieldTy { ty, default: None },
                        )
                    })
                    .collect(),
            })),
        }
    }

    /// The output type of a value of type `t` in the referenced environment, or why it
    /// cannot cross.
    pub(crate) fn of(t: &Ty) -> Result<OutputTy, NotCrossing> {
        match t {
            Ty::Deferred(inner) => OutputTy::of(inner),
            Ty::Ranged(base, _, _) => OutputTy::of(base),
            Ty::Str | Ty::Unknown => Ok(OutputTy::Str),
            Ty::Int => Ok(OutputTy::Int),
            Ty::Bool => Ok(OutputTy::Bool),
            Ty::Secret => Err(NotCrossing::Secret),
            Ty::List(el) => Ok(OutputTy::List(Box::new(OutputTy::of(el)?))),
            Ty::Record(r) => Ok(OutputTy::Record(
                r.fields
                    .iter()
                    .map(|(k, f)| Ok((k.to_string(), OutputTy::of(&f.ty)?)))
                    .collect::<Result<_, NotCrossing>>()?,
            )),
            t => Err(NotCrossing::NotData(format!("`{t}`"))),
        }
    }
}

/// A record type of deferred outputs.
fn record<'a>(name: Option<Rc<str>>, fields: impl Iterator<Item = (&'a str, &'a OutputTy)>) -> Ty {
    Ty::Record(Rc::new(crate::types::RecordTy {
        name,
        fields: fields
            .map(|(k, t)| {
                (
                    k.into(),
                    crate::types::FieldTy {
                        ty: t.ty(),
                        default: None,
                    },
                )
            })
            .collect(),
    }))
}

/// One `stack("…")` of the program.
#[derive(Clone, Debug)]
pub struct StackRef {
    /// The referenced environment's file, project-relative (the node's name).
    pub path: Rc<str>,
    /// Its outputs that can cross, by name; `None` when it could not be checked (reported).
    pub outputs: Option<BTreeMap<Rc<str>, OutputTy>>,
    /// Its outputs that cannot, and why: reading one says so.
    pub refused: BTreeMap<Rc<str>, NotCrossing>,
}

/// Every stack reference of a program, by (file, span) of its `stack(…)` call.
pub type StackRefs = BTreeMap<(FileId, Span), StackRef>;

/// The type of `stack("…")` at `span`: a record of the referenced outputs, deferred.
pub fn record_ty(stack: &StackRef) -> Ty {
    let Some(outputs) = &stack.outputs else {
        return Ty::Unknown;
    };
    let name = format!("stack(\"{}\")", stack.path).into();
    record(Some(name), outputs.iter().map(|(k, t)| (&**k, t)))
}
