//! What `envc verify`'s lab puts in place of a host: a plain option of the compiler,
//! below the evaluator that reads it.

/// A clean machine standing in for a host of the environment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StandIn {
    /// A machine someone provisioned (`--lab-hosts`).
    Machine {
        address: String,
        /// `None`: the host's own.
        port: Option<u16>,
        user: Option<String>,
    },
    /// A fresh VM booted from the host's declared `base` image: the host compiles as
    /// `vm(name, image = base)` with a VM's defaults, and `h.address` reads the VM's.
    Vm,
}
