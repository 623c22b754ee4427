//! The kinds envc validates: the API's built-in objects people write by hand. Anything
//! else (a custom resource) is written as given, unvalidated.

use std::any::TypeId;
use std::sync::{Arc, Mutex, OnceLock};

use k8s_openapi::{ClusterResourceScope, Resource};
use serde_json::Value as Json;

pub struct Kind {
    pub api_version: &'static str,
    pub kind: &'static str,
    /// Lives in a namespace (a Deployment), or in the whole cluster (a Namespace).
    pub namespaced: bool,
    schema: fn() -> Json,
}

impl Kind {
    /// The JSON Schema of the whole object (its `$defs` included), made once.
    pub fn schema(&self) -> Arc<Json> {
        static CACHE: Mutex<Vec<(&'static str, &'static str, Arc<Json>)>> = Mutex::new(Vec::new());
        let mut cache = CACHE.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, _, s)) = cache
            .iter()
            .find(|(a, k, _)| *a == self.api_version && *k == self.kind)
        {
            return s.clone();
        }
        let s = Arc::new((self.schema)());
        cache.push((self.api_version, self.kind, s.clone()));
        s
    }
}

fn kind<T: Resource + schemars::JsonSchema + 'static>() -> Kind {
    Kind {
        api_version: T::API_VERSION,
        kind: T::KIND,
        namespaced: TypeId::of::<T::Scope>() != TypeId::of::<ClusterResourceScope>(),
        schema: || schemars::schema_for!(T).to_value(),
    }
}

pub fn kinds() -> &'static [Kind] {
    use k8s_openapi::api::{
        apps::v1 as apps, autoscaling::v2 as autoscaling, batch::v1 as batch, core::v1 as core,
        networking::v1 as networking, policy::v1 as policy, rbac::v1 as rbac,
        scheduling::v1 as scheduling, storage::v1 as storage,
    };
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1 as apiextensions;
    static KINDS: OnceLock<Vec<Kind>> = OnceLock::new();
    KINDS.get_or_init(|| {
        vec![
            kind::<core::Namespace>(),
            kind::<core::ConfigMap>(),
            kind::<core::Secret>(),
            kind::<core::Service>(),
            kind::<core::ServiceAccount>(),
            kind::<core::PersistentVolumeClaim>(),
            kind::<core::PersistentVolume>(),
            kind::<core::Pod>(),
            kind::<core::ResourceQuota>(),
            kind::<core::LimitRange>(),
            kind::<apps::Deployment>(),
            kind::<apps::StatefulSet>(),
            kind::<apps::DaemonSet>(),
            kind::<apps::ReplicaSet>(),
            kind::<batch::Job>(),
            kind::<batch::CronJob>(),
            kind::<networking::Ingress>(),
            kind::<networking::IngressClass>(),
            kind::<networking::NetworkPolicy>(),
            kind::<rbac::Role>(),
            kind::<rbac::RoleBinding>(),
            kind::<rbac::ClusterRole>(),
            kind::<rbac::ClusterRoleBinding>(),
            kind::<policy::PodDisruptionBudget>(),
            kind::<autoscaling::HorizontalPodAutoscaler>(),
            kind::<storage::StorageClass>(),
            kind::<scheduling::PriorityClass>(),
            kind::<apiextensions::CustomResourceDefinition>(),
        ]
    })
}

/// The kind with this `apiVersion` and `kind`.
pub fn find(api_version: &str, kind: &str) -> Option<&'static Kind> {
    kinds()
        .iter()
        .find(|k| k.api_version == api_version && k.kind == kind)
}
