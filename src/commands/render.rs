//! `envc render FILE --out DIR`: every Kubernetes object of the environment as canonical
//! YAML, one file per object (`NAMESPACE/KIND-NAME.yaml`, `_cluster/…` for cluster-wide
//! ones), and a `kustomization.yaml` listing them, for `kubectl apply -k DIR` or a GitOps
//! repository. Deferred values (a VM's address) come from the environment's records, as a
//! build would substitute them. Files a previous render listed that are no longer objects
//! of the environment are removed, unless someone changed them since; nothing else in DIR
//! is touched, and nothing outside it, whatever links DIR holds (`kustomize::apply`).

use std::collections::BTreeMap;
use std::path::Path;

use envc_executor::{kustomize, rendered_manifest, Resolution};

use super::{compile_env, store_session, Params, SharedArgs, Ui};
use crate::exit::{Exit, Failure, Outcome};
use crate::output;

pub fn render(file: &Path, out: &Path, params: &Params, shared: &SharedArgs, ui: Ui) -> Outcome {
    let mut env = compile_env(file, params, true, ui)?;
    let session = store_session(file, shared)?;
    super::prepare(&session, &mut env.spec, file, shared, false)?;
    let report = session.plan(&env.spec, &env.files, false)?;
    let mut objects = Vec::new();
    let mut waiting = Vec::new();
    for n in &report.plan.nodes {
        let node = &env.spec.nodes[n.index];
        match &n.assessment.resolved {
            Ok(r) => {
                if let Some(object) = rendered_manifest(&r.payload) {
                    objects.push(object);
                }
            }
            Err(Resolution::Pending(j))
                if node.kind == envc_compiler::types::NodeKind::Manifest =>
            {
                waiting.push(format!(
                    "`{}` uses an output of `{}`, known once it is built (`envc build {}`)",
                    node.key,
                    env.spec.nodes[*j].key,
                    file.display()
                ));
            }
            Err(Resolution::Failed(m)) if node.kind == envc_compiler::types::NodeKind::Manifest => {
                waiting.push(m.clone());
            }
            Err(_) => {}
        }
    }
    if !waiting.is_empty() {
        return Err(Failure::Input(format!(
            "cannot render every object:\n  {}\n  nothing was written",
            waiting.join("\n  ")
        )));
    }
    let keep: BTreeMap<String, Option<String>> = objects
        .iter()
        .map(|(n, y)| (n.clone(), Some(y.clone())))
        .collect();
    let change = kustomize::apply(out, "", &session.env, &objects, &keep)
        .map_err(|e| Failure::Input(format!("cannot render into {}: {e}", out.display())))?;
    for f in &change.written {
        output::line(format!("wrote {}", out.join(f).display()));
    }
    for f in &change.removed {
        output::line(format!("removed {}", out.join(f).display()));
    }
    for f in &change.left {
        crate::output::errln!(
            "render: left {}: its object left the environment, but someone changed the file since envc wrote it; remove it yourself if it should go",
            out.join(f).display()
        );
    }
    crate::output::errln!(
        "render: {} objects in {}: {} written, {} removed",
        objects.len(),
        out.display(),
        change.written.len(),
        change.removed.len()
    );
    Ok(Exit::Ok)
}
