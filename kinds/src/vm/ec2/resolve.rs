//! A `vm` with `cloud = { provider = "aws", … }` resolved into an [`Ec2Machine`], and how
//! the scheduler runs one.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::json;

use super::network::NetworkSpec;
use super::{Ec2Machine, ImageChoice, NAME};
use crate::connect::{vm_host, Connections};
use crate::error::StepError;
use crate::node_type::{
    Adopted, Adopting, BoxFuture, Launch, Launching, Payload, Realize, Unit, UnitCx,
};
use crate::record::{Applied, Facts};
use crate::spec::{strings, Val};
use crate::substitute::{Resolution, Resolving};
use crate::transport::HostSpec;

pub fn resolve(
    r: &mut Resolving<'_>,
    cloud: &BTreeMap<String, Val>,
) -> Result<Payload, Resolution> {
    let text = |fields: &BTreeMap<String, Val>, k: &str| match fields.get(k) {
        Some(Val::Str(s)) => s.clone(),
        _ => String::new(),
    };
    let provider = text(cloud, "provider");
    if provider != NAME {
        return Err(r.fail(&format!(
            "cloud provider `{provider}` is not one envc knows (it knows `{NAME}`)"
        )));
    }
    if r.text("user") != "root" {
        return Err(r.fail(
            "envc configures EC2 machines as root (its user data lets root in with the key pair); drop `user` or set it to \"root\"",
        ));
    }
    let record = |k: &str| match cloud.get(k) {
        Some(Val::Record(f)) => Ok(f.clone()),
        _ => Err(r.fail(&format!("its cloud has no `{k}` record"))),
    };
    let image = record("image")?;
    let network = record("network")?;
    let region = text(cloud, "region");
    let image_name = text(&image, "name");
    let choice = match super::pin::pinned(r.node, &image_name, &region) {
        Some(id) => ImageChoice::Pinned {
            id,
            owner: text(&image, "owner"),
            pattern: text(&image, "pattern"),
        },
        None => ImageChoice::Newest {
            owner: text(&image, "owner"),
            pattern: text(&image, "pattern"),
            architecture: text(&image, "architecture"),
        },
    };
    let disk = match r.attrs.get("disk") {
        Some(Val::Size(n)) => *n,
        _ => 8 << 30,
    };
    let machine = Ec2Machine {
        name: r.node.name.clone(),
        region,
        instance_type: text(cloud, "instance_type"),
        image: choice,
        // EC2 sizes volumes in GiB: a size that is not whole is rounded up.
        root_volume_gib: disk.div_ceil(1 << 30),
        network: NetworkSpec {
            name: text(&network, "name"),
            cidr: text(&network, "cidr"),
            subnet: text(&network, "subnet"),
            security_groups: strings(network.get("security_groups")),
            ssh_from: strings(network.get("ssh_from")),
        },
        public_address: matches!(cloud.get("public_address"), Some(Val::Bool(true))),
        user: r.text("user"),
    };
    r.put("provider", json!(NAME));
    r.put("region", json!(machine.region));
    r.put("instance_type", json!(machine.instance_type));
    r.put(
        "image",
        match &machine.image {
            ImageChoice::Pinned { id, .. } => json!({ "name": image_name, "id": id }),
            ImageChoice::Newest {
                owner,
                pattern,
                architecture,
            } => json!({ "owner": owner, "pattern": pattern, "architecture": architecture, "pinned": false }),
        },
    );
    r.put(
        "network",
        serde_json::to_value(&machine.network).unwrap_or_default(),
    );
    r.put("disk", json!({ "size": machine.root_volume_gib << 30 }));
    r.put("public_address", json!(machine.public_address));
    r.put("user", json!(machine.user));
    Ok(Arc::new(machine))
}

impl Realize for Ec2Machine {
    fn reach(&self, name: &str, facts: Option<&Facts>, cx: &Connections) -> Option<HostSpec> {
        vm_host(name, facts?, cx.vm_identity.clone()?)
    }

    fn find_adopted<'a>(
        &'a self,
        from: &'a BTreeMap<String, String>,
        cx: Adopting<'a>,
    ) -> Option<BoxFuture<'a, Result<Adopted, StepError>>> {
        Some(Box::pin(async move {
            let ((facts, transport, host_key), differences, how) =
                crate::vm::provider::<super::Ec2>(cx.machines)?
                    .find_adopted(self, from, cx.tags, cx.ssh, cx.take)
                    .await?;
            Ok(Adopted {
                facts,
                transport,
                host_key,
                differences,
                how,
            })
        }))
    }

    fn launch(&self, cx: &Launching<'_>) -> Launch {
        if let Some(line) = cx.adopt {
            return Launch::Alone(Box::new(crate::vm::TakeOver {
                key: cx.spec.key.clone(),
                payload: Arc::new(self.clone()),
                line: line.clone(),
                tags: cx.spec.tags.clone(),
            }));
        }
        Launch::Alone(Box::new(Make {
            key: cx.spec.key.clone(),
            hash: cx.hash.to_string(),
            machine: self.clone(),
            previous: cx.record.map(|p| p.facts.clone()),
            tags: cx.spec.tags.clone(),
        }))
    }
}

/// Make an EC2 machine run: find or create it, bring it to what the source says, connect.
struct Make {
    key: String,
    hash: String,
    machine: Ec2Machine,
    previous: Option<Facts>,
    tags: BTreeMap<String, String>,
}

impl Unit for Make {
    fn run<'a>(self: Box<Self>, cx: UnitCx<'a>) -> BoxFuture<'a, Result<Applied, StepError>> {
        Box::pin(async move {
            let realized = crate::vm::provider::<super::Ec2>(cx.machines)?
                .realize(
                    &self.machine,
                    &self.key,
                    &self.hash,
                    self.previous.as_ref(),
                    &self.tags,
                    &cx.conns.ssh,
                )
                .await?;
            Ok(crate::vm::made(&cx, &self.key, realized))
        })
    }
}
