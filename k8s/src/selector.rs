//! Label selectors and the pod templates they must select, as the API server checks them
//! beyond the schema: a workload whose selector does not match its own pod template's
//! labels is refused (`selector does not match template labels`), so `envc check` refuses
//! it first. A value known only at deploy time ([`DEFERRED`]) matches anything: it may.

use serde_json::{Map, Value as Json};

use crate::validate::{Problem, ProblemKind, Seg, DEFERRED};

/// The pod template of a workload: the path to it from the object, and whether its
/// `selector` must select it (a Job's only with `manualSelector`: else the API server
/// makes the selector itself).
fn template_path(api_version: &str, kind: &str) -> Option<&'static [&'static str]> {
    match (api_version, kind) {
        ("apps/v1", "Deployment" | "StatefulSet" | "DaemonSet" | "ReplicaSet")
        | ("v1", "ReplicationController")
        | ("batch/v1", "Job") => Some(&["spec", "template"]),
        ("batch/v1", "CronJob") => Some(&["spec", "jobTemplate", "spec", "template"]),
        _ => None,
    }
}

fn at<'a>(object: &'a Json, path: &[&str]) -> Option<&'a Json> {
    path.iter().try_fold(object, |v, k| v.get(*k))
}

/// The labels of the pods `object` makes: its pod template's, or a Pod's own; `None` when
/// it makes no pods (or its labels are not a record: the schema says so).
pub fn pod_labels(object: &Json) -> Option<&Map<String, Json>> {
    let api_version = object.get("apiVersion")?.as_str()?;
    let kind = object.get("kind")?.as_str()?;
    let labels = match (api_version, kind) {
        ("v1", "Pod") => at(object, &["metadata", "labels"]),
        _ => at(object, template_path(api_version, kind)?)?
            .get("metadata")
            .and_then(|m| m.get("labels")),
    };
    match labels {
        Some(l) => l.as_object(),
        None => Some(EMPTY.get_or_init(Map::new)),
    }
}

static EMPTY: std::sync::OnceLock<Map<String, Json>> = std::sync::OnceLock::new();

/// Whether a `key = value` selector term may select a label set (a deferred value on
/// either side may be anything).
fn has(labels: &Map<String, Json>, key: &str, value: &Json) -> bool {
    match labels.get(key) {
        Some(v) => v == value || v.as_str() == Some(DEFERRED) || value.as_str() == Some(DEFERRED),
        None => false,
    }
}

/// Whether a Service's `spec.selector` (a plain map) may select pods labelled `labels`.
pub fn selects(selector: &Map<String, Json>, labels: &Map<String, Json>) -> bool {
    selector.iter().all(|(k, v)| has(labels, k, v))
}

fn show(v: &Json) -> String {
    match v.as_str() {
        Some(DEFERRED) => "(known at deploy time)".into(),
        Some(s) => format!("\"{s}\""),
        None => v.to_string(),
    }
}

