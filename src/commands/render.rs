//! `envc render FILE --out DIR`: every Kubernetes object of the environment as canonical
//! YAML, one file per object (`NAMESPACE/KIND-NAME.yaml`, `_cluster/…` for cluster-wide
//! ones), and a `kustomization.yaml` listing them, for `kubectl apply -k DIR` or a GitOps
//! repository. Deferred values (a VM's address) come from the environment's records, as a
//! build would substitute them. Files a previous render listed that are no longer objects
//! of the environment are removed; nothing else in DIR is touched.

use std::collections::BTreeSet;
use std::path::Path;

use envc_executor::substitute::{Payload, Resolution};

use super::{compile_env, store_session, Params, SharedArgs, Ui};
use crate::exit::{Exit, Failure, Outcome};
use crate::output;

/// The first line of the `kustomization.yaml` envc writes: a directory whose
/// kustomization lacks it was not rendered by envc, and nothing in it is removed.
const MARK: &str =
    "# Written by `envc render`: objects listed here that leave the environment are removed.";

pub fn render(file: &Path, out: &Path, params: &Params, shared: &SharedArgs, ui: Ui) -> Outcome {
    let mut env = compile_env(file, params, true, ui)?;
    let session = store_session(file, shared)?;
    session.unseal(&mut env.spec, false)?;
    let report = session.plan(&env.spec, &env.files, false)?;
    let mut objects = Vec::new();
    let mut waiting = Vec::new();
    for n in &report.plan.nodes {
        let node = &env.spec.nodes[n.index];
        match &n.assessment.resolved {
            Ok(r) => {
                if let Payload::Manifest(m) = &r.payload {
                    objects.push((m.file_name(), m.yaml()));
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
    let kustomization = out.join("kustomization.yaml");
    let previous = previous_resources(&kustomization)?;
    std::fs::create_dir_all(out).map_err(|e| io(out, &e))?;
    let mut written = 0;
    for (name, yaml) in &objects {
        let path = out.join(name);
        if std::fs::read(&path).ok().as_deref() == Some(yaml.as_bytes()) {
            continue;
        }
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| io(dir, &e))?;
        }
        write_atomic(&path, yaml.as_bytes())?;
        output::line(format!("wrote {}", path.display()));
        written += 1;
    }
    let names: BTreeSet<&str> = objects.iter().map(|(n, _)| n.as_str()).collect();
    let mut removed = 0;
    for old in previous.iter().filter(|p| !names.contains(p.as_str())) {
        let path = out.join(old);
        match std::fs::remove_file(&path) {
            Ok(()) => {
                output::line(format!("removed {}", path.display()));
                removed += 1;
                // Its namespace's directory, once empty.
                if let Some(dir) = path.parent().filter(|d| *d != out) {
                    let _ = std::fs::remove_dir(dir);
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io(&path, &e)),
        }
    }
    let mut k =
        format!("{MARK}\napiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n");
    if names.is_empty() {
        k.push_str("resources: []\n");
    } else {
        k.push_str("resources:\n");
        for n in &names {
            k.push_str(&format!("- {n}\n"));
        }
    }
    if std::fs::read(&kustomization).ok().as_deref() != Some(k.as_bytes()) {
        write_atomic(&kustomization, k.as_bytes())?;
    }
    crate::output::errln!(
        "render: {} objects in {}: {written} written, {removed} removed",
        objects.len(),
        out.display()
    );
    Ok(Exit::Ok)
}

/// The resources the `kustomization.yaml` of an earlier render lists; none when there is
/// none, and an error when there is one envc did not write (its files are someone else's).
fn previous_resources(path: &Path) -> Result<Vec<String>, Failure> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io(path, &e)),
    };
    if !text.starts_with(MARK) {
        return Err(Failure::Input(format!(
            "{} was not written by `envc render`: render into an empty directory, or one envc rendered before",
            path.display()
        )));
    }
    Ok(text
        .lines()
        .filter_map(|l| l.strip_prefix("- "))
        // Only what envc writes: NAMESPACE/KIND-NAME.yaml, never a path out of DIR.
        .filter(|p| {
            p.ends_with(".yaml") && !p.split('/').any(|s| s.is_empty() || s == "." || s == "..")
        })
        .map(str::to_string)
        .collect())
}

fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), Failure> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut tmp = tempfile::NamedTempFile::new_in(dir).map_err(|e| io(dir, &e))?;
    std::io::Write::write_all(&mut tmp, bytes).map_err(|e| io(path, &e))?;
    tmp.persist(path).map_err(|e| io(path, &e.error))?;
    Ok(())
}

fn io(path: &Path, e: &std::io::Error) -> Failure {
    Failure::Input(format!("{}: {e}", path.display()))
}
