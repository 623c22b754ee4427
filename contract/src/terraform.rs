//! The Terraform/OpenTofu providers of one environment's run: one process per provider
//! executable and configuration, started when a resource first needs it and kept for the
//! run's other resources, so that `-j` resources of one provider share it. Dropped with
//! the run's [`crate::machines::Machines`], which kills what is still running.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use envc_lockfiles::provider::{HttpPolicy, ProviderSource};
use envc_tfplugin::{Provider, StartOptions, Value};

use crate::error::StepError;

pub struct TerraformProviders {
    running: tokio::sync::Mutex<BTreeMap<(PathBuf, String), Arc<Provider>>>,
    /// Where packages come from the first time (`ENVC_PROVIDER_MIRROR`, envc.toml's
    /// `[providers] mirror`, else each address's registry), or why that setting is unusable.
    source: Result<ProviderSource, String>,
}

impl Default for TerraformProviders {
    fn default() -> TerraformProviders {
        TerraformProviders::from(Ok(ProviderSource::Registry {
            http: HttpPolicy::HttpsOnly,
        }))
    }
}

impl From<Result<ProviderSource, String>> for TerraformProviders {
    fn from(source: Result<ProviderSource, String>) -> TerraformProviders {
        TerraformProviders {
            running: Default::default(),
            source,
        }
    }
}

impl TerraformProviders {
    /// The executable of provider `address` at the version and bytes `pin` (`VERSION
    /// HASH…`, the lockfile's value) names, kept in the store (`crate::providers`); the
    /// first run fetches it from the run's source.
    pub async fn executable(
        &self,
        store: &crate::store::Store,
        address: &str,
        pin: &str,
    ) -> Result<PathBuf, StepError> {
        let source = self
            .source
            .as_ref()
            .map_err(|e| StepError::new(e.clone()))?;
        crate::providers::provider_executable(store, address, pin, source)
            .await
            .map_err(|e| StepError::new(e.to_string()))
    }

    /// The provider at `executable`, configured with `config` (JSON, decoded by its schema):
    /// the running one, or a new one started, validated and configured.
    pub async fn provider(
        &self,
        executable: &Path,
        config: &serde_json::Value,
    ) -> Result<Arc<Provider>, StepError> {
        let key = (executable.to_path_buf(), config.to_string());
        // Held while one starts: a second resource of the same provider waits for it
        // rather than starting another.
        let mut running = self.running.lock().await;
        if let Some(p) = running.get(&key) {
            return Ok(p.clone());
        }
        let plugin = |e: envc_tfplugin::PluginError| StepError::new(e.to_string());
        let provider = Provider::start(executable, StartOptions::default())
            .await
            .map_err(plugin)?;
        let schema = provider.schema().await.map_err(plugin)?;
        let block = &schema.provider.block;
        let value = object_value(block, config, "the provider's configuration")?;
        let mut said = provider
            .validate_provider_config(&value)
            .await
            .map_err(plugin)?;
        if !said.iter().any(|d| d.is_error()) {
            said = provider.configure(&value).await.map_err(plugin)?;
        }
        let errors: Vec<String> = said
            .iter()
            .filter(|d| d.is_error())
            .map(|d| d.to_string())
            .collect();
        if !errors.is_empty() {
            return Err(StepError::with_hint(
                format!(
                    "the provider refused its configuration: {}",
                    errors.join("; ")
                ),
                "fix `provider_config` where the resource is declared",
            ));
        }
        let provider = Arc::new(provider);
        running.insert(key, provider.clone());
        Ok(provider)
    }
}

/// `json`, an object of a block's attributes as the source gave them, as the block's typed
/// value. An attribute the block does not have is refused, with the closest name it has.
pub fn object_value(
    block: &envc_tfplugin::Block,
    json: &serde_json::Value,
    what: &str,
) -> Result<Value, StepError> {
    if let serde_json::Value::Object(given) = json {
        for name in given.keys() {
            if !block.attributes.contains_key(name) && !block.blocks.contains_key(name) {
                let names: Vec<&str> = block
                    .attributes
                    .keys()
                    .chain(block.blocks.keys())
                    .map(String::as_str)
                    .collect();
                let hint = match envc_lang::did_you_mean(name, names.iter().copied()) {
                    Some(s) => s,
                    None => format!("its attributes are: {}", names.join(", ")),
                };
                return Err(StepError::with_hint(
                    format!("{what} has no attribute `{name}`"),
                    hint,
                ));
            }
        }
    }
    Value::from_json(json, &block.implied_type())
        .map_err(|e| StepError::new(format!("{what}: {e}")))
}
