//! `exec` nodes: a command run on a target, once per change of what it runs (or as its
//! guards decide), with what it printed recorded; undone by its `undo` when it leaves.

pub mod remote;

use std::collections::BTreeMap;
use std::sync::Arc;

use envc_ids::NodeKind;
use serde_json::json;

use crate::error::StepError;
use crate::node_type::{
    BoxFuture, Launch, Launching, NodeType, Payload, Realize, Removable, Removal, Removing, Step,
    StepCx,
};
use crate::record::{Applied, RealizationRecord};
use crate::spec::{NodeSpec, Val};
use crate::substitute::{content_display, holds_sealed, Resolution, Resolving};
use remote::{apply_exec, undo_exec, CommandLine, ExecSpec};

pub struct Exec;

impl NodeType for Exec {
    fn kind(&self) -> NodeKind {
        NodeKind::Exec
    }

    fn run_facts(&self) -> &'static [&'static str] {
        &["inputs", "stdout"]
    }

    fn resolve(&self, r: &mut Resolving<'_>) -> Result<Payload, Resolution> {
        let spec = exec_spec(r.node, &r.attrs)?;
        // What it runs, as whom, where, with what, and what decides or undoes it: a
        // change to any of them is a change of the node. Not its timeout.
        for k in [
            "argv", "shell", "env", "user", "cwd", "creates", "unless", "only_if", "undo",
            "capture",
        ] {
            r.put_given(k);
        }
        match r.attrs.get("stdin") {
            Some(Val::Sealed(_)) => r.put_given("stdin"),
            other => {
                let given = other.is_some();
                r.hash_only("stdin", json!(blake3::hash(&spec.stdin).to_hex().as_str()));
                if given {
                    r.show("stdin", content_display(&spec.stdin));
                }
            }
        }
        r.show("timeout", spec.command.timeout_secs.to_string());
        Ok(Arc::new(spec))
    }

    fn left_in_place(&self) -> &'static str {
        "forgotten: it never ran here (a guard found it unnecessary)"
    }

    fn removable(&self) -> Option<&dyn Removable> {
        Some(self)
    }
}

impl Removable for Exec {
    fn removal_rank(&self) -> u8 {
        0
    }

    fn forgotten(&self, record: &RealizationRecord) -> Option<&'static str> {
        // A command without an undo is only forgotten: no need to reach its target.
        record.undo.is_none().then_some("forgotten: it has no undo")
    }

    fn remove<'a>(
        &'a self,
        cx: &'a Removing<'a>,
        mut records: Vec<(&'a RealizationRecord, String)>,
    ) -> BoxFuture<'a, Vec<Removal>> {
        Box::pin(async move {
            // Newest first: one may need what an older one made.
            records.sort_by_key(|(r, _)| std::cmp::Reverse(r.at_unix));
            let mut out = Vec::new();
            for (r, _) in records {
                let Some(undo) = &r.undo else { continue };
                let (result, log) = match undo_exec(cx.transport, undo).await {
                    Ok(log) => (Ok("undone: exit 0".to_string()), Some(log)),
                    Err(e) => (Err(e), None),
                };
                out.push(Removal {
                    node: r.node.clone(),
                    result,
                    log,
                });
            }
            out
        })
    }
}

impl Realize for ExecSpec {
    fn launch(&self, cx: &Launching<'_>) -> Launch {
        let mut e = self.clone();
        e.inputs = cx.hash.to_string();
        // A guard that skips it keeps what it reported when it last ran here.
        e.previous = cx.record_here.map(|r| r.facts.clone());
        Launch::OnTarget(Box::new(Run(cx.node, Box::new(e))))
    }

    fn undo(&self) -> Option<CommandLine> {
        self.undo_command()
    }
}

/// One command run.
struct Run(usize, Box<ExecSpec>);

impl Step for Run {
    fn nodes(&self) -> Vec<usize> {
        vec![self.0]
    }

