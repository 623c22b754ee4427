//! Stack references: `let core = stack("core.env")` reads another environment's recorded
//! outputs. Here, what a reference is and the types its outputs cross with: the program
//! holds the references and the checker types them. Finding them and checking the files
//! they name is `stack_load.rs`, above both, since it loads and checks other programs.

use std::collections::BTreeMap;
use std::rc::Rc;

use envc_lang::{FileId, Span};

use crate::types::Ty;

/// What crosses from one environment to another: an output's value as its state records it
/// (JSON), of one of these types.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutputTy {
    Str,
    Int,
    Bool,
}

impl OutputTy {
    pub fn name(self) -> &'static str {
        match self {
            OutputTy::Str => "str",
            OutputTy::Int => "int",
            OutputTy::Bool => "bool",
        }
    }

    pub fn from_name(s: &str) -> Option<OutputTy> {
        [OutputTy::Str, OutputTy::Int, OutputTy::Bool]
            .into_iter()
            .find(|t| t.name() == s)
    }

    /// How the referencing environment sees it: known only at deploy time.
    pub fn ty(self) -> Ty {
        Ty::deferred(self.value_ty())
    }

    /// The type of its value (a default for it is known now).
    pub fn value_ty(self) -> Ty {
        match self {
            OutputTy::Str => Ty::Str,
            OutputTy::Int => Ty::Int,
            OutputTy::Bool => Ty::Bool,
        }
    }

    /// The output type of a value of type `t` in the referenced environment, if it can
    /// cross. A secret never does; lists and records are left for later.
    pub(crate) fn of(t: &Ty) -> Option<OutputTy> {
        match t {
            Ty::Deferred(inner) => OutputTy::of(inner),
            Ty::Ranged(base, _, _) => OutputTy::of(base),
            Ty::Str | Ty::Unknown => Some(OutputTy::Str),
            Ty::Int => Some(OutputTy::Int),
            Ty::Bool => Some(OutputTy::Bool),
            _ => None,
        }
    }
}

/// One `stack("…")` of the program.
#[derive(Clone, Debug)]
pub struct StackRef {
    /// The referenced environment's file, project-relative (the node's name).
    pub path: Rc<str>,
    /// Its outputs that can cross, by name; `None` when it could not be checked (reported).
    pub outputs: Option<BTreeMap<Rc<str>, OutputTy>>,
}

/// Every stack reference of a program, by (file, span) of its `stack(…)` call.
pub type StackRefs = BTreeMap<(FileId, Span), StackRef>;

/// The type of `stack("…")` at `span`: a record of the referenced outputs, deferred.
pub fn record_ty(stack: &StackRef) -> Ty {
    let Some(outputs) = &stack.outputs else {
        return Ty::Unknown;
    };
    let fields = outputs
        .iter()
        .map(|(k, t)| {
            (
                k.clone(),
                crate::types::FieldTy {
                    ty: t.ty(),
                    default: None,
                },
            )
        })
        .collect();
    Ty::Record(Rc::new(crate::types::RecordTy {
        name: Some(format!("stack(\"{}\")", stack.path).into()),
        fields,
    }))
}
