//! `envc render FILE --out DIR`: every Kubernetes object of the environment as canonical
//! YAML, one file per object (`NAMESPACE/kind-NAME.yaml`, the kind in lower case,
//! `_cluster/…` for cluster-wide ones), and a `kustomization.yaml` listing them, for
//! `kubectl apply -k DIR` or a GitOps repository. Deferred values (a VM's address) come
//! from the environment's records, as a build would substitute them; one not known yet
//! stops the render (nothing written), unless `--preview` asks for every object now, that
//! value as a placeholder, and an exit code (7) that says the files are not deliverable. Files a previous render listed that are no longer objects
//! of the environment are removed, unless someone changed them since; nothing else in DIR
//! is touched, and nothing outside it, whatever links DIR holds (`kustomize::apply`).

use std::collections::BTreeMap;
use std::path::Path;

use envc_compiler::types::NodeKind;
use envc_executor::{kustomize, placeholders_in, rendered_manifest, Resolution, PLACEHOLDER};

use super::{compile_env, store_session, Params, SharedArgs, Ui};
use crate::exit::{Exit, Failure, Outcome};
use crate::output;

pub fn render(
    file: &Path,
    out: &Path,
    preview: bool,
    params: &Params,
    shared: &SharedArgs,
    ui: Ui,
) -> Outcome {
    let mut env = compile_env(file, params, true, ui)?;
    let session = store_session(file, shared)?;
    super::prepare(&session, &mut env.spec, file, shared, false)?;
    let report = session.plan(&env.spec, &env.files, false)?;
    let mut objects = Vec::new();
    let mut waiting = Vec::new();
    // Objects written with placeholders: file name, the values they wait for.
    let mut previewed: Vec<(String, Vec<String>)> = Vec::new();
    for n in &report.plan.nodes {
        let node = &env.spec.nodes[n.index];
        if node.kind != NodeKind::Manifest {
            continue;
        }
        match &n.assessment.resolved {
            Ok(r) => objects.extend(rendered_manifest(&r.payload)),
            Err(Resolution::Pending(j)) => match report.plan.previews.get(&n.index) {
                Some(r) if preview => {
                    if let Some((name, yaml)) = rendered_manifest(&r.payload) {
                        previewed.push((name.clone(), placeholders_in(&yaml)));
                        objects.push((name, yaml));
                    }
                }
                _ => waiting.push(format!(
                    "`{}` uses an output of `{}`, known once it is built (`envc build {}`)",
                    node.key,
                    env.spec.nodes[*j].key,
                    file.display()
                )),
            },
            Err(Resolution::Failed(m)) => waiting.push(m.clone()),
            Err(Resolution::Unread(_)) => {}
        }
    }
    if !waiting.is_empty() {
        let hint = match preview {
            true => String::new(),
            false => "\n  hint: `--preview` writes every object now, each value not known yet as `<known after build: NODE.OUTPUT>` (exit 7)".to_string(),
        };
        return Err(Failure::Input(format!(
            "cannot render every object:\n  {}\n  nothing was written{hint}",
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
    if previewed.is_empty() {
        return Ok(Exit::Ok);
    }
    crate::output::errln!(
        "render: preview: {} of them hold values known only after a build, written as `{PLACEHOLDER}NODE.OUTPUT>`; do not apply or commit them (a `gitops` delivery refuses them):",
        previewed.len()
    );
    for (name, values) in &previewed {
        crate::output::errln!("  {name}: {}", values.join(", "));
    }
    Ok(Exit::Preview)
}
