//! One connection per target, opened on first use and shared by every step on it. A host
//! that cannot be reached (or presents a changed key) keeps its error, so every later step
//! there fails at once with the same message instead of waiting for its own timeout.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use tokio::sync::OnceCell;

use crate::record::{Facts, RealizationRecord};
use crate::transport::{HostKey, HostSpec, SshOptions, Transport};

pub type Connected = Result<(Arc<Transport>, HostKey), String>;

pub struct Connections {
    pub ssh: SshOptions,
    /// Hosts whose recorded key is not checked (`--trust-host-key NAME`).
    pub trusted: BTreeSet<String>,
    cells: Mutex<BTreeMap<String, Arc<OnceCell<Connected>>>>,
}

impl Connections {
    pub fn new(ssh: SshOptions, trusted: BTreeSet<String>) -> Connections {
        Connections {
            ssh,
            trusted,
            cells: Mutex::new(BTreeMap::new()),
        }
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
                    .map_err(|e| e.to_string())
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
        let host_key = crate::spec::node_key(envc_compiler::types::NodeKind::Host, target, None);
        let record = records.get(&host_key);
        let host = current
            .cloned()
            .or_else(|| record.and_then(|r| host_from_record(target, r)))
            .ok_or_else(|| format!("no address is known for `{target}`"))?;
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

/// A host's key as its record holds it.
pub fn recorded_key(facts: &Facts) -> Option<HostKey> {
    Some(HostKey {
        key: facts.get("host_key")?.clone(),
        fingerprint: facts.get("fingerprint")?.clone(),
    })
}

pub fn host_facts(key: &HostKey) -> Facts {
    Facts::from([
        ("fingerprint".to_string(), key.fingerprint.clone()),
        ("host_key".to_string(), key.key.clone()),
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
    })
}
