//! The `aws` provider: `vm` nodes as EC2 instances (`aws.machine` of std/aws).
//!
//! Everything envc makes in an account carries its ownership tags (`envc:environment`,
//! `envc:node`, `envc:network`, `envc:managed-by`), which is how a run finds again what a
//! killed run made before recording it (an instance is looked up by its node's tags before
//! one is created, and its creation carries a client token derived from the node), and how
//! `destroy` deletes what envc made and nothing else. The regions the environment ever
//! used are written down locally first (`machines/ENV/aws-regions`), so a destroy after a
//! killed first build knows where to look.
//!
//! The machine's host key is made here and handed over in its user data (`boot.rs`): the
//! first connection checks it. A change of instance type is made in place (stop, modify,
//! start: the same machine, so nothing on it runs again); a change of image, network or
//! root volume replaces the instance. `plan` reads only the records; `drift` and
//! `--refresh` ask EC2 (`look`).

pub mod boot;
pub mod images;
pub mod network;
mod pin;
pub mod resolve;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use envc_aws::{AwsEnv, AwsError, Ec2Client, ErrorKind, Filter, Instance, InstanceState, Tags};
use serde::{Deserialize, Serialize};

use crate::error::StepError;
use crate::future::BoxFuture;
use crate::record::{DriftFacts, Facts};
use crate::tools::Tool;
use crate::transport::{HostKey, HostSpec, SshOptions, Transport, TransportError};
use crate::vm::login::LoginKey;
use crate::vm::provider::{Realized, VmProvider, PROVIDER};
use boot::HostKeyPair;
use network::NetworkSpec;

pub use envc_ids::fact::machine as fact;

pub const NAME: &str = "aws";
pub const TAG_ENVIRONMENT: &str = "envc:environment";
pub const TAG_NODE: &str = "envc:node";
pub const TAG_NETWORK: &str = "envc:network";
const TAG_MANAGED: &str = "envc:managed-by";
/// On an instance envc adopted (made outside envc): a sweep never terminates it, and
/// `destroy` without `--adopted` takes envc's tags off it again.
pub const TAG_ADOPTED: &str = "envc:adopted";
/// The fact of an adopted instance naming the tags envc added to it (comma-separated):
/// those it takes off again when it lets the instance go.
const ADOPTED_TAGS: &str = "adopted_tags";

/// The facts of an EC2 machine beyond every machine's.
pub mod ec2_fact {
    pub const REGION: &str = "region";
    pub const INSTANCE_TYPE: &str = "instance_type";
    pub const IMAGE: &str = "image";
    pub const SUBNET: &str = "subnet";
    pub const VPC: &str = "vpc";
    pub const SECURITY_GROUPS: &str = "security_groups";
    /// The network envc made for it (empty: an existing subnet).
    pub const NETWORK: &str = "network";
    pub const ROOT_VOLUME: &str = "root_volume_gib";
    pub const KEY_PAIR: &str = "key_pair";
}

/// The tags that say envc made a thing for environment `env`.
pub fn owner_tags(env: &str) -> Tags {
    Tags::from([
        (TAG_ENVIRONMENT.to_string(), env.to_string()),
        (TAG_MANAGED.to_string(), "envc".to_string()),
    ])
}

/// The image a machine boots.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ImageChoice {
    /// The lockfile's: exactly this AMI, checked to be the owner's image whose name
    /// matches the pattern.
    Pinned {
        id: String,
        owner: String,
        pattern: String,
    },
    /// No lockfile: the newest image that matches, when the machine is created.
    Newest {
        owner: String,
        pattern: String,
        architecture: String,
    },
}

/// A resolved EC2 machine: what creating it needs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ec2Machine {
    pub name: String,
    pub region: String,
    pub instance_type: String,
    pub image: ImageChoice,
    pub root_volume_gib: u64,
    pub network: NetworkSpec,
    pub public_address: bool,
    pub user: String,
}

/// An AWS error said of `subject`, with what to do about it.
pub fn aws_error(e: AwsError, subject: &str) -> StepError {
    let cause = format!("{subject}: {e}");
    match e.kind() {
        ErrorKind::Credentials => StepError::with_hint(
            cause,
            "give AWS credentials the SDKs' way: AWS_PROFILE (a profile of ~/.aws/credentials, \
             made by `aws configure`) or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY; an env \
             file never holds them",
        ),
        ErrorKind::Unauthorized => StepError::with_hint(
            cause,
            "the credentials' IAM identity lacks this permission: grant it (docs/cli.md lists \
             what envc calls), or use other credentials (AWS_PROFILE)",
        ),
        ErrorKind::Capacity => StepError::with_hint(
            cause,
            "AWS has no room for it now: try again later, or another instance type or region",
        ),
        ErrorKind::Throttled => StepError::with_hint(
            cause,
            "AWS throttled envc's calls even after backing off: run again later, or with \
             fewer parallel jobs (-j)",
        ),
        ErrorKind::Unreachable => StepError::with_hint(
            cause,
            "check the network to EC2 (and AWS_ENDPOINT_URL_EC2, if set)",
        ),
        ErrorKind::NotFound => StepError::with_hint(
            cause,
            "it may have been deleted outside envc: `envc plan --refresh` shows what differs",
        ),
        _ => StepError::new(cause),
    }
}

