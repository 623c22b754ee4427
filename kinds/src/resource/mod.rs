//! `resource` nodes: a resource of a Terraform/OpenTofu provider, hosted by envc over the
//! plugin protocol (crate `envc-tfplugin`). The provider plans and applies; envc decides
//! when, from its own graph: a resource whose resolved hash has a record is not asked
//! about at all, so a no-op starts no provider and contacts no API.
//!
//! A run that changes the resource plans from the state its record kept to what the source
//! says now (Terraform's proposed new state), replaces it when the provider says a changed
//! attribute requires it (destroy, then create), and records the new state (`state.rs`).
//! Drift reads it back (ReadResource); a resource whose node is gone is planned to null
//! and that is applied.

mod state;

use std::collections::BTreeMap;
use std::sync::Arc;

use envc_ids::NodeKind;
use envc_tfplugin::{Diagnostic, Provider, Value};

use crate::error::StepError;
use crate::machines::Machines;
use crate::node_type::{
    BoxFuture, Launch, Launching, LockNeeds, NodeType, Payload, Realize, Unit, UnitCx,
};
use crate::record::{Applied, DriftFacts, Facts, RealizationRecord};
use crate::spec::{NodeSpec, Val};
use crate::substitute::{Resolution, Resolving};
use state::Recorded;

pub struct Resource;

/// A resource as the source declares it, its values as JSON (cty's JSON decoding, directed
/// by the provider's schema, makes them typed values when it is applied).
#[derive(Clone)]
pub struct ResourceSpec {
    pub key: String,
    pub provider: String,
    /// The provider's configuration and the resource's arguments as handed to the
    /// provider: a `secret(…)` in them is its value.
    pub provider_config: serde_json::Value,
    pub type_name: String,
    pub body: serde_json::Value,
    /// The provider's configuration as a record keeps it: each secret as its keyed hash.
    pub provider_config_kept: serde_json::Value,
    /// The values of the secrets in `body`: an attribute the provider answers with one of
    /// them is kept as its keyed hash, whatever its schema says.
    pub secrets: Vec<String>,
    /// The lockfile's pin of the provider (`VERSION HASH…`), when locked.
    pub pin: Option<String>,
    /// What its record kept, when it has one.
    pub prior: Option<Facts>,
}

/// Names what it is without a value: the configuration and arguments may hold secrets.
impl std::fmt::Debug for ResourceSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "ResourceSpec({}: {} of {})",
            self.key, self.type_name, self.provider
        )
    }
}

impl NodeType for Resource {
    fn kind(&self) -> NodeKind {
        NodeKind::Resource
    }

    fn resolve(&self, r: &mut Resolving<'_>) -> Result<Payload, Resolution> {
        let spec = resource_spec(r.node, &r.attrs)?;
        for k in [
            "provider",
            "version",
            "provider_config",
            "resource_type",
            "body",
        ] {
            r.put_given(k);
        }
        Ok(Arc::new(spec))
    }

    fn read_output(
        &self,
        producer: &NodeSpec,
        output: &str,
        facts: &Facts,
    ) -> Result<Val, Resolution> {
        let fail = |m: String| Resolution::Failed(format!("`{}`: {m}", producer.key));
        let recorded = Recorded::from_facts(facts).map_err(|e| fail(e.cause))?;
        match recorded.state.get(output) {
            Some(serde_json::Value::String(s)) if s.starts_with(state::KEYED) => Err(fail(format!(
                "attribute `{output}` is sensitive, and envc hands no sensitive value to other nodes"
            ))),
            Some(serde_json::Value::String(s)) => Ok(Val::Str(s.clone())),
            Some(serde_json::Value::Null) | None => Err(fail(format!(
                "it has no attribute `{output}`{}",
                state::did_you_mean(output, recorded.state.keys())
            ))),
            // Numbers and bools as their text; lists and objects as JSON.
            Some(other) => Ok(Val::Str(other.to_string())),
        }
    }