    fn run<'a>(
        self: Box<Self>,
        cx: StepCx<'a>,
    ) -> BoxFuture<'a, Vec<(usize, Result<Applied, StepError>)>> {
        Box::pin(async move { vec![(self.0, apply_exec(cx.transport, &self.1).await)] })
    }
}

/// An `exec` node's command as the target runs it.
fn exec_spec(node: &NodeSpec, attrs: &BTreeMap<String, Val>) -> Result<ExecSpec, Resolution> {
    let fail = |m: String| Resolution::Failed(format!("`{}`: {m}", node.key));
    let strs = |k: &str| -> Result<Option<Vec<String>>, Resolution> {
        match attrs.get(k) {
            None => Ok(None),
            Some(Val::List(xs)) => xs
                .iter()
                .map(|x| match x {
                    Val::Str(s) => Ok(s.clone()),
                    Val::Sealed(_) => Err(fail(format!(
                        "`{k}` holds a secret, which would show in the target's process list; pass it in `env` or `stdin`"
                    ))),
                    other => Err(fail(format!("`{k}` holds {other:?}, not a string"))),
                })
                .collect::<Result<_, _>>()
                .map(Some),
            Some(other) => Err(fail(format!("`{k}` is {other:?}, not a list of strings"))),
        }
    };
    let text = |k: &str| -> Result<Option<String>, Resolution> {
        match attrs.get(k) {
            None => Ok(None),
            Some(Val::Str(s)) => Ok(Some(s.clone())),
            Some(Val::Sealed(s)) if matches!(k, "stdin") => Ok(Some(s.value.clone())),
            Some(Val::Sealed(_)) => Err(fail(format!(
                "`{k}` holds a secret; a command takes secrets in `env` or `stdin` only"
            ))),
            Some(other) => Err(fail(format!("`{k}` is {other:?}, not a string"))),
        }
    };
    let argv = match (strs("argv")?, text("shell")?) {
        (Some(argv), None) => argv,
        (None, Some(script)) => vec!["sh".into(), "-c".into(), script, "sh".into()],
        _ => {
            return Err(fail(
                "an exec takes exactly one of `argv` and `shell`".into(),
            ))
        }
    };
    let env = match attrs.get("env") {
        None => BTreeMap::new(),
        Some(Val::Record(r)) => r
            .iter()
            .map(|(k, v)| match v {
                Val::Str(s) => Ok((k.clone(), s.clone())),
                Val::Sealed(s) => Ok((k.clone(), s.value.clone())),
                other => Err(fail(format!("`env.{k}` is {other:?}, not a string"))),
            })
            .collect::<Result<_, _>>()?,
        Some(other) => Err(fail(format!("`env` is {other:?}, not a record")))?,
    };
    let timeout_secs = match attrs.get("timeout") {
        Some(Val::Int(n)) => u64::try_from(*n).unwrap_or(600),
        _ => 600,
    };
    let spec = ExecSpec {
        name: node.name.clone(),
        command: CommandLine {
            argv,
            env,
            user: text("user")?.filter(|u| !u.is_empty()),
            cwd: text("cwd")?.unwrap_or_else(|| "/".into()),
            timeout_secs,
        },
        stdin: text("stdin")?.unwrap_or_default().into_bytes(),
        creates: text("creates")?,
        unless: strs("unless")?,
        only_if: strs("only_if")?,
        capture: matches!(attrs.get("capture"), Some(Val::Bool(true))),
        undo: strs("undo")?,
        inputs: String::new(),
        previous: None,
    };
    spec.validate().map_err(|e| fail(e.to_string()))?;
    // The record keeps the undo with the env: it must hold no secret (the compiler says so
    // first).
    if spec.undo.is_some() && attrs.get("env").is_some_and(holds_sealed) {
        return Err(fail(
            "an exec with an `undo` cannot take a secret in `env`".into(),
        ));
    }
    Ok(spec)
}