pub struct Ec2 {
    env: String,
    /// Where the regions the environment used are written down.
    regions_file: PathBuf,
    /// Held while `regions_file` is read and rewritten: machines created at once would
    /// otherwise rename one temporary file from under each other (and could lose a region).
    regions_lock: Mutex<()>,
    key: Arc<LoginKey>,
    boot_timeout: Duration,
    aws: AwsEnv,
    /// Where envc learns its public address (`$ENVC_AWS_CHECKIP_URL` for tests).
    checkip: String,
    clients: Mutex<BTreeMap<String, Ec2Client>>,
    /// The networks found or made in this run, by region and name: held while one is
    /// looked up or made, so that machines created at once share one, and asked of EC2
    /// once per run, not once per machine.
    placing: tokio::sync::Mutex<BTreeMap<(String, String), network::Placed>>,
    /// The image each choice came to in this run (by region and choice): asked once.
    images: tokio::sync::Mutex<BTreeMap<String, String>>,
    /// The key pair's name per region, once it is known to be there.
    key_pairs: tokio::sync::Mutex<BTreeMap<String, String>>,
}

impl Ec2 {
    pub fn new(
        machines_dir: &std::path::Path,
        env: &str,
        key: Arc<LoginKey>,
        boot_timeout: Duration,
    ) -> Ec2 {
        Ec2 {
            env: env.to_string(),
            regions_file: machines_dir.join(env).join("aws-regions"),
            regions_lock: Mutex::new(()),
            key,
            boot_timeout,
            aws: AwsEnv::from_process(),
            checkip: std::env::var("ENVC_AWS_CHECKIP_URL")
                .unwrap_or_else(|_| "https://checkip.amazonaws.com".to_string()),
            clients: Mutex::new(BTreeMap::new()),
            placing: tokio::sync::Mutex::new(BTreeMap::new()),
            key_pairs: tokio::sync::Mutex::new(BTreeMap::new()),
            images: tokio::sync::Mutex::new(BTreeMap::new()),
        }
    }

    /// The client for `region`, made once: credentials come from the SDKs' chain.
    fn client(&self, region: &str) -> Result<Ec2Client, StepError> {
        let mut clients = self.clients.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(c) = clients.get(region) {
            return Ok(c.clone());
        }
        let c = Ec2Client::from_env(&self.aws, region)
            .map_err(|e| aws_error(e, &format!("EC2 in {region}")))?;
        clients.insert(region.to_string(), c.clone());
        Ok(c)
    }

    /// API calls made so far, all regions.
    pub fn calls(&self) -> u64 {
        let clients = self.clients.lock().unwrap_or_else(|e| e.into_inner());
        clients.values().map(Ec2Client::calls).sum()
    }

    fn regions(&self) -> BTreeSet<String> {
        std::fs::read_to_string(&self.regions_file)
            .unwrap_or_default()
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .map(String::from)
            .collect()
    }

    /// Writes `region` down before anything is made there.
    fn remember_region(&self, region: &str) -> Result<(), StepError> {
        let _one_writer = self.regions_lock.lock().unwrap_or_else(|e| e.into_inner());
        let mut all = self.regions();
        if !all.insert(region.to_string()) {
            return Ok(());
        }
        let text: String = all.iter().map(|r| format!("{r}\n")).collect();
        let write = || -> std::io::Result<()> {
            let dir = self
                .regions_file
                .parent()
                .unwrap_or(std::path::Path::new("."));
            std::fs::create_dir_all(dir)?;
            let tmp = self
                .regions_file
                .with_extension(format!("tmp{}", std::process::id()));
            std::fs::write(&tmp, text)?;
            std::fs::File::open(&tmp)?.sync_all()?;
            std::fs::rename(&tmp, &self.regions_file)
        };
        write().map_err(|e| {
            StepError::new(format!("cannot write {}: {e}", self.regions_file.display()))
        })
    }

    /// The instances of this environment in `region` that are not terminated, of node
    /// `node` when given.
    async fn live_instances(
        &self,
        ec2: &Ec2Client,
        node: Option<&str>,
    ) -> Result<Vec<Instance>, AwsError> {
        let mut filters = vec![
            Filter::tag(TAG_ENVIRONMENT, &self.env),
            Filter::new(
                "instance-state-name",
                ["pending", "running", "stopping", "stopped"].map(String::from),
            ),
        ];
        if let Some(n) = node {
            filters.push(Filter::tag(TAG_NODE, n));
        }
        ec2.describe_instances(&[], &filters).await
    }

