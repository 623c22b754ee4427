//! A cloud lab for end-to-end tests of `vm` nodes on EC2: namespace test hosts that
//! instances boot into (tests/support/cloud.rs), moto's EC2 and the checkip stand-in in
//! their controller namespace, and a project whose `envc` runs there. A test binary that uses
//! it also declares `cloud`, `nshosts`, `output`, `project`, `servers` and `ssh_config`.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::process::Output;

use super::cloud::{self, instances, run_booting};
use super::nshosts::TestHosts;
use super::output::text;
use super::project::Project;
use super::servers::{CheckIpServer, Ec2Options, Ec2Server};

/// A lab: test hosts that instances boot into, moto's EC2 and the checkip stand-in.
pub struct Cloud {
    // Dropped in this order: the servers live in the hosts' controller namespace.
    pub ec2: Ec2Server,
    pub checkip: CheckIpServer,
    pub booted: BTreeMap<String, usize>,
    pub project: Project,
    pub hosts: TestHosts,
}

impl Cloud {
    pub fn start() -> Cloud {
        Cloud::start_with(Ec2Options::default())
    }

    pub fn start_with(opts: Ec2Options) -> Cloud {
        let hosts = TestHosts::start_empty();
        let ec2 = Ec2Server::start_in(hosts.controller_pid(), opts);
        let checkip = CheckIpServer::start_in(hosts.controller_pid(), hosts.controller_addr());
        let project = Project::new(&hosts, "envc-aws-");
        Cloud {
            hosts,
            ec2,
            checkip,
            booted: BTreeMap::new(),
            project,
        }
    }

    /// `envc ARGS…` on prod.env, with AWS pointed at moto, instances booting as it runs.
    pub fn envc(&mut self, args: &[&str]) -> Output {
        let mut cmd = self.project.command(&self.hosts, args);
        cmd.envs(self.ec2.env()).envs(self.checkip.env());
        run_booting(&mut self.hosts, &self.ec2, &mut self.booted, cmd)
    }

    /// The instances envc made for node `name` that are not terminated.
    pub fn live(&self, name: &str) -> Vec<cloud::Instance> {
        instances(&self.ec2, &[("tag:envc:node", name)])
            .into_iter()
            .filter(|i| i.state != "terminated")
            .collect()
    }

    /// A command's stdout on the host an instance booted into.
    pub fn on(&self, instance: &str, cmd: &str) -> String {
        let host = self.booted[instance];
        let out = self.hosts.ssh(host, cmd);
        assert!(out.status.success(), "{cmd}: {}", text(&out));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}
