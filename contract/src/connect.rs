//! One connection per target, opened on first use and shared by every step on it. A host
//! that cannot be reached (or presents a changed key) keeps its error, so every later step
//! there fails at once with the same message instead of waiting for its own timeout.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use envc_compiler::types::NodeKind;
use envc_ids::fact::machine as fact;
use tokio::sync::OnceCell;

use crate::error::StepError;
use crate::record::{Facts, RealizationRecord};
use crate::transport::{HostKey, HostSpec, SshOptions, Transport};

pub type Connected = Result<(Arc<Transport>, HostKey), StepError>;

/// How a target is reached from its record, by the kind that made the record (a host
/// where its attributes say, a VM where its facts say). The registry's answer, handed in
/// by the session: this layer is below the kinds, which reach their machines through it.
pub type ReachRecord = fn(&str, &RealizationRecord, &Connections) -> Option<HostSpec>;

pub struct Connections {
    pub ssh: SshOptions,
    /// Hosts whose recorded key is not checked (`--trust-host-key NAME`).
    pub trusted: BTreeSet<String>,
    /// The key envc logs in to its own VMs with.
    pub vm_identity: Option<PathBuf>,
    reach_record: ReachRecord,
    cells: Mutex<BTreeMap<String, Arc<OnceCell<Connected>>>>,
}

impl Connections {
    pub fn new(
        ssh: SshOptions,
        trusted: BTreeSet<String>,
        reach_record: ReachRecord,
    ) -> Connections {
        Connections {
            ssh,
            trusted,
            vm_identity: None,
            reach_record,
            cells: Mutex::new(BTreeMap::new()),
        }
    }

    /// Keeps a connection opened elsewhere (a VM's, opened while waiting for it to boot) as
    /// the one for the target with state key `key`.
    pub fn adopt(&self, key: &str, transport: Transport, host_key: HostKey) {
        let cell = Arc::new(OnceCell::new_with(Some(Ok((
            Arc::new(transport),
            host_key,
        )))));
        let mut cells = self.cells.lock().unwrap_or_else(|e| e.into_inner());
        cells.insert(key.to_string(), cell);
    }

    /// How to reach a target from its record (see [`ReachRecord`]).
    pub fn reach_from_record(&self, name: &str, r: &RealizationRecord) -> Option<HostSpec> {
        (self.reach_record)(name, r, self)
    }

    fn cell(&self, host_key: &str) -> Arc<OnceCell<Connected>> {
        let mut cells = self.cells.lock().unwrap_or_else(|e| e.into_inner());
        cells.entry(host_key.to_string()).or_default().clone()
    }

    /// The connection to `host` (state key `host_key`), checking the presented key against
    /// `recorded` unless the host is trusted anew.
    pub async fn get(
        &self,
        host_key: &str,
        host: &HostSpec,
        recorded: Option<HostKey>,
    ) -> Connected {
        let recorded = recorded.filter(|_| !self.trusted.contains(&host.name));
        self.cell(host_key)
            .get_or_init(|| async {
                Transport::connect(host, recorded.as_ref(), &self.ssh)
                    .await
                    .map(|(t, k)| (Arc::new(t), k))
                    .map_err(StepError::from)
            })
            .await
            .clone()
    }

    /// The connection to the host named `target`: at `current` (its address in the graph
    /// now) or else where its record says, checked against its recorded key. For targets
    /// that may have left the graph (probes, deletions).
    pub async fn to_target(
        &self,
        target: &str,
        current: Option<&HostSpec>,
        records: &BTreeMap<String, RealizationRecord>,
    ) -> Connected {
        let host_key = target_key(target, records);
        let record = records.get(&host_key);
        let host = current
            .cloned()
            .or_else(|| record.and_then(|r| self.reach_from_record(target, r)))
            .ok_or_else(|| StepError::new(format!("no address is known for `{target}`")))?;
        self.get(
            &host_key,
            &host,
            record.and_then(|r| recorded_key(&r.facts)),
        )
        .await
    }

    /// Closes every connection (ends the multiplexing masters).
    pub async fn close(&self) {
        let cells: Vec<_> = {
            let mut cells = self.cells.lock().unwrap_or_else(|e| e.into_inner());
            std::mem::take(&mut *cells).into_values().collect()
        };
        for cell in cells {
            if let Some(Ok((t, _))) = Arc::into_inner(cell).and_then(OnceCell::into_inner) {
                if let Some(t) = Arc::into_inner(t) {
                    t.close().await;
                }
            }
        }
    }
}

/// The state key of the target named `name`: the first of the target kinds (in their
/// order, a machine envc makes before one it only reaches) that has a record, else the
/// last of them.
pub fn target_key(name: &str, records: &BTreeMap<String, RealizationRecord>) -> String {
    let keys: Vec<String> = (NodeKind::ALL.into_iter())
        .filter(|k| k.is_target())
        .map(|k| crate::spec::node_key(k, name, None))
        .collect();
    let recorded = keys.iter().find(|k| records.contains_key(k.as_str()));
    recorded.or(keys.last()).cloned().unwrap_or_default()
}

/// How to reach a VM, from its facts.
pub fn vm_host(name: &str, facts: &Facts, identity: PathBuf) -> Option<HostSpec> {
    Some(HostSpec {
        name: name.to_string(),
        address: facts.get(fact::SSH_ADDRESS)?.clone(),
        port: facts.get(fact::PORT)?.parse().ok()?,
        user: facts.get(fact::USER)?.clone(),
        identity: Some(identity),
    })
}

/// A host's key as its record holds it.
pub fn recorded_key(facts: &Facts) -> Option<HostKey> {
    Some(HostKey {
        key: facts.get(fact::HOST_KEY)?.clone(),
        fingerprint: facts.get(fact::FINGERPRINT)?.clone(),
    })
}

pub fn host_facts(key: &HostKey) -> Facts {
    Facts::from([
        (fact::FINGERPRINT.to_string(), key.fingerprint.clone()),
        (fact::HOST_KEY.to_string(), key.key.clone()),
    ])
}

/// How to reach a host, from its record (for targets no longer in the graph).
pub fn host_from_record(name: &str, r: &RealizationRecord) -> Option<HostSpec> {
    let json = |k: &str| serde_json::from_str::<serde_json::Value>(r.attrs.get(k)?).ok();
    let address = json("address")?.as_str()?.to_string();
    let port = u16::try_from(json("port")?.as_u64()?).ok()?;
    let user = json("user")?.as_str()?.to_string();
    Some(HostSpec {
        name: name.to_string(),
        address,
        port,
        user,
        identity: None,
    })
}
