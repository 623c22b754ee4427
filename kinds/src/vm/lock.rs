//! What a VM needs pinned: a cloud machine its cloud's image in its region; one envc
//! boots itself QEMU. Either is reached with ssh.

use std::collections::BTreeMap;

use crate::node_type::LockNeeds;
use crate::spec::{NodeSpec, Val};

pub(super) fn lock_needs(n: &NodeSpec, cx: &mut LockNeeds<'_>) {
    // A cloud machine boots its cloud's image, pinned per region; QEMU is not used.
    match cloud_of(n) {
        Some(cloud) => match cloud_image_need(n, cloud) {
            Ok(need) => {
                if let Err(c) = cx.needs.add_cloud_image(need) {
                    cx.conflict(c);
                }
            }
            Err(e) => cx.conflict(format!("`{}`: {e}", n.key)),
        },
        None => cx.tool("qemu-system-x86_64"),
    }
    cx.tool("ssh");
}

/// A vm's `cloud` record (std/aws's machines), `None` for a vm envc boots itself.
pub fn cloud_of(n: &NodeSpec) -> Option<&BTreeMap<String, Val>> {
    match n.attr("cloud") {
        Some(Val::Record(c)) => Some(c),
        _ => None,
    }
}

/// Why a vm's `cloud` does not name a cloud image envc can pin.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BadCloud {
    /// A field std/aws always gives is missing, or empty.
    NoField(&'static str),
    /// A provider envc cannot resolve images with.
    Provider(String),
}

impl std::fmt::Display for BadCloud {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BadCloud::NoField(k) => write!(f, "its cloud has no `{k}`"),
            BadCloud::Provider(p) => {
                write!(
                    f,
                    "cloud provider {p:?} is not one envc can lock images of (aws)"
                )
            }
        }
    }
}

/// The cloud image a cloud vm boots, in its region.
fn cloud_image_need(
    n: &NodeSpec,
    cloud: &BTreeMap<String, Val>,
) -> Result<envc_lockfiles::CloudImageNeed, BadCloud> {
    fn text(fields: &BTreeMap<String, Val>, k: &'static str) -> Result<String, BadCloud> {
        match fields.get(k) {
            Some(Val::Str(s)) if !s.is_empty() => Ok(s.clone()),
            _ => Err(BadCloud::NoField(k)),
        }
    }
    let provider = text(cloud, "provider")?;
    if provider != "aws" {
        return Err(BadCloud::Provider(provider));
    }
    let image = match cloud.get("image") {
        Some(Val::Record(i)) => i,
        _ => return Err(BadCloud::NoField("image")),
    };
    Ok(envc_lockfiles::CloudImageNeed {
        name: text(image, "name")?,
        provider,
        region: text(cloud, "region")?,
        owner: text(image, "owner")?,
        pattern: text(image, "pattern")?,
        architecture: text(image, "architecture")?,
        used_by: vec![n.key.clone()],
    })
}
