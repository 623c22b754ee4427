//! `service` nodes: a systemd unit on a target, enabled and running (or not), restarted
//! when what it reads changed; read back, and stopped and disabled when it leaves.

pub mod remote;
mod restore;

use std::sync::Arc;

use envc_ids::NodeKind;
use serde_json::json;

use crate::error::StepError;
use crate::node_type::{
    BoxFuture, Launch, Launching, NodeType, Payload, ProbeError, ReadsBack, Realize, Removable,
    Removal, Removing, Restores, Step, StepCx,
};
use crate::record::{Applied, Facts, RealizationRecord};
use crate::substitute::{Resolution, Resolving};
use crate::transport::Transport;
use remote::{apply_service, probe_services, remove_service, ServiceSpec};

pub struct Service;

/// A resolved `service` node.
#[derive(Clone, Debug)]
pub struct ServiceNode {
    pub name: String,
    pub enabled: bool,
    pub running: bool,
    /// Nodes whose change restarts the service.
    pub restart_on: Vec<usize>,
}

impl NodeType for Service {
    fn kind(&self) -> NodeKind {
        NodeKind::Service
    }

    fn restores(&self) -> Option<&dyn Restores> {
        Some(self)
    }

    fn resolve(&self, r: &mut Resolving<'_>) -> Result<Payload, Resolution> {
        let restart_on = r.nodes_of("restart_on");
        r.put_given("restart_on");
        r.put("enabled", json!(r.flag("enabled")));
        r.put("running", json!(r.flag("running")));
        Ok(Arc::new(ServiceNode {
            name: r.node.name.clone(),
            enabled: r.flag("enabled"),
            running: r.flag("running"),
            restart_on,
        }))
    }

    fn reads_back(&self) -> Option<&dyn ReadsBack> {
        Some(self)
    }

    fn removable(&self) -> Option<&dyn Removable> {
        Some(self)
    }
}

impl ReadsBack for Service {
    fn probe<'a>(
        &'a self,
        t: &'a Transport,
        names: &'a [String],
    ) -> BoxFuture<'a, Result<Vec<Option<Facts>>, ProbeError>> {
        // No systemd on the host is an answer about the services alone.
        Box::pin(async move { Ok(probe_services(t, names).await?) })
    }
}

impl Removable for Service {
    fn removal_rank(&self) -> u8 {
        1
    }

    fn remove<'a>(
        &'a self,
        cx: &'a Removing<'a>,
        records: Vec<(&'a RealizationRecord, String)>,
    ) -> BoxFuture<'a, Vec<Removal>> {
        Box::pin(async move {
            let mut out = Vec::new();
            for (r, name) in records {
                let res = remove_service(cx.transport, &name)
                    .await
                    .map(|()| "stopped and disabled".to_string());
                out.push(Removal::of(r, res));
            }
            out
        })
    }
}

impl Realize for ServiceNode {
    fn adopt_facts(&self) -> Option<Facts> {
        let enabled = if self.enabled { "enabled" } else { "disabled" };
        let active = if self.running { "active" } else { "inactive" };
        Some(Facts::from([
            ("enabled".to_string(), enabled.to_string()),
            ("active".to_string(), active.to_string()),
        ]))
    }

    fn launch(&self, cx: &Launching<'_>) -> Launch {
        // Restarted when what it reads changed since its record, or was just written by
        // this run: a unit its package already started must read the configuration
        // written after it.
        let ran_now = self.restart_on.iter().any(|j| (cx.ran_now)(*j));
        let restart = self.running
            && (ran_now
                || cx
                    .record
                    .is_some_and(|p| p.attrs.get("restart_on") != cx.display.get("restart_on")));
        Launch::OnTarget(Box::new(Apply(
            cx.node,
            ServiceSpec {
                name: self.name.clone(),
                enabled: self.enabled,
                running: self.running,
                restart,
            },
        )))
    }
}

/// One unit brought to its wanted state.
struct Apply(usize, ServiceSpec);

impl Step for Apply {
    fn nodes(&self) -> Vec<usize> {
        vec![self.0]
    }

    fn run<'a>(
        self: Box<Self>,
        cx: StepCx<'a>,
    ) -> BoxFuture<'a, Vec<(usize, Result<Applied, StepError>)>> {
        Box::pin(async move {
            let result = apply_service(cx.transport, &self.1)
                .await
                .map(|facts| Applied {
                    facts,
                    created: true,
                    note: None,
                    log: None,
                });
            vec![(self.0, result)]
        })
    }
}
