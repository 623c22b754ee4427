//! Every environment variable envc reads, in one list: `envc --help` and the man pages
//! (ENVIRONMENT) print it, and the flags that read one (`--ssh-config`, `--cache`, …) name it
//! from here. tests/cli.rs greps the crates envc is built from for `ENVC_` and fails on a
//! name missing here (or listed here and read nowhere).

pub const STORE: &str = "ENVC_STORE";
pub const SSH_CONFIG: &str = "ENVC_SSH_CONFIG";
pub const SSH_PERSIST: &str = "ENVC_SSH_PERSIST";
pub const CACHE: &str = "ENVC_CACHE";
pub const STATE: &str = "ENVC_STATE";
pub const SIGNING_KEY: &str = "ENVC_SIGNING_KEY";

/// An environment variable and what it does.
pub struct Variable {
    pub name: &'static str,
    pub meaning: &'static str,
}

const fn var(name: &'static str, meaning: &'static str) -> Variable {
    Variable { name, meaning }
}

/// envc's own variables, `ENVC_*`.
pub const VARIABLES: &[Variable] = &[
    var(STORE, "the store's directory (default: .envc/ beside the environment file)"),
    var(SSH_CONFIG, "an ssh_config for reaching hosts, as --ssh-config"),
    var(SSH_PERSIST, "seconds an ssh connection stays open for reuse, as --ssh-persist"),
    var(CACHE, "the binary cache's URL, as --cache (over envc.toml's [cache])"),
    var(STATE, "the shared state's URL, as --state (over envc.toml's [state])"),
    var(SIGNING_KEY, "the key that signs what is pushed to the cache, as --signing-key"),
    var(
        "ENVC_AGE_IDENTITY",
        "the age identity that decrypts the project's secrets (over envc.toml's [secrets] identity)",
    ),
    var(
        "ENVC_DEBIAN_MIRROR",
        "the Debian mirror `envc lock` and unlocked images read (default: apt's here)",
    ),
    var(
        "ENVC_DEBIAN_SECURITY_MIRROR",
        "the mirror `envc lock` reads Debian's security suite from",
    ),
    var(
        "ENVC_PROVIDER_MIRROR",
        "where `envc lock` and the build get Terraform/OpenTofu providers: a directory or an https:// mirror (over envc.toml's [providers] mirror)",
    ),
    var(
        "ENVC_ARCHIVE_KEYRING",
        "the keyring archive signatures are checked with (default: Debian's; empty: unchecked)",
    ),
    var(
        "ENVC_DEB_CACHE",
        "where unlocked image builds keep downloaded .debs (default: ~/.cache/envc)",
    ),
    var("ENVC_QEMU_ACCEL", "kvm or tcg: the accelerator for VMs, without probing KVM"),
    var(
        "ENVC_REMOTE_TIMEOUT",
        "seconds a request to the shared cache or state may take, retries included",
    ),
    var(
        "ENVC_AWS_CHECKIP_URL",
        "where envc learns this machine's public address for EC2 (for tests)",
    ),
];

/// Variables of others that change what envc does.
pub const OTHERS: &[Variable] = &[
    var(
        "CI",
        "set (not `false` or `0`): `envc build` is --locked unless told otherwise",
    ),
    var("NO_COLOR", "set: no colour in diagnostics (--color=auto)"),
    var("VISUAL, EDITOR", "the editor of `envc secret edit`"),
    var(
        "AWS_*",
        "AWS credentials and endpoints, as the AWS SDKs read them (docs/cli.md)",
    ),
    var(
        "XDG_RUNTIME_DIR",
        "where ssh control sockets are kept, when it is the user's",
    ),
];