    /// The AMI the machine boots: the pinned one, once EC2 confirms it is the owner's image
    /// of that name (a hand-edited lockfile does not boot something else), or the newest.
    async fn image(&self, ec2: &Ec2Client, m: &Ec2Machine) -> Result<String, StepError> {
        let mut known = self.images.lock().await;
        let key = format!("{}\0{:?}", m.region, m.image);
        if let Some(id) = known.get(&key) {
            return Ok(id.clone());
        }
        let id = self.ask_image(ec2, m).await?;
        known.insert(key, id.clone());
        Ok(id)
    }

    async fn ask_image(&self, ec2: &Ec2Client, m: &Ec2Machine) -> Result<String, StepError> {
        let subject = format!("`{}`", m.name);
        match &m.image {
            ImageChoice::Pinned { id, owner, pattern } => {
                let found = ec2
                    .describe_image(id)
                    .await
                    .map_err(|e| aws_error(e, &subject))?;
                match found {
                    Some(i) if &i.owner_id == owner && envc_lockfiles::cloud::name_matches(pattern, &i.name) => Ok(id.clone()),
                    Some(i) => Err(StepError::with_hint(
                        format!(
                            "{subject}: the lockfile pins image {id}, which in {} is `{}` of {}, not an image of {owner} matching `{pattern}`",
                            m.region, i.name, i.owner_id
                        ),
                        "the lockfile was edited by hand: `envc lock --check` says so; `envc lock --update=cloud_image:…` pins the image again",
                    )),
                    None => Err(StepError::with_hint(
                        format!("{subject}: the pinned image {id} does not exist in {}", m.region),
                        "its owner may have deregistered it: `envc lock --update=cloud_image:…` pins the newest that matches",
                    )),
                }
            }
            ImageChoice::Newest {
                owner,
                pattern,
                architecture,
            } => {
                let images = ec2
                    .describe_images(std::slice::from_ref(owner), pattern)
                    .await
                    .map_err(|e| aws_error(e, &subject))?;
                // The image `envc lock` would pin, as of now.
                let need = envc_lockfiles::CloudImageNeed {
                    name: m.name.clone(),
                    provider: NAME.to_string(),
                    region: m.region.clone(),
                    owner: owner.clone(),
                    pattern: pattern.clone(),
                    architecture: architecture.clone(),
                    used_by: Vec::new(),
                };
                envc_lockfiles::cloud::newest_of(&need, &images::candidates(images))
                    .map(|pin| pin.id)
                    .map_err(|e| StepError::new(format!("{subject}: {e}")))
            }
        }
    }

    /// The environment's key pair in this region, imported from the login key once. Its
    /// name carries the key's hash, so two stores never fight over one name.
    async fn key_pair(&self, ec2: &Ec2Client) -> Result<String, StepError> {
        let mut known = self.key_pairs.lock().await;
        if let Some(name) = known.get(ec2.region()) {
            return Ok(name.clone());
        }
        let public = self.key.public().await?;
        let digest = blake3::hash(public.as_bytes()).to_hex();
        let name = format!("envc-{}-{}", self.env, &digest[..12]);
        let err = |e| aws_error(e, "the login key pair");
        let found = ec2
            .describe_key_pairs(&[Filter::new("key-name", [name.clone()])])
            .await
            .map_err(err)?;
        if found.is_empty() {
            match ec2
                .import_key_pair(&name, &public, &owner_tags(&self.env))
                .await
            {
                Ok(()) => {}
                // Another machine of this run imported it first.
                Err(e) if matches!(e.kind(), ErrorKind::Conflict) => {}
                Err(e) => return Err(err(e)),
            }
        }
        known.insert(ec2.region().to_string(), name.clone());
        Ok(name)
    }

