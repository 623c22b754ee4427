//! The standard library, written in the language and embedded in the binary. Its hash is
//! part of every derivation that a std function builds, through the values it produces;
//! `STD_HASH` identifies the whole library for lockfiles and run records.

pub const MODULES: &[(&str, &str)] = &[
    ("std/debian", include_str!("../../std/debian.env")),
    ("std/systemd", include_str!("../../std/systemd.env")),
    ("std/files", include_str!("../../std/files.env")),
    ("std/k8s", include_str!("../../std/k8s.env")),
    ("std/aws", include_str!("../../std/aws.env")),
];

pub fn get(path: &str) -> Option<&'static str> {
    MODULES.iter().find(|(p, _)| *p == path).map(|(_, s)| *s)
}

/// blake3 over every module's path and text, in a fixed order.
pub fn hash() -> blake3::Hash {
    let mut h = blake3::Hasher::new();
    h.update(b"envc-std/v1\0");
    for (path, text) in MODULES {
        h.update(&(path.len() as u64).to_le_bytes());
        h.update(path.as_bytes());
        h.update(&(text.len() as u64).to_le_bytes());
        h.update(text.as_bytes());
    }
    h.finalize()
}