    fn run_facts(&self) -> &'static [&'static str] {
        &[state::STATE, state::PRIVATE]
    }

    /// Its provider, at the versions its constraint admits.
    fn lock_needs(&self, node: &NodeSpec, cx: &mut LockNeeds<'_>) {
        let text = |k: &str| match node.attrs.get(k) {
            Some(Val::Str(s)) => Some(s.as_str()),
            _ => None,
        };
        if let (Some(address), Some(constraint)) = (text("provider"), text("version")) {
            if let Err(e) = cx.needs.add_provider(address, constraint, &node.key) {
                cx.conflict(e);
            }
        }
    }

    fn remote_drift<'a>(
        &'a self,
        record: &'a RealizationRecord,
        machines: &'a Machines,
    ) -> Option<BoxFuture<'a, Result<DriftFacts, StepError>>> {
        Some(Box::pin(async move {
            state::drift(record, machines)
                .await
                .map_err(|e| e.of(&record.node))
        }))
    }

    fn retire<'a>(
        &'a self,
        machines: &'a Machines,
        record: &'a RealizationRecord,
    ) -> Option<BoxFuture<'a, Result<String, StepError>>> {
        Some(Box::pin(async move {
            state::destroy(record, machines)
                .await
                .map_err(|e| e.of(&record.node))
        }))
    }
}

impl Realize for ResourceSpec {
    fn launch(&self, cx: &Launching<'_>) -> Launch {
        let mut spec = self.clone();
        spec.prior = cx.record.map(|r| r.facts.clone());
        Launch::Alone(Box::new(Apply(spec)))
    }
}

struct Apply(ResourceSpec);

impl Unit for Apply {
    fn run<'a>(self: Box<Self>, cx: UnitCx<'a>) -> BoxFuture<'a, Result<Applied, StepError>> {
        Box::pin(async move {
            // The engine names the node in front of the error.
            apply(&self.0, cx.machines).await
        })
    }
}

fn plugin(e: envc_tfplugin::PluginError) -> StepError {
    StepError::new(e.to_string())
}

/// The provider's errors among `diagnostics`, as one step error (warnings are not errors).
fn refused(call: &str, diagnostics: &[Diagnostic]) -> Result<(), StepError> {
    let errors: Vec<String> = diagnostics
        .iter()
        .filter(|d| d.is_error())
        .map(|d| d.to_string())
        .collect();
    if errors.is_empty() {
        return Ok(());
    }
    Err(StepError::new(format!(
        "the provider refused to {call}: {}",
        errors.join("; ")
    )))
}