    /// Who may reach SSH in a network envc makes: as the source says, else the address
    /// envc runs from, as AWS's checkip service sees it.
    async fn ssh_from(&self, spec: &NetworkSpec) -> Result<Vec<String>, StepError> {
        if !spec.ssh_from.is_empty() {
            return Ok(spec.ssh_from.clone());
        }
        let url = self.checkip.clone();
        let hint = "or say who may connect: aws.network(…, ssh_from = [\"203.0.113.0/24\"])";
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(15))
            .build()
            .map_err(|e| StepError::new(format!("cannot make an HTTP client: {e}")))?;
        let text = async {
            client
                .get(&url)
                .send()
                .await?
                .error_for_status()?
                .text()
                .await
        }
        .await
        .map_err(|e| {
            StepError::with_hint(
                format!("cannot learn this machine's public address from {url}: {e}"),
                format!("check the network, {hint}"),
            )
        })?;
        let address: std::net::IpAddr = text.trim().parse().map_err(|_| {
            StepError::with_hint(
                format!("{url} answered {:?}, not an address", text.trim()),
                hint,
            )
        })?;
        Ok(vec![match address {
            std::net::IpAddr::V4(a) => format!("{a}/32"),
            std::net::IpAddr::V6(a) => format!("{a}/128"),
        }])
    }

    /// Makes the machine run, as [`crate::vm::provider`] says; `node_key` and
    /// `hash` make its creation's client token, `tags` are the node's.
    pub async fn realize(
        &self,
        m: &Ec2Machine,
        node_key: &str,
        hash: &str,
        previous: Option<&Facts>,
        tags: &BTreeMap<String, String>,
        ssh: &SshOptions,
    ) -> Result<Realized, StepError> {
        let ec2 = self.client(&m.region)?;
        self.remember_region(&m.region)?;
        let subject = format!("`{}`", m.name);
        let err = |e| aws_error(e, &subject);
        let image = self.image(&ec2, m).await?;
        // The recorded instance, else one tagged for this node: a creation that was killed
        // before it was recorded is adopted, not made twice.
        let recorded = previous.and_then(|p| p.get(fact::INSTANCE_ID));
        let mut found = self
            .live_instances(&ec2, Some(&m.name))
            .await
            .map_err(err)?;
        found.sort_by_key(|i| Some(&i.id) != recorded);
        let mut found = found.into_iter();
        let existing = found.next();
        // More than one (made by hand with envc's tags?): the others are not envc's to keep.
        for extra in found {
            ec2.terminate_instance(&extra.id).await.map_err(err)?;
        }
        let recorded_volume = previous
            .and_then(|p| p.get(ec2_fact::ROOT_VOLUME))
            .and_then(|v| v.parse::<u64>().ok());
        if let Some(inst) = existing {
            let placed_same = if m.network.subnet.is_empty() {
                inst.tags.get(TAG_NETWORK) == Some(&m.network.name)
            } else {
                inst.subnet_id.as_deref() == Some(m.network.subnet.as_str())
            };
            let same = inst.image_id == image
                && placed_same
                && recorded_volume.is_none_or(|v| v == m.root_volume_gib);
            if !same && previous.is_some_and(|p| p.contains_key(ADOPTED_TAGS)) {
                return Err(StepError::with_hint(
                    format!("`{}` was adopted (envc did not make instance {}), and the source changed what it is made of: a new instance would replace it, and envc does not terminate a machine it adopted", m.name, inst.id),
                    "put the source back as it was; or remove the machine from the source and build (it is left running, envc's tags taken off), then add it back without the `adopt` line for envc to make one",
                ));
            }
            if same {
                let inst = self.converge(&ec2, inst, m).await?;
                let host_key = match previous.filter(|_| recorded == Some(&inst.id)) {
                    Some(p) => crate::connect::recorded_key(p),
                    None => None,
                };
                let host_key = match host_key {
                    Some(k) => k,
                    None => self.given_host_key(&ec2, &inst, m).await?,
                };
                return self.connect(m, inst, host_key, ssh).await;
            }
            self.terminate(&ec2, &inst.id).await.map_err(err)?;
        }
        let placed = {
            let mut placed = self.placing.lock().await;
            let key = (m.region.clone(), format!("{:?}", m.network));
            match placed.get(&key) {
                Some(p) => p.clone(),
                None => {
                    let ssh_from = match m.network.subnet.is_empty() {
                        true => self.ssh_from(&m.network).await?,
                        false => Vec::new(),
                    };
                    let p = network::ensure(&ec2, &self.env, &m.network, &ssh_from).await?;
                    placed.insert(key, p.clone());
                    p
                }
            }
        };
        let key_name = self.key_pair(&ec2).await?;
        let host = HostKeyPair::generate(&m.name).await?;
        let host_key = host
            .host_key()
            .ok_or_else(|| StepError::new("ssh-keygen made a host key envc cannot read"))?;
        let mut instance_tags: Tags = tags.clone();
        instance_tags.extend(owner_tags(&self.env));
        instance_tags.insert(TAG_NODE.to_string(), m.name.clone());
        instance_tags.insert("Name".to_string(), m.name.clone());
        if !m.network.name.is_empty() {
            instance_tags.insert(TAG_NETWORK.to_string(), m.network.name.clone());
        }
        // The same creation retried (a lost answer) is one instance; a replacement (another
        // previous instance) is a new one.
        let token = blake3::hash(
            format!(
                "envc-ec2-v1\0{}\0{node_key}\0{hash}\0{}",
                self.env,
                recorded.map_or("", String::as_str)
            )
            .as_bytes(),
        )
        .to_hex()[..32]
            .to_string();
        let inst = ec2
            .run_instance(&envc_aws::RunInstance {
                image_id: image,
                instance_type: m.instance_type.clone(),
                subnet_id: Some(placed.subnet.clone()),
                security_group_ids: placed.security_groups.clone(),
                key_name: Some(key_name),
                user_data: Some(boot::user_data(&host)),
                client_token: Some(token),
                tags: instance_tags,
                root_volume: Some(("/dev/xvda".to_string(), m.root_volume_gib)),
                associate_public_ip: m.public_address,
            })
            .await
            .map_err(err)?;
        let inst = ec2
            .wait_for_state(
                &inst.id,
                &[InstanceState::Running],
                Duration::from_secs(2),
                self.boot_timeout,
            )
            .await
            .map_err(err)?;
        self.connect(m, inst, host_key, ssh).await
    }

    /// The host key a machine was given, from its user data.
    async fn given_host_key(
        &self,
        ec2: &Ec2Client,
        inst: &Instance,
        m: &Ec2Machine,
    ) -> Result<HostKey, StepError> {
        let data = ec2
            .instance_user_data(&inst.id)
            .await
            .map_err(|e| aws_error(e, &format!("`{}`", m.name)))?;
        data.as_deref().and_then(boot::host_key_of).ok_or_else(|| {
            StepError::with_hint(
                format!(
                    "`{}`: instance {} carries envc's tags but not a host key envc gave it",
                    m.name, inst.id
                ),
                format!("it was not made by envc: remove its `{TAG_NODE}` tag, or terminate it"),
            )
        })
    }

    /// The same machine as the source says: its type changed in place (stop, modify,
    /// start), running.
    async fn converge(
        &self,
        ec2: &Ec2Client,
        inst: Instance,
        m: &Ec2Machine,
    ) -> Result<Instance, StepError> {
        let err = |e| aws_error(e, &format!("`{}`", m.name));
        let wait = |want: &'static [InstanceState]| {
            ec2.wait_for_state(&inst.id, want, Duration::from_secs(2), self.boot_timeout)
        };
        let mut state = inst.state;
        if inst.instance_type != m.instance_type {
            if state != InstanceState::Stopped {
                ec2.stop_instance(&inst.id).await.map_err(err)?;
                wait(&[InstanceState::Stopped]).await.map_err(err)?;
            }
            ec2.modify_instance_type(&inst.id, &m.instance_type)
                .await
                .map_err(err)?;
            state = InstanceState::Stopped;
        }
        if state == InstanceState::Stopping {
            wait(&[InstanceState::Stopped]).await.map_err(err)?;
            state = InstanceState::Stopped;
        }
        if state == InstanceState::Stopped {
            ec2.start_instance(&inst.id).await.map_err(err)?;
        }
        wait(&[InstanceState::Running]).await.map_err(err)
    }

    /// Connects to the running instance with the host key it was given, waiting (at most
    /// the boot timeout) for its sshd, and says what it is.
    async fn connect(
        &self,
        m: &Ec2Machine,
        inst: Instance,
        host_key: HostKey,
        ssh: &SshOptions,
    ) -> Result<Realized, StepError> {
        let private = inst.private_ip.clone().unwrap_or_default();
        let public = inst.public_ip.clone().filter(|_| m.public_address);
        let address = public.clone().unwrap_or_else(|| private.clone());
        if address.is_empty() {
            return Err(StepError::new(format!(
                "`{}`: instance {} has no address",
                m.name, inst.id
            )));
        }
        let host = HostSpec {
            name: m.name.clone(),
            address: address.clone(),
            port: 22,
            user: m.user.clone(),
            identity: Some(self.key.path.clone()),
        };
        let opts = SshOptions {
            connect_timeout: Duration::from_secs(5),
            ..ssh.clone()
        };
        let started = Instant::now();
        let transport = loop {
            match Transport::connect(&host, Some(&host_key), &opts).await {
                Ok((t, _)) => break t,
                Err(e @ TransportError::HostKeyChanged { .. }) => {
                    return Err(StepError::with_hint(
                        format!("`{}` ({} at {address}): {e}", m.name, inst.id),
                        "this is not the host key envc gave the machine: another machine answers at its address, or its user data was not applied; envc does not connect",
                    ))
                }
                Err(e) if started.elapsed() > self.boot_timeout => {
                    return Err(StepError::with_hint(
                        format!(
                            "`{}` ({} at {address}) did not answer ssh within {} s: {e}; it is left running with envc's tags, and the next build adopts it",
                            m.name,
                            inst.id,
                            self.boot_timeout.as_secs()
                        ),
                        "check that its security group lets SSH in from here and that it booted (`aws ec2 get-console-output`); a slow machine may need a longer --boot-timeout; `envc destroy` removes it",
                    ))
                }
                Err(_) => tokio::time::sleep(Duration::from_secs(1)).await,
            }
        };
        let placed_network = inst.tags.get(TAG_NETWORK).cloned().unwrap_or_default();
        let key_pair = inst.key_name.clone().unwrap_or_default();
        let facts = Facts::from([
            (PROVIDER.to_string(), NAME.to_string()),
            (fact::ADDRESS.to_string(), private.clone()),
            (
                fact::PUBLIC_ADDRESS.to_string(),
                inst.public_ip.clone().unwrap_or(private),
            ),
            (fact::SSH_ADDRESS.to_string(), address),
            (fact::PORT.to_string(), "22".to_string()),
            (fact::USER.to_string(), m.user.clone()),
            (fact::HOST_KEY.to_string(), host_key.key.clone()),
            (fact::FINGERPRINT.to_string(), host_key.fingerprint.clone()),
            (fact::INSTANCE_ID.to_string(), inst.id.clone()),
            (ec2_fact::REGION.to_string(), m.region.clone()),
            (
                ec2_fact::INSTANCE_TYPE.to_string(),
                inst.instance_type.clone(),
            ),
            (ec2_fact::IMAGE.to_string(), inst.image_id.clone()),
            (
                ec2_fact::SUBNET.to_string(),
                inst.subnet_id.clone().unwrap_or_default(),
            ),
            (
                ec2_fact::VPC.to_string(),
                inst.vpc_id.clone().unwrap_or_default(),
            ),
            (
                ec2_fact::SECURITY_GROUPS.to_string(),
                inst.security_group_ids.join(","),
            ),
            (ec2_fact::NETWORK.to_string(), placed_network),
            (
                ec2_fact::ROOT_VOLUME.to_string(),
                m.root_volume_gib.to_string(),
            ),
            (ec2_fact::KEY_PAIR.to_string(), key_pair),
        ]);
        Ok((facts, transport, host_key))
    }

    /// Finds the instance an `adopt` line names (`from.instance_id`) in the machine's
    /// region, running, and logs in to it; with `take`, tags it as envc tags what it makes
    /// (the node's tags, the owner tags, `envc:node`) plus `envc:adopted`. Nothing else on
    /// it changes, and no instance is made.
    pub async fn find_adopted(
        &self,
        m: &Ec2Machine,
        from: &BTreeMap<String, String>,
        tags: &BTreeMap<String, String>,
        ssh: &SshOptions,
        take: bool,
    ) -> Result<(Realized, DriftFacts, String), StepError> {
        let id = from.get("instance_id").cloned().unwrap_or_default();
        let ec2 = self.client(&m.region)?;
        let subject = format!("instance {id}");
        let found = match ec2.describe_instances(std::slice::from_ref(&id), &[]).await {
            Ok(found) => found,
            Err(e) if matches!(e.kind(), ErrorKind::NotFound) => Vec::new(),
            Err(e) => return Err(aws_error(e, &subject)),
        };
        let Some(inst) = found.into_iter().next() else {
            return Err(StepError::with_hint(
                format!("there is no instance {id} in {}", m.region),
                "write in `instance_id` the id of a running instance of the node's region, or remove the `adopt` line to let envc make the machine",
            ));
        };
        if inst.state != InstanceState::Running {
            return Err(StepError::with_hint(
                format!("instance {id} is {}, not running", inst.state.as_str()),
                "start it and build again; envc does not start a machine it did not make",
            ));
        }
        if let Some(other) = inst.tags.get(TAG_ENVIRONMENT).filter(|e| **e != self.env) {
            return Err(StepError::with_hint(
                format!("instance {id} is environment `{other}`'s (its `{TAG_ENVIRONMENT}` tag)"),
                "one environment manages a machine: adopt it there, or remove that tag first",
            ));
        }
        let mut differences = DriftFacts::new();
        if inst.instance_type != m.instance_type {
            differences.push((
                ec2_fact::INSTANCE_TYPE.into(),
                m.instance_type.clone(),
                inst.instance_type.clone(),
            ));
        }
        if let ImageChoice::Pinned { id: ami, .. } = &m.image {
            if *ami != inst.image_id {
                differences.push((ec2_fact::IMAGE.into(), ami.clone(), inst.image_id.clone()));
            }
        }
        let known = match from.get("host_key") {
            Some(k) => {
                let key = k.split_whitespace().take(2).collect::<Vec<_>>().join(" ");
                let fingerprint = crate::transport::fingerprint(&key).ok_or_else(|| {
                    StepError::new(format!("`host_key` is not a public key: {k}"))
                })?;
                HostKey { key, fingerprint }
            }
            None => {
                // Not given: the key the machine shows at the first connection, pinned.
                let address = (inst.public_ip.clone().filter(|_| m.public_address))
                    .or(inst.private_ip.clone())
                    .unwrap_or_default();
                let host = HostSpec {
                    name: m.name.clone(),
                    address: address.clone(),
                    port: 22,
                    user: m.user.clone(),
                    identity: Some(self.key.path.clone()),
                };
                let opts = SshOptions {
                    connect_timeout: Duration::from_secs(10),
                    ..ssh.clone()
                };
                let login = self.key.public().await?;
                let (t, key) = Transport::connect(&host, None, &opts).await.map_err(|e| {
                    StepError::with_hint(
                        format!("instance {id} runs, but {address} does not let envc in as {}: {e}", m.user),
                        format!("envc logs in with its key {}: add `{login}` to {}'s authorized_keys there", self.key.path.display(), m.user),
                    )
                })?;
                t.close().await;
                key
            }
        };
        let mut added: Vec<String> = Vec::new();
        if take {
            self.remember_region(&m.region)?;
            let mut mine: Tags = tags.clone();
            mine.extend(owner_tags(&self.env));
            mine.insert(TAG_NODE.to_string(), m.name.clone());
            mine.insert(TAG_ADOPTED.to_string(), "true".to_string());
            added = (mine.keys())
                .filter(|k| !inst.tags.contains_key(*k))
                .cloned()
                .collect();
            ec2.create_tags(&id, &mine)
                .await
                .map_err(|e| aws_error(e, &subject))?;
        }
        let state = inst.state.as_str().to_string();
        let (mut facts, transport, host_key) = self.connect(m, inst, known, ssh).await?;
        facts.insert(ADOPTED_TAGS.to_string(), added.join(","));
        let how = format!("instance {id}, {state}, host key {}", host_key.fingerprint);
        Ok(((facts, transport, host_key), differences, how))
    }

    /// An adopted instance let go: the tags envc added taken off, nothing else.
    async fn release_machine(&self, facts: &Facts) -> Result<String, StepError> {
        let (Some(region), Some(id)) = (facts.get(ec2_fact::REGION), facts.get(fact::INSTANCE_ID))
        else {
            return Ok("forgotten".into());
        };
        let keys: Vec<String> = (facts.get(ADOPTED_TAGS).map_or("", String::as_str))
            .split(',')
            .filter(|k| !k.is_empty())
            .map(str::to_string)
            .collect();
        if !keys.is_empty() {
            let ec2 = self.client(region)?;
            match ec2.delete_tags(id, &keys).await {
                Ok(()) => {}
                Err(e) if matches!(e.kind(), ErrorKind::NotFound) => {}
                Err(e) => return Err(aws_error(e, &format!("instance {id}"))),
            }
        }
        Ok(format!(
            "left running as it was found: adopted (instance {id}, envc's tags taken off; `destroy --adopted` terminates it)"
        ))
    }

    /// Terminates instance `id` and waits (at most the boot timeout) until EC2 says it is.
    async fn terminate(&self, ec2: &Ec2Client, id: &str) -> Result<(), AwsError> {
        ec2.terminate_instance(id).await?;
        ec2.wait_for_state(
            id,
            &[InstanceState::Terminated],
            Duration::from_secs(2),
            self.boot_timeout,
        )
        .await
        .map(drop)
    }

    /// Terminates the machine, waits for it, then deletes what envc made for it that no
    /// machine uses any more: its network, the key pair.
    async fn destroy_machine(&self, facts: &Facts) -> Result<(), StepError> {
        let (Some(region), Some(id)) = (facts.get(ec2_fact::REGION), facts.get(fact::INSTANCE_ID))
        else {
            return Ok(());
        };
        let ec2 = self.client(region)?;
        let subject = format!("instance {id}");
        let err = |e| aws_error(e, &subject);
        match self.terminate(&ec2, id).await {
            Ok(()) => {}
            Err(e) if matches!(e.kind(), ErrorKind::NotFound) => {}
            Err(e) => return Err(err(e)),
        }
        if let Some(net) = facts.get(ec2_fact::NETWORK).filter(|n| !n.is_empty()) {
            network::delete_if_unused(&ec2, &self.env, net).await?;
        }
        self.delete_key_pairs_if_unused(&ec2).await
    }

    async fn delete_key_pairs_if_unused(&self, ec2: &Ec2Client) -> Result<(), StepError> {
        let err = |e| aws_error(e, "the login key pair");
        if !self
            .live_instances(ec2, None)
            .await
            .map_err(err)?
            .is_empty()
        {
            return Ok(());
        }
        let pairs = ec2
            .describe_key_pairs(&[Filter::tag(TAG_ENVIRONMENT, &self.env)])
            .await
            .map_err(err)?;
        for p in pairs {
            ec2.delete_key_pair(&p.name).await.map_err(err)?;
        }
        Ok(())
    }

    /// Every machine of this environment that no record knows (`keep` are the recorded
    /// ones), in every region it used, then what nothing uses any more.
    async fn sweep_machines(&self, keep: &BTreeSet<String>) -> Result<(), StepError> {
        for region in self.regions() {
            let ec2 = self.client(&region)?;
            let err = |e| aws_error(e, &format!("environment `{}` in {region}", self.env));
            let live = self.live_instances(&ec2, None).await.map_err(err)?;
            for inst in &live {
                let node = inst.tags.get(TAG_NODE).cloned().unwrap_or_default();
                if keep.contains(&node) || inst.tags.get(TAG_ADOPTED).is_some_and(|v| v == "true") {
                    continue;
                }
                self.terminate(&ec2, &inst.id).await.map_err(err)?;
            }
            let vpcs = ec2
                .describe_vpcs(&[Filter::tag(TAG_ENVIRONMENT, &self.env)])
                .await
                .map_err(err)?;
            for vpc in vpcs {
                if let Some(name) = vpc.tags.get(TAG_NETWORK) {
                    network::delete_if_unused(&ec2, &self.env, name).await?;
                }
            }
            self.delete_key_pairs_if_unused(&ec2).await?;
        }
        Ok(())
    }

    /// What EC2 says of a recorded machine that differs from its record.
    async fn look_at(&self, facts: &Facts) -> Result<DriftFacts, StepError> {
        let (Some(region), Some(id)) = (facts.get(ec2_fact::REGION), facts.get(fact::INSTANCE_ID))
        else {
            return Ok(Vec::new());
        };
        let ec2 = self.client(region)?;
        let found = match ec2.describe_instances(std::slice::from_ref(id), &[]).await {
            Ok(found) => found,
            Err(e) if matches!(e.kind(), ErrorKind::NotFound) => Vec::new(),
            Err(e) => return Err(aws_error(e, &format!("instance {id}"))),
        };
        let Some(inst) = found.into_iter().next() else {
            return Ok(vec![("state".into(), "running".into(), "gone".into())]);
        };
        let mut drift = Vec::new();
        if inst.state != InstanceState::Running {
            drift.push((
                "state".into(),
                "running".into(),
                inst.state.as_str().to_string(),
            ));
        }
        let recorded_type = facts
            .get(ec2_fact::INSTANCE_TYPE)
            .cloned()
            .unwrap_or_default();
        if inst.state != InstanceState::Terminated && inst.instance_type != recorded_type {
            drift.push((
                ec2_fact::INSTANCE_TYPE.into(),
                recorded_type,
                inst.instance_type.clone(),
            ));
        }
        Ok(drift)
    }
}

