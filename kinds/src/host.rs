//! `host` nodes: a machine envc did not make, reached over SSH where the source says, and
//! known by its host key (the target identity).

use std::sync::Arc;

use envc_ids::NodeKind;
use serde_json::json;

use crate::connect::{host_facts, recorded_key, Connections};
use crate::error::StepError;
use crate::node_type::{
    BoxFuture, Launch, Launching, LockNeeds, NodeType, Payload, Realize, Unit, UnitCx,
};
use crate::record::{Applied, Facts, RealizationRecord};
use crate::spec::Val;
use crate::substitute::{Resolution, Resolving};
use crate::transport::{HostKey, HostSpec};

pub struct Host;

impl NodeType for Host {
    fn kind(&self) -> NodeKind {
        NodeKind::Host
    }

    fn renews_trust(&self) -> bool {
        true
    }

    fn lock_needs(&self, _node: &crate::spec::NodeSpec, cx: &mut LockNeeds<'_>) {
        cx.tool("ssh");
    }

    fn reach_record(
        &self,
        name: &str,
        record: &RealizationRecord,
        _cx: &Connections,
    ) -> Option<HostSpec> {
        crate::connect::host_from_record(name, record)
    }

    fn identity_facts(&self) -> &'static [&'static str] {
        use envc_ids::fact::machine::{FINGERPRINT, HOST_KEY};
        &[HOST_KEY, FINGERPRINT]
    }

    fn resolve(&self, r: &mut Resolving<'_>) -> Result<Payload, Resolution> {
        let port = match r.attrs.get("port") {
            Some(Val::Int(p)) => u16::try_from(*p).unwrap_or(22),
            _ => 22,
        };
        let host = HostSpec {
            name: r.node.name.clone(),
            address: r.text("address"),
            port,
            user: r.text("user"),
            identity: None,
        };
        r.put("address", json!(host.address));
        r.put("port", json!(host.port));
        r.put("user", json!(host.user));
        Ok(Arc::new(HostNode(host)))
    }

    fn update_keeps_facts(&self) -> bool {
        true
    }
}

/// A resolved `host` node: where the source says the machine is.
#[derive(Debug)]
pub struct HostNode(pub HostSpec);

impl Realize for HostNode {
    fn address(&self) -> Option<&HostSpec> {
        Some(&self.0)
    }

    fn reach(&self, _name: &str, _facts: Option<&Facts>, _cx: &Connections) -> Option<HostSpec> {
        Some(self.0.clone())
    }

    fn launch(&self, cx: &Launching<'_>) -> Launch {
        Launch::Alone(Box::new(Connect {
            key: cx.spec.key.clone(),
            host: self.0.clone(),
            recorded: cx.record.and_then(|r| recorded_key(&r.facts)),
        }))
    }
}

/// Connect to a host and learn its key.
struct Connect {
    key: String,
    host: HostSpec,
    recorded: Option<HostKey>,
}

impl Unit for Connect {
    fn run<'a>(self: Box<Self>, cx: UnitCx<'a>) -> BoxFuture<'a, Result<Applied, StepError>> {
        Box::pin(async move {
            let (_, k) = cx.conns.get(&self.key, &self.host, self.recorded).await?;
            Ok(Applied {
                facts: host_facts(&k),
                created: false,
                note: None,
                log: None,
            })
        })
    }
}
