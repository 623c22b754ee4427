//! Values that cross networks that cannot reach each other. A VM's `address` is on its
//! environment's private network (`10.89.0.0/24`, a QEMU socket on loopback that only the
//! environment's VMs join), so a `host` — elsewhere, or the machine envc runs on — cannot
//! reach it: a node placed on a host that is given one is almost certainly a mistake, and
//! `envc check` warns (it is not an error: the value may only be recorded, or reach a
//! tunnel the environment does not know of).

use std::collections::BTreeSet;
use std::rc::Rc;

use envc_lang::Diagnostic;

use crate::graph::Graph;
use crate::id::DerivationId;
use crate::types::NodeKind;
use crate::value::{Deferred, Node, Value};

/// One warning per node on a host and VM whose address it is given.
pub fn warnings(graph: &Graph) -> Vec<Diagnostic> {
    let mut out = Vec::new();
    for node in graph.nodes() {
        let Some(host) = node.target.as_ref().filter(|t| t.kind == NodeKind::Host) else {
            continue;
        };
        let mut vms: Vec<Rc<Node>> = Vec::new();
        let mut seen: BTreeSet<DerivationId> = BTreeSet::new();
        let checks = node.expect.iter().chain(&node.require);
        for v in node
            .attrs
            .values()
            .chain(checks.flat_map(|c| c.args.values()))
        {
            vm_addresses(v, &mut vms, &mut seen);
        }
        for vm in vms {
            let at = match host.attrs.get("address") {
                // The executor's `transport::LOCAL_ADDRESS`.
                Some(Value::Str(a)) if &**a == "@local" => "the machine envc runs on".to_string(),
                Some(Value::Str(a)) => format!("at {a}"),
                _ => "elsewhere".to_string(),
            };
            out.push(
                Diagnostic::new(
                    "graph::cross-network",
                    format!(
                        "{} `{}` on host `{}` is given the private address of VM `{}`",
                        node.kind.name(),
                        node.name,
                        host.name,
                        vm.name
                    ),
                )
                .label(node.file, node.span, format!("reads `{}.address`", vm.name))
                .label(host.file, host.span, format!("`{}` is {at}", host.name))
                .label(vm.file, vm.span, "on the environment's private VM network")
                .message("A VM's address is on its environment's private network (10.89.0.0/24), which only the environment's VMs join: a host, even the machine envc runs on, cannot reach it.")
                .help(format!(
                    "place this on a VM of the environment, or give `{}` an address it can reach (a VM's ssh is forwarded to `port` on the machine envc runs on)",
                    host.name
                )),
            );
        }
    }
    out
}

/// The VMs whose `address` `v` holds, each once.
fn vm_addresses(v: &Value, out: &mut Vec<Rc<Node>>, seen: &mut BTreeSet<DerivationId>) {
    match v {
        Value::Deferred(d) => match &**d {
            Deferred::Output { node, output }
                if node.kind == NodeKind::Vm && &**output == "address" && seen.insert(node.id) =>
            {
                out.push(node.clone());
            }
            Deferred::Concat(parts) => parts.iter().for_each(|p| vm_addresses(p, out, seen)),
            Deferred::Json(inner) => vm_addresses(inner, out, seen),
            _ => {}
        },
        Value::List(xs) => xs.iter().for_each(|x| vm_addresses(x, out, seen)),
        Value::Record(r) => r.values().for_each(|x| vm_addresses(x, out, seen)),
        _ => {}
    }
}
