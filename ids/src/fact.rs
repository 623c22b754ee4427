//! The names of the facts nodes record: what was observed on a target after a node ran.
//! Records, plans, drift and verify all read facts by these names, and a node kind writes
//! them by these names, so a spelling is decided once, here. (Facts that are a node's
//! outputs, like a machine's `address`, are the names the language reads them by too.)

/// A machine's facts: a `vm` of any provider, a `host` reached over SSH.
pub mod machine {
    /// On the environment's private network.
    pub const ADDRESS: &str = "address";
    /// Where it is reached from outside its network (a local VM's: its only address).
    pub const PUBLIC_ADDRESS: &str = "public_address";
    /// The provider's id of it (a local VM's: its directory).
    pub const INSTANCE_ID: &str = "instance_id";
    /// Where envc reaches its sshd: `SSH_ADDRESS:PORT`.
    pub const SSH_ADDRESS: &str = "ssh_address";
    pub const PORT: &str = "port";
    pub const USER: &str = "user";
    pub const HOST_KEY: &str = "host_key";
    /// The target identity: the host key's fingerprint (for a repository, its place).
    pub const FINGERPRINT: &str = "fingerprint";
    /// A local VM's directory: where its disk, pid file and console are.
    pub const DIR: &str = "dir";
}

/// An image's outputs: store object ids, and what is worth showing.
pub mod image {
    /// The bootable ext4 disk image (the `digest` output).
    pub const DISK: &str = "digest";
    /// The kernel (the `kernel` output).
    pub const KERNEL: &str = "kernel";
    pub const ROOTFS: &str = "rootfs";
    /// `name=version` of every package in the image.
    pub const PACKAGES: &str = "packages";
    pub const KERNEL_VERSION: &str = "kernel_version";
}

/// What a file placed on a target, or an object delivered to a repository, holds.
pub mod content {
    /// The sha256 of the bytes (keyed, for a file that holds a secret).
    pub const SHA256: &str = "sha256";
}

/// Where a Kubernetes object was delivered in a GitOps repository.
pub mod delivery {
    /// The commit that carries it.
    pub const COMMIT: &str = "commit";
    /// Its file, relative to the repository's path.
    pub const FILE: &str = "file";
}
