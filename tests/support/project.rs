//! A project directory for end-to-end tests on namespace hosts: `prod.env` in a temporary
//! directory, with an ssh_config that logs in with the hosts' key, and `envc` run against
//! it from the controller's namespace.

// Each test binary that includes this uses only part of it.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};

use crate::nshosts::TestHosts;

pub struct Project {
    pub dir: tempfile::TempDir,
    pub ssh_config: PathBuf,
}

impl Project {
    pub fn new(hosts: &TestHosts, prefix: &str) -> Project {
        let dir = tempfile::Builder::new().prefix(prefix).tempdir().unwrap();
        let ssh_config = crate::ssh_config::write(dir.path(), hosts.key_path());
        Project { dir, ssh_config }
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    pub fn root(&self) -> &Path {
        self.dir.path()
    }

    /// Writes `prod.env`.
    pub fn write(&self, text: &str) {
        std::fs::write(self.path("prod.env"), text).unwrap();
    }

    /// `envc ARGS[0] prod.env ARGS[1..]`.
    pub fn run(&self, hosts: &TestHosts, args: &[&str]) -> Output {
        hosts
            .in_controller(env!("CARGO_BIN_EXE_envc"))
            .arg(args[0])
            .arg(self.path("prod.env"))
            .args(&args[1..])
            .env("ENVC_SSH_CONFIG", &self.ssh_config)
            .env_remove("ENVC_STORE")
            .env_remove("CI")
            .stdin(Stdio::null())
            .output()
            .unwrap()
    }
}