/// The problems of a workload's selector against its own pod template.
pub fn problems(object: &Json) -> Vec<Problem> {
    let (Some(api_version), Some(kind)) = (
        object.get("apiVersion").and_then(Json::as_str),
        object.get("kind").and_then(Json::as_str),
    ) else {
        return Vec::new();
    };
    let Some(template) = template_path(api_version, kind) else {
        return Vec::new();
    };
    // The workload's own spec: the object's, or a CronJob's job's.
    let spec_path = &template[..template.len() - 1];
    let Some(spec) = at(object, spec_path) else {
        return Vec::new();
    };
    if (kind == "Job" || kind == "CronJob") && spec.get("manualSelector") != Some(&Json::Bool(true))
    {
        return Vec::new();
    }
    let Some(selector) = spec.get("selector") else {
        return Vec::new();
    };
    let Some(labels) = pod_labels(object) else {
        return Vec::new();
    };
    let mut base: Vec<Seg> = spec_path
        .iter()
        .map(|s| Seg::Field(s.to_string()))
        .collect();
    base.push(Seg::Field("selector".into()));
    let what = format!(
        "the pod template's labels (`{}.metadata.labels`)",
        template.join(".")
    );
    let help = Some(format!(
        "Kubernetes refuses a {kind} whose selector does not select its own pods: give the pod template the label, or select on one it has"
    ));
    let problem = |path: Vec<Seg>, message: String| Problem {
        kind: ProblemKind::Mismatch,
        path,
        message,
        help: help.clone(),
    };
    let field = |f: &str| {
        let mut p = base.clone();
        p.push(Seg::Field(f.into()));
        p
    };
    // A ReplicationController's selector is the map itself.
    let (match_labels, expressions, match_path) = match kind {
        "ReplicationController" => (selector.as_object(), None, base.clone()),
        _ => (
            selector.get("matchLabels").and_then(Json::as_object),
            selector.get("matchExpressions").and_then(Json::as_array),
            field("matchLabels"),
        ),
    };
    let mut out = Vec::new();
    if match_labels.is_none_or(Map::is_empty) && expressions.is_none_or(|e| e.is_empty()) {
        if selector.as_str() != Some(DEFERRED) {
            out.push(problem(
                base.clone(),
                format!(
                    "an empty selector selects every pod; a {kind} must select its own by label"
                ),
            ));
        }
        return out;
    }
    for (k, v) in match_labels.into_iter().flatten() {
        if has(labels, k, v) {
            continue;
        }
        let mut path = match_path.clone();
        path.push(Seg::Field(k.clone()));
        let message = match labels.get(k) {
            Some(other) => format!(
                "selects `{k}` = {}, but {what} have `{k}` = {}",
                show(v),
                show(other)
            ),
            None => format!("selects `{k}` = {}, but {what} have no `{k}`", show(v)),
        };
        out.push(problem(path, message));
    }
    for (i, e) in expressions.into_iter().flatten().enumerate() {
        let (Some(key), Some(op)) = (
            e.get("key").and_then(Json::as_str),
            e.get("operator").and_then(Json::as_str),
        ) else {
            continue;
        };
        let values: Vec<&Json> = e
            .get("values")
            .and_then(Json::as_array)
            .map(|v| v.iter().collect())
            .unwrap_or_default();
        let label = labels.get(key);
        let deferred = label.is_some_and(|l| l.as_str() == Some(DEFERRED))
            || values.iter().any(|v| v.as_str() == Some(DEFERRED));
        let holds = deferred
            || match op {
                "In" => label.is_some_and(|l| values.contains(&l)),
                "NotIn" => label.is_none_or(|l| !values.contains(&l)),
                "Exists" => label.is_some(),
                "DoesNotExist" => label.is_none(),
                // The schema does not know the operators: the API server says so.
                _ => true,
            };
        if !holds {
            let mut path = field("matchExpressions");
            path.push(Seg::Index(i));
            let has = match label {
                Some(l) => format!("`{key}` = {}", show(l)),
                None => format!("no `{key}`"),
            };
            out.push(problem(
                path,
                format!("`{key} {op}` does not hold for {what}, which have {has}"),
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    fn check(object: Json, expected: &[&str]) {
        let got: Vec<String> = problems(&object)
            .iter()
            .map(|p| format!("{}: {}", p.path_text(), p.message))
            .collect();
        assert_eq!(got, expected, "{object}");
    }

    fn workload(api: &str, kind: &str, spec: Json) -> Json {
        json!({ "apiVersion": api, "kind": kind, "metadata": { "name": "web" }, "spec": spec })
    }

    fn template(labels: Json) -> Json {
        json!({ "metadata": { "labels": labels }, "spec": { "containers": [] } })
    }

    #[test]
    fn a_workload_must_select_its_own_pods() {
        for kind in ["Deployment", "StatefulSet", "DaemonSet", "ReplicaSet"] {
            let spec =
                |sel: Json, labels: Json| json!({ "selector": sel, "template": template(labels) });
            check(
                workload(
                    "apps/v1",
                    kind,
                    spec(
                        json!({ "matchLabels": { "app": "web" } }),
                        json!({ "app": "web", "tier": "front" }),
                    ),
                ),
                &[],
            );
            check(
                workload("apps/v1", kind, spec(json!({ "matchLabels": { "app": "web" } }), json!({ "app": "api" }))),
                &["spec.selector.matchLabels.app: selects `app` = \"web\", but the pod template's labels (`spec.template.metadata.labels`) have `app` = \"api\""],
            );
            check(
                workload("apps/v1", kind, spec(json!({ "matchLabels": { "app": "web" } }), json!({ "name": "web" }))),
                &["spec.selector.matchLabels.app: selects `app` = \"web\", but the pod template's labels (`spec.template.metadata.labels`) have no `app`"],
            );
        }
        check(
            workload("apps/v1", "Deployment", json!({ "selector": {}, "template": template(json!({ "app": "web" })) })),
            &["spec.selector: an empty selector selects every pod; a Deployment must select its own by label"],
        );
        // A label known only at deploy time may match.
        check(
            workload(
                "apps/v1",
                "Deployment",
                json!({ "selector": { "matchLabels": { "app": DEFERRED } }, "template": template(json!({ "app": "web" })) }),
            ),
            &[],
        );
    }

    #[test]
    fn match_expressions() {
        let d = |exprs: Json| {
            workload(
                "apps/v1",
                "Deployment",
                json!({
                    "selector": { "matchExpressions": exprs },
                    "template": template(json!({ "app": "web" })),
                }),
            )
        };
        check(
            d(json!([{ "key": "app", "operator": "In", "values": ["web", "api"] }])),
            &[],
        );
        check(
            d(
                json!([{ "key": "app", "operator": "Exists" }, { "key": "tier", "operator": "DoesNotExist" }]),
            ),
            &[],
        );
        check(
            d(json!([{ "key": "app", "operator": "NotIn", "values": ["web"] }, { "key": "tier", "operator": "Exists" }])),
            &[
                "spec.selector.matchExpressions[0]: `app NotIn` does not hold for the pod template's labels (`spec.template.metadata.labels`), which have `app` = \"web\"",
                "spec.selector.matchExpressions[1]: `tier Exists` does not hold for the pod template's labels (`spec.template.metadata.labels`), which have no `tier`",
            ],
        );
    }

    #[test]
    fn jobs_only_with_a_manual_selector_and_replication_controllers() {
        let job = |manual: bool| {
            workload(
                "batch/v1",
                "Job",
                json!({
                    "manualSelector": manual,
                    "selector": { "matchLabels": { "job": "migrate" } },
                    "template": template(json!({ "app": "web" })),
                }),
            )
        };
        check(job(false), &[]);
        check(
            job(true),
            &["spec.selector.matchLabels.job: selects `job` = \"migrate\", but the pod template's labels (`spec.template.metadata.labels`) have no `job`"],
        );
        check(
            workload("v1", "ReplicationController", json!({ "selector": { "app": "api" }, "template": template(json!({ "app": "web" })) })),
            &["spec.selector.app: selects `app` = \"api\", but the pod template's labels (`spec.template.metadata.labels`) have `app` = \"web\""],
        );
    }

    #[test]
    fn pods_a_service_may_select() {
        let d = workload(
            "apps/v1",
            "Deployment",
            json!({ "template": template(json!({ "app": "web", "tier": "front" })) }),
        );
        let labels = pod_labels(&d).unwrap();
        let sel = |s: Json| s.as_object().unwrap().clone();
        assert!(selects(&sel(json!({ "app": "web" })), labels));
        assert!(!selects(&sel(json!({ "app": "api" })), labels));
        assert!(selects(&sel(json!({ "app": DEFERRED })), labels));
        let pod = json!({ "apiVersion": "v1", "kind": "Pod", "metadata": { "name": "p", "labels": { "app": "web" } } });
        assert!(selects(
            &sel(json!({ "app": "web" })),
            pod_labels(&pod).unwrap()
        ));
        assert!(pod_labels(&json!({ "apiVersion": "v1", "kind": "ConfigMap" })).is_none());
    }
}