pub const TOOLS: &[Tool] = &[];

impl VmProvider for Ec2 {
    fn name(&self) -> &'static str {
        NAME
    }

    fn tools(&self) -> &'static [Tool] {
        TOOLS
    }

    fn is_running(&self, _facts: &Facts) -> bool {
        // Only EC2 knows, and a plan asks nothing: `look` does, for drift and --refresh.
        true
    }

    fn look<'a>(
        &'a self,
        facts: &'a Facts,
    ) -> Option<BoxFuture<'a, Result<DriftFacts, StepError>>> {
        Some(Box::pin(self.look_at(facts)))
    }

    fn destroy<'a>(&'a self, facts: &'a Facts) -> BoxFuture<'a, Result<(), StepError>> {
        Box::pin(self.destroy_machine(facts))
    }

    fn destroyed(&self) -> &'static str {
        "terminated, and what envc made for it that nothing uses any more deleted"
    }

    fn sweep<'a>(&'a self, keep: &'a BTreeSet<String>) -> BoxFuture<'a, Result<(), StepError>> {
        Box::pin(self.sweep_machines(keep))
    }

    fn release<'a>(&'a self, facts: &'a Facts) -> BoxFuture<'a, Result<String, StepError>> {
        Box::pin(self.release_machine(facts))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each kind of failure AWS answers gets the fix for it.
    #[test]
    fn every_kind_of_aws_failure_says_what_to_do() {
        let api = |code: &str| AwsError::Api {
            action: "RunInstances".into(),
            status: 400,
            code: code.into(),
            message: "m".into(),
            request_id: None,
            attempts: 1,
        };
        let check = |e: AwsError, cause: &str, hint: &str| {
            let s = aws_error(e, "`web-0`");
            assert!(s.cause.starts_with("`web-0`: "), "{}", s.cause);
            assert!(s.cause.contains(cause), "{} lacks {cause}", s.cause);
            let h = s.hint.unwrap_or_default();
            assert!(h.contains(hint), "{h:?} lacks {hint:?}");
        };
        check(
            AwsError::NoCredentials {
                tried: vec!["the environment".into()],
            },
            "the environment",
            "AWS_PROFILE",
        );
        check(
            api("UnauthorizedOperation"),
            "UnauthorizedOperation",
            "grant it",
        );
        check(
            api("InsufficientInstanceCapacity"),
            "InsufficientInstanceCapacity",
            "another instance type or region",
        );
        check(
            api("RequestLimitExceeded"),
            "RequestLimitExceeded",
            "fewer parallel jobs",
        );
        check(
            api("InvalidAMIID.NotFound"),
            "InvalidAMIID.NotFound",
            "deleted outside envc",
        );
        check(
            AwsError::Http {
                action: "RunInstances".into(),
                endpoint: "https://ec2.eu-west-1.amazonaws.com".into(),
                what: "connection refused".into(),
                attempts: 5,
            },
            "connection refused",
            "AWS_ENDPOINT_URL_EC2",
        );
    }

    /// Two machines of a build are created at once: each writes its region down, and
    /// neither fails for the other (nor is a region lost).
    #[test]
    fn regions_written_at_once_are_all_kept() {
        let regions: Vec<String> = (0..16).map(|i| format!("region-{i:02}")).collect();
        for _ in 0..20 {
            let dir = tempfile::tempdir().expect("a temporary directory");
            let key = Arc::new(LoginKey::new(dir.path()));
            let ec2 = Ec2::new(dir.path(), "prod", key, Duration::from_secs(1));
            std::thread::scope(|s| {
                for r in &regions {
                    let ec2 = &ec2;
                    s.spawn(move || ec2.remember_region(r).expect("written down"));
                }
            });
            assert_eq!(
                ec2.regions(),
                regions.iter().cloned().collect::<BTreeSet<_>>()
            );
        }
    }
}
