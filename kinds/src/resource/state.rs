//! What a resource's record keeps of it, and what is done with a record alone: reading it
//! back for drift, destroying it once its node is gone. Everything needed for those is in
//! the record (the provider, its pin and configuration, the resource's type and state), so
//! a resource removed from the source is still destroyed by the provider that made it.

use std::path::PathBuf;
use std::sync::Arc;

use base64::Engine;
use envc_tfplugin::{Block, Provider, Value, ValueError};

use crate::error::StepError;
use crate::machines::Machines;
use crate::record::{DriftFacts, Facts, RealizationRecord};
use crate::spec::Val;
use crate::store::Store;

/// The resource's state as JSON: each attribute as the provider answered it, the sensitive
/// ones as their keyed hash.
pub const STATE: &str = "state";
/// The provider's private state, base64 (opaque to envc, handed back on the next call).
pub const PRIVATE: &str = "private";
pub const TYPE: &str = "type";
pub const SCHEMA_VERSION: &str = "schema_version";
pub const PROVIDER: &str = "provider";
pub const PROVIDER_PIN: &str = "provider_pin";
pub const PROVIDER_CONFIG: &str = "provider_config";
/// How a sensitive value is kept: `keyed:` and its keyed blake3 under the store's key.
pub const KEYED: &str = "keyed:";

pub struct Recorded {
    pub type_name: String,
    pub schema_version: i64,
    pub state: serde_json::Map<String, serde_json::Value>,
    pub private: Vec<u8>,
    pub provider: String,
    pub provider_pin: String,
    pub provider_config: serde_json::Value,
}

fn keyed(key: &[u8; 32], value: &serde_json::Value) -> String {
    format!(
        "{KEYED}{}",
        blake3::keyed_hash(key, value.to_string().as_bytes()).to_hex()
    )
}

pub fn store_key(store: &Store) -> Result<[u8; 32], StepError> {
    store
        .secret_key(true)?
        .ok_or_else(|| StepError::new("the store has no key to keep sensitive values with"))
}

impl Recorded {
    pub fn from_facts(facts: &Facts) -> Result<Recorded, StepError> {
        let get = |k: &str| {
            facts.get(k).ok_or_else(|| {
                StepError::new(format!(
                    "its record has no `{k}`: it was not made by this envc"
                ))
            })
        };
        let state = match serde_json::from_str(get(STATE)?) {
            Ok(serde_json::Value::Object(m)) => m,
            _ => return Err(StepError::new("its record's state is not a JSON object")),
        };
        let private = base64::engine::general_purpose::STANDARD
            .decode(get(PRIVATE)?)
            .map_err(|e| {
                StepError::new(format!("its record's private state is not base64: {e}"))
            })?;
        Ok(Recorded {
            type_name: get(TYPE)?.clone(),
            schema_version: get(SCHEMA_VERSION)?.parse().unwrap_or(0),
            state,
            private,
            provider: get(PROVIDER)?.clone(),
            provider_pin: facts.get(PROVIDER_PIN).cloned().unwrap_or_default(),
            provider_config: serde_json::from_str(get(PROVIDER_CONFIG)?).map_err(|e| {
                StepError::new(format!(
                    "its record's provider configuration is not JSON: {e}"
                ))
            })?,
        })
    }

    /// What a resource answered by its provider is recorded as.
    pub fn new(
        spec: &super::ResourceSpec,
        schema_version: i64,
        block: &Block,
        state: &Value,
        private: &[u8],
        key: &[u8; 32],
    ) -> Result<Recorded, StepError> {
        let given_secret = |v: &serde_json::Value| {
            v.as_str()
                .is_some_and(|s| spec.secrets.iter().any(|x| x == s))
        };
        Ok(Recorded {
            type_name: spec.type_name.clone(),
            schema_version,
            state: kept_state(block, state, key, |_, v| given_secret(v))?,
            private: private.to_vec(),
            provider: spec.provider.clone(),
            provider_pin: spec.pin.clone().unwrap_or_default(),
            provider_config: spec.provider_config_kept.clone(),
        })
    }

    pub fn facts(&self) -> Facts {
        let mut facts = Facts::new();
        facts.insert(
            STATE.into(),
            serde_json::Value::Object(self.state.clone()).to_string(),
        );
        facts.insert(
            PRIVATE.into(),
            base64::engine::general_purpose::STANDARD.encode(&self.private),
        );
        facts.insert(TYPE.into(), self.type_name.clone());
        facts.insert(SCHEMA_VERSION.into(), self.schema_version.to_string());
        facts.insert(PROVIDER.into(), self.provider.clone());
        facts.insert(PROVIDER_PIN.into(), self.provider_pin.clone());
        facts.insert(PROVIDER_CONFIG.into(), self.provider_config.to_string());
        facts
    }

