//! A project directory for end-to-end tests on namespace hosts: `prod.env` in a temporary
//! directory (or a directory inside it), with an ssh_config that logs in with the hosts'
//! key, and `envc` run against it from the controller's namespace.

// Each test binary that includes this uses only part of it.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use super::nshosts::TestHosts;

pub struct Project {
    pub dir: tempfile::TempDir,
    pub ssh_config: PathBuf,
    /// `prod.env`, or `SUBDIR/prod.env`.
    env_file: PathBuf,
}

impl Project {
    pub fn new(hosts: &TestHosts, prefix: &str) -> Project {
        Project::in_subdir(hosts, prefix, "")
    }

    /// A project whose `prod.env` is in `subdir` of the directory (its store beside it,
    /// the ssh_config outside).
    pub fn in_subdir(hosts: &TestHosts, prefix: &str, subdir: &str) -> Project {
        let dir = tempfile::Builder::new().prefix(prefix).tempdir().unwrap();
        let ssh_config = super::ssh_config::write(dir.path(), hosts.key_path());
        let env_dir = dir.path().join(subdir);
        std::fs::create_dir_all(&env_dir).unwrap();
        Project {
            env_file: env_dir.join("prod.env"),
            dir,
            ssh_config,
        }
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    pub fn root(&self) -> &Path {
        self.dir.path()
    }

    /// Writes `prod.env`.
    pub fn write(&self, text: &str) {
        std::fs::write(&self.env_file, text).unwrap();
    }

    /// The environment's store, beside `prod.env`.
    pub fn store_dir(&self) -> PathBuf {
        self.env_file.with_file_name(".envc")
    }

    /// Puts the `.deb`s the lockfile `lock_file` pins (its packages and their closures) into
    /// the store, fetched from the lockfile's mirrors from this test's own network: a build
    /// in the hosts' namespace, which has no route to any mirror, installs them from there.
    pub fn fetch_pinned_debs(&self, lock_file: &Path) {
        let pinned = std::fs::read_to_string(lock_file).unwrap();
        let parsed = envc_lockfiles::Lockfile::parse(&pinned).unwrap();
        let (debs, errors) = envc_lockfiles::environment::fetch_pinned(&parsed, &parsed.packages);
        assert!(errors.is_empty(), "{errors:?}");
        let store_debs = self.store_dir().join("debs");
        std::fs::create_dir_all(&store_debs).unwrap();
        for (sha256, bytes) in &debs {
            std::fs::write(store_debs.join(format!("{sha256}.deb")), bytes).unwrap();
        }
    }

    /// `envc ARGS[0] prod.env ARGS[1..]`.
    pub fn run(&self, hosts: &TestHosts, args: &[&str]) -> Output {
        self.command(hosts, args)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    }

    /// The command [`Project::run`] runs, to run otherwise.
    pub fn command(&self, hosts: &TestHosts, args: &[&str]) -> Command {
        let mut cmd = hosts.in_controller(env!("CARGO_BIN_EXE_envc"));
        cmd.arg(args[0])
            .arg(&self.env_file)
            .args(&args[1..])
            .env("ENVC_SSH_CONFIG", &self.ssh_config)
            .env_remove("ENVC_STORE")
            .env_remove("CI");
        cmd
    }
}
