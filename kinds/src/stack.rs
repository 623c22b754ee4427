//! `stack` nodes: another environment's outputs as its last run published them
//! (`crate::stack`), read before the run and recorded as they are; never changed.

use std::sync::Arc;

use envc_ids::NodeKind;
use serde_json::json;

use crate::error::StepError;
use crate::node_type::{BoxFuture, Launch, Launching, NodeType, Payload, Realize, Unit, UnitCx};
use crate::record::{Applied, Facts};
use crate::spec::{NodeSpec, Val};
use crate::substitute::{display, Resolution, Resolving};

pub struct Stack;

/// The outputs read, as facts.
#[derive(Clone, Debug)]
pub struct Outputs(pub Facts);

impl NodeType for Stack {
    fn kind(&self) -> NodeKind {
        NodeKind::Stack
    }

    /// Typed as the other environment's source declares it.
    fn read_output(
        &self,
        producer: &NodeSpec,
        output: &str,
        facts: &Facts,
    ) -> Result<Val, Resolution> {
        let ty = envc_contract::stack::reads(producer)
            .into_iter()
            .find(|(n, _)| n == output)
            .map(|(_, t)| t);
        match (facts.get(&envc_contract::stack::fact(output)), ty) {
            (Some(s), Some(ty)) => envc_contract::stack::value(&ty, s).ok_or_else(|| {
                Resolution::Failed(format!(
                    "`{}` read `{output}` = {s:?}, which is not {}",
                    producer.key,
                    ty.name()
                ))
            }),
            _ => Err(Resolution::Failed(format!(
                "`{}` has no `{output}` to read: `{}` was never built, and `{output}` has no default (`defaults = {{ {output} = … }}`); build `{}` first",
                producer.key, producer.name, producer.name
            ))),
        }
    }

    fn resolve(&self, r: &mut Resolving<'_>) -> Result<Payload, Resolution> {
        let node = r.node;
        // A plan shows only what this environment reads, in its type; the hash covers
        // every output the node reads, as text, as it always did.
        let here = (r.spec.find(&node.key))
            .map(|i| envc_contract::stack::read_here(r.spec, i))
            .unwrap_or_default();
        let facts =
            match envc_contract::stack::facts(node, &node.name, r.spec.stacks.get(&node.name)) {
                Ok(facts) => facts,
                // Only a plan gets here (a build refuses before it starts): what is read is not
                // known yet, and what reads it waits for it, as for a machine not yet made.
                Err(e @ envc_contract::stack::StackError::NeverBuilt { .. }) => {
                    for (name, _) in envc_contract::stack::reads(node) {
                        let key = format!("output {name}");
                        let v = json!("(not known until it is built)");
                        if here.contains(&name) {
                            r.show(&key, "(not known until it is built)".into());
                        }
                        r.hash_only(&key, v);
                    }
                    return Ok(Arc::new(NotBuilt(e)));
                }
                Err(e) => return Err(Resolution::Failed(e.to_string())),
            };
        // The values read, not the run: a rebuild of it that published the same outputs
        // changes nothing here.
        for (name, ty) in envc_contract::stack::reads(node) {
            let v = facts
                .get(&envc_contract::stack::fact(&name))
                .cloned()
                .unwrap_or_default();
            let key = format!("output {name}");
            if here.contains(&name) {
                r.show(&key, display(&envc_contract::stack::shown(&ty, &v)));
            }
            r.hash_only(&key, json!(v));
        }
        Ok(Arc::new(Outputs(facts)))
    }
}

impl Realize for Outputs {
    fn predicted_facts(&self) -> Option<Facts> {
        Some(self.0.clone())
    }

    fn launch(&self, cx: &Launching<'_>) -> Launch {
        let name = &cx.spec.name;
        let note = self
            .0
            .get(envc_contract::stack::RUN)
            .map(|run| match run.as_str() {
                envc_contract::stack::NEVER_BUILT => {
                    format!("its defaults: `{name}` was never built")
                }
                run => format!("as run {run} of `{name}` published them"),
            });
        Launch::Alone(Box::new(Read(Applied {
            facts: self.0.clone(),
            created: false,
            note,
            log: None,
        })))
    }
}

/// The outputs of an environment never built: not known, so nothing that reads them can
/// be resolved yet (a plan shows them waiting), and a run of it fails saying why.
#[derive(Clone, Debug)]
pub struct NotBuilt(envc_contract::stack::StackError);

impl Realize for NotBuilt {
    fn predicted_facts(&self) -> Option<Facts> {
        None
    }

    fn launch(&self, _cx: &Launching<'_>) -> Launch {
        Launch::Alone(Box::new(Refused(self.0.to_string())))
    }
}

struct Refused(String);

impl Unit for Refused {
    fn run<'a>(self: Box<Self>, _cx: UnitCx<'a>) -> BoxFuture<'a, Result<Applied, StepError>> {
        Box::pin(async move { Err(StepError::new(self.0)) })
    }
}

/// What is known already, recorded as it is.
struct Read(Applied);

impl Unit for Read {
    fn run<'a>(self: Box<Self>, _cx: UnitCx<'a>) -> BoxFuture<'a, Result<Applied, StepError>> {
        Box::pin(async move { Ok(self.0) })
    }
}