    /// The recorded state as the provider's current schema reads it, each sensitive value
    /// taken from `config` where its keyed hash is the one recorded (null where it is not:
    /// the value changed, and the plan says so).
    pub async fn prior_value(
        &self,
        block: &Block,
        config: &Value,
        key: &[u8; 32],
        schema_version: i64,
        provider: &Provider,
    ) -> Result<Value, StepError> {
        let mut state = self.state.clone();
        for (name, v) in state.iter_mut() {
            let Some(recorded) = v
                .as_str()
                .filter(|s| s.starts_with(KEYED))
                .map(str::to_string)
            else {
                continue;
            };
            let ty = block.attributes.get(name).map(|a| a.ty.clone());
            let given = match ty {
                Some(ty) => config
                    .attr(name)
                    .to_json(&ty)
                    .unwrap_or(serde_json::Value::Null),
                None => serde_json::Value::Null,
            };
            *v = if !given.is_null() && keyed(key, &given) == recorded {
                given
            } else {
                serde_json::Value::Null
            };
        }
        let json = serde_json::Value::Object(state);
        if schema_version != self.schema_version {
            let upgraded = provider
                .upgrade(
                    &self.type_name,
                    self.schema_version,
                    json.to_string().as_bytes(),
                )
                .await
                .map_err(|e| StepError::new(e.to_string()))?;
            super::refused("upgrade its recorded state", &upgraded.diagnostics)?;
            return Ok(upgraded.state);
        }
        Value::from_json(&json, &block.implied_type()).map_err(|e| {
            StepError::new(format!(
                "its recorded state does not fit the provider's schema: {e}"
            ))
        })
    }

    async fn provider(&self, machines: &Machines) -> Result<Arc<Provider>, StepError> {
        if holds_keyed(&self.provider_config) {
            return Err(StepError::with_hint(
                "its provider's configuration held a secret, which its record keeps only as a keyed hash",
                "give the provider its credentials in its own environment variables, as Terraform does, or keep the resource in the source until it is built without it",
            ));
        }
        let executable: PathBuf = machines
            .terraform()
            .executable(machines.store(), &self.provider, &self.provider_pin)
            .await?;
        machines
            .terraform()
            .provider(&executable, &self.provider_config)
            .await
    }
}

/// `state` as JSON as a record keeps it: each attribute the schema marks sensitive, or that
/// `secret` says holds a secret, as its keyed hash.
fn kept_state(
    block: &Block,
    state: &Value,
    key: &[u8; 32],
    secret: impl Fn(&str, &serde_json::Value) -> bool,
) -> Result<serde_json::Map<String, serde_json::Value>, StepError> {
    let json = state
        .to_json(&block.implied_type())
        .map_err(|e| StepError::new(format!("the provider's answer: {e}")))?;
    let serde_json::Value::Object(mut state) = json else {
        return Err(StepError::new(
            "the provider answered with something other than an object",
        ));
    };
    for (name, attribute) in &block.attributes {
        if let Some(v) = state
            .get_mut(name)
            .filter(|v| !v.is_null() && (attribute.sensitive || secret(name, v)))
        {
            *v = serde_json::Value::String(keyed(key, v));
        }
    }
    Ok(state)
}

/// A record's resource as its provider has it now: the provider, the resource type's schema,
/// the store's key and the recorded state as the prior (its sensitive values null: only the
/// source holds them).
struct Reopened {
    recorded: Recorded,
    provider: Arc<Provider>,
    schema: envc_tfplugin::Schema,
    key: [u8; 32],
    prior: Value,
}

async fn reopen(record: &RealizationRecord, machines: &Machines) -> Result<Reopened, StepError> {
    let recorded = Recorded::from_facts(&record.facts)?;
    let provider = recorded.provider(machines).await?;
    let schemas = provider.schema().await.map_err(super::plugin)?;
    let Some(schema) = schemas.resources.get(&recorded.type_name).cloned() else {
        return Err(StepError::new(format!(
            "its provider no longer has resource type `{}`",
            recorded.type_name
        )));
    };
    let key = store_key(machines.store())?;
    let prior = recorded
        .prior_value(&schema.block, &Value::Null, &key, schema.version, &provider)
        .await?;
    Ok(Reopened {
        recorded,
        provider,
        schema,
        key,
        prior,
    })
}