async fn apply(spec: &ResourceSpec, machines: &Machines) -> Result<Applied, StepError> {
    let pin = spec.pin.as_deref().ok_or_else(|| {
        StepError::with_hint(
            format!("provider `{}` is not locked", spec.provider),
            "run `envc lock FILE`: a provider runs only at the version and bytes its lockfile pins",
        )
    })?;
    let executable = machines
        .terraform()
        .executable(machines.store(), &spec.provider, pin)
        .await?;
    let provider = machines
        .terraform()
        .provider(&executable, &spec.provider_config)
        .await?;
    let schema = provider.schema().await.map_err(plugin)?;
    let Some(resource) = schema.resources.get(&spec.type_name) else {
        let mut e = StepError::new(format!(
            "provider `{}` has no resource type `{}`",
            spec.provider, spec.type_name
        ));
        if let Some(hint) =
            envc_lang::did_you_mean(&spec.type_name, schema.resources.keys().map(String::as_str))
        {
            e = e.hint(hint);
        }
        return Err(e);
    };
    let block = &resource.block;
    let key = state::store_key(machines.store())?;
    let config = envc_contract::terraform::object_value(
        block,
        &spec.body,
        &format!("resource type `{}`", spec.type_name),
    )?;
    let said = provider
        .validate_resource_config(&spec.type_name, &config)
        .await
        .map_err(plugin)?;
    refused("accept this configuration", &said)?;

    // The prior state, as the provider last answered it, with what only the source holds
    // (its sensitive values) put back.
    let mut prior = Value::Null;
    let mut private = Vec::new();
    if let Some(facts) = &spec.prior {
        let recorded = Recorded::from_facts(facts)?;
        if recorded.type_name == spec.type_name {
            prior = recorded
                .prior_value(block, &config, &key, resource.version, &provider)
                .await?;
            private = recorded.private.clone();
        }
    }

    let proposed = block.proposed_new(&prior, &config);
    let mut planned = provider
        .plan(&spec.type_name, &prior, &proposed, &config, &private)
        .await
        .map_err(plugin)?;
    refused("plan this change", &planned.diagnostics)?;
    let created = prior == Value::Null;
    let replaced = !created && !planned.requires_replace.is_empty();
    if replaced {
        // Destroy, then create: Terraform's default lifecycle.
        destroy(&provider, &spec.type_name, &prior, &private).await?;
        prior = Value::Null;
        let proposed = block.proposed_new(&prior, &config);
        planned = provider
            .plan(&spec.type_name, &prior, &proposed, &config, &[])
            .await
            .map_err(plugin)?;
        refused("plan the replacement", &planned.diagnostics)?;
    }
    let applied = provider
        .apply(
            &spec.type_name,
            &prior,
            &planned.planned_state,
            &config,
            &planned.planned_private,
        )
        .await
        .map_err(plugin)?;
    refused("apply this change", &applied.diagnostics)?;
    if applied.state == Value::Null {
        return Err(StepError::new(
            "the provider answered the apply with no object",
        ));
    }
    let recorded = Recorded::new(
        spec,
        resource.version,
        block,
        &applied.state,
        &applied.private,
        &key,
    )?;
    let note = if replaced {
        Some("replaced: a changed attribute required it".to_string())
    } else if !created {
        Some("updated in place".to_string())
    } else {
        None
    };
    Ok(Applied {
        facts: recorded.facts(),
        created,
        note,
        log: None,
    })
}

/// Plans `prior` to null and applies that.
async fn destroy(
    provider: &Provider,
    type_name: &str,
    prior: &Value,
    private: &[u8],
) -> Result<(), StepError> {
    let planned = provider
        .plan(type_name, prior, &Value::Null, &Value::Null, private)
        .await
        .map_err(plugin)?;
    refused("plan its destruction", &planned.diagnostics)?;
    let applied = provider
        .apply(
            type_name,
            prior,
            &Value::Null,
            &Value::Null,
            &planned.planned_private,
        )
        .await
        .map_err(plugin)?;
    refused("destroy it", &applied.diagnostics)?;
    Ok(())
}

/// A `resource` node's declaration as JSON, from its substituted attributes.
fn resource_spec(
    node: &NodeSpec,
    attrs: &BTreeMap<String, Val>,
) -> Result<ResourceSpec, Resolution> {
    let fail = |m: String| Resolution::Failed(format!("`{}`: {m}", node.key));
    let text = |k: &str| -> Result<String, Resolution> {
        match attrs.get(k) {
            Some(Val::Str(s)) => Ok(s.clone()),
            other => Err(fail(format!("`{k}` is {other:?}, not a string"))),
        }
    };
    let json = |k: &str, sealed: state::Sealed| -> Result<serde_json::Value, Resolution> {
        match attrs.get(k) {
            None => Ok(serde_json::Value::Object(Default::default())),
            Some(v) => state::val_json(v, sealed).map_err(|e| fail(format!("`{k}`: {e}"))),
        }
    };
    let mut secrets = Vec::new();
    if let Some(body) = attrs.get("body") {
        state::sealed_values(body, &mut secrets);
    }
    Ok(ResourceSpec {
        key: node.key.clone(),
        provider: text("provider")?,
        provider_config: json("provider_config", state::Sealed::Value)?,
        type_name: text("resource_type")?,
        body: json("body", state::Sealed::Value)?,
        provider_config_kept: json("provider_config", state::Sealed::Keyed)?,
        secrets,
        pin: node
            .pins
            .iter()
            .find(|(k, _)| matches!(k, envc_compiler::pin::PinKey::Provider(_)))
            .map(|(_, v)| v.clone()),
        prior: None,
    })
}
