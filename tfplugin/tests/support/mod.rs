//! Real providers for the client's tests, from `scripts/tf-providers` (which caches their
//! venv under target/testhosts): `local`, written with PyPI's tfprovider, and `workato`, a
//! provider built with HashiCorp's Go SDK, as PyPI's workato-terraform-provider ships it.
#![allow(dead_code)]
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use envc_tfplugin::{Provider, StartOptions, Value};

pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// The unpacked filesystem-mirror directory the script writes.
pub fn providers() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let out = Command::new(repo().join("scripts/tf-providers"))
            .arg("--dir")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "scripts/tf-providers --dir: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
    })
}

pub fn local_executable() -> PathBuf {
    providers().join(
        "registry.envc.test/envc-test/local/0.1.0/linux_amd64/terraform-provider-local_v0.1.0",
    )
}

pub fn workato_executable() -> PathBuf {
    providers().join(
        "registry.envc.test/workato/workato/0.16.0/linux_amd64/terraform-provider-workato_v0.16.0",
    )
}

pub async fn start(executable: &Path) -> Provider {
    Provider::start(executable, StartOptions::default())
        .await
        .unwrap()
}

pub fn obj(pairs: &[(&str, Value)]) -> Value {
    Value::Object(
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect::<BTreeMap<_, _>>(),
    )
}

pub fn s(text: &str) -> Value {
    Value::String(text.to_string())
}

pub fn alive(pid: u32) -> bool {
    // A zombie has exited; only its parent's wait is missing.
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .split_whitespace()
            .nth(2)
            .is_none_or(|state| state != "Z"),
        Err(_) => false,
    }
}