/// What reading the resource back finds different from its record; `exists: yes → no`
/// when the provider finds it gone.
pub async fn drift(
    record: &RealizationRecord,
    machines: &Machines,
) -> Result<DriftFacts, StepError> {
    let Reopened {
        recorded,
        provider,
        schema,
        key,
        prior,
    } = reopen(record, machines).await?;
    let read = provider
        .read(&recorded.type_name, &prior, &recorded.private)
        .await
        .map_err(super::plugin)?;
    super::refused("read it back", &read.diagnostics)?;
    if read.state == Value::Null {
        return Ok(vec![("exists".into(), "yes".into(), "no".into())]);
    }
    // What is read back is kept as the record keeps it, so that sensitive values and those
    // the record keeps as secrets are compared by their keyed hashes, never shown.
    let recorded_secret = |name: &str, _: &serde_json::Value| {
        recorded
            .state
            .get(name)
            .and_then(|v| v.as_str())
            .is_some_and(|s| s.starts_with(KEYED))
    };
    let now = kept_state(&schema.block, &read.state, &key, recorded_secret)?;
    let shown = |v: &serde_json::Value| match v {
        serde_json::Value::String(s) if s.starts_with(KEYED) => "(sensitive)".to_string(),
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    let names: std::collections::BTreeSet<&String> =
        recorded.state.keys().chain(now.keys()).collect();
    let null = serde_json::Value::Null;
    Ok(names
        .into_iter()
        .filter_map(|name| {
            let was = recorded.state.get(name).unwrap_or(&null);
            let is = now.get(name).unwrap_or(&null);
            (was != is).then(|| (name.clone(), shown(was), shown(is)))
        })
        .collect())
}

/// Destroys what `record` holds, by its provider: a plan to null, applied.
pub async fn destroy(record: &RealizationRecord, machines: &Machines) -> Result<String, StepError> {
    let Reopened {
        recorded,
        provider,
        prior,
        ..
    } = reopen(record, machines).await?;
    super::destroy(&provider, &recorded.type_name, &prior, &recorded.private).await?;
    Ok("destroyed by its provider".into())
}

/// What a `secret(…)` becomes in JSON: its value (for the provider) or its keyed hash (for
/// a record).
#[derive(Clone, Copy)]
pub enum Sealed {
    Value,
    Keyed,
}

/// Whether a kept configuration holds a secret's keyed hash.
fn holds_keyed(v: &serde_json::Value) -> bool {
    match v {
        serde_json::Value::String(s) => s.starts_with(KEYED),
        serde_json::Value::Array(xs) => xs.iter().any(holds_keyed),
        serde_json::Value::Object(m) => m.values().any(holds_keyed),
        _ => false,
    }
}

/// The values of the secrets `v` holds, added to `out`.
pub fn sealed_values(v: &Val, out: &mut Vec<String>) {
    match v {
        Val::Sealed(s) => out.push(s.value.clone()),
        Val::List(xs) => xs.iter().for_each(|x| sealed_values(x, out)),
        Val::Record(r) => r.values().for_each(|x| sealed_values(x, out)),
        _ => {}
    }
}

/// A substituted attribute as JSON: what cty's JSON decoding reads by the provider's schema.
pub fn val_json(v: &Val, sealed: Sealed) -> Result<serde_json::Value, ValueError> {
    use serde_json::Value as J;
    Ok(match v {
        Val::Int(n) => J::from(*n),
        Val::Str(s) => J::String(s.clone()),
        Val::Bool(b) => J::Bool(*b),
        Val::Size(n) => J::from(*n),
        Val::Mode(m) => J::String(format!("{m:04o}")),
        Val::List(xs) => J::Array(
            xs.iter()
                .map(|x| val_json(x, sealed))
                .collect::<Result<_, _>>()?,
        ),
        Val::Record(r) => J::Object(
            r.iter()
                .map(|(k, v)| Ok((k.clone(), val_json(v, sealed)?)))
                .collect::<Result<serde_json::Map<_, _>, ValueError>>()?,
        ),
        Val::Sealed(s) => match sealed {
            Sealed::Value => J::String(s.value.clone()),
            // Already `keyed:…`, the store key's hash of its value.
            Sealed::Keyed => J::String(s.keyed.clone()),
        },
        other => {
            return Err(ValueError::new(format!(
                "{other:?} cannot be handed to a provider"
            )))
        }
    })
}

/// `: did you mean `x`?` when a name is close to one of `names`, else nothing.
pub fn did_you_mean<'a>(name: &str, names: impl IntoIterator<Item = &'a String>) -> String {
    envc_lang::did_you_mean(name, names.into_iter().map(String::as_str))
        .map(|s| format!(": {s}"))
        .unwrap_or_default()
}
