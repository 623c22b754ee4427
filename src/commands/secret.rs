//! `envc secret set|rm|list|keygen`: the project's age-encrypted secrets file. Values come
//! in on stdin and are never printed.

use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use envc_executor::secrets::{self, SecretSettings};
use envc_executor::{edit_secrets, EditError};

use super::{compile_env, Params, SharedArgs, Ui};
use crate::exit::{Exit, Failure, Outcome};
use crate::output::{errln, outln};

fn settings(file: &Path, shared: &SharedArgs) -> Result<SecretSettings, Failure> {
    Ok(shared.load(file)?.secrets)
}

fn valid_name(name: &str) -> Result<(), Failure> {
    match envc_compiler::value::is_secret_name(name) {
        true => Ok(()),
        false => Err(Failure::Input(format!(
            "`{name}` is not a secret name\n  hint: letters, digits and `_-.`, starting with a letter, at most 64 characters"
        ))),
    }
}

/// `envc secret set FILE NAME` (the value on stdin).
pub fn set(file: &Path, name: &str, shared: &SharedArgs) -> Outcome {
    valid_name(name)?;
    let s = settings(file, shared)?;
    let mut value = String::new();
    std::io::stdin()
        .take(1 << 16)
        .read_to_string(&mut value)
        .map_err(|e| {
            Failure::Input(format!(
                "cannot read the value from stdin: {e} (a secret is UTF-8 text)"
            ))
        })?;
    if value.ends_with('\n') {
        value.pop();
    }
    if let Some(why) = secrets::unusable(&value) {
        return Err(Failure::Input(format!(
            "the value on stdin {why}\n  hint: pipe the value in: `printf %s \"$VALUE\" | envc secret set FILE NAME`"
        )));
    }
    let mut all = secrets::read_file(&s).map_err(|e| Failure::Input(e.to_string()))?;
    let existed = all.insert(name.to_string(), value).is_some();
    secrets::write_file(&s, &all).map_err(|e| Failure::Input(e.to_string()))?;
    errln!(
        "{} `{name}` in {} (encrypted to {} recipient{})",
        if existed { "changed" } else { "added" },
        s.file.display(),
        s.recipients.len(),
        if s.recipients.len() == 1 { "" } else { "s" }
    );
    Ok(Exit::Ok)
}

/// `envc secret edit FILE`.
pub fn edit(file: &Path, shared: &SharedArgs) -> Outcome {
    let s = settings(file, shared)?;
    let all = secrets::read_file(&s).map_err(|e| Failure::Input(e.to_string()))?;
    let text = match edit_secrets(&secrets::to_text(&all)) {
        Ok(text) => text,
        Err(e @ EditError::Stopped { .. }) => {
            errln!("error: {e}");
            return Ok(Exit::Interrupted);
        }
        Err(e) => return Err(Failure::Input(e.to_string())),
    };
    let edited = secrets::from_text(&text).ok_or_else(|| {
        Failure::Input(
            "the edited file does not hold NAME = \"VALUE\" lines; the secrets file was not changed".into(),
        )
    })?;
    for (name, value) in &edited {
        valid_name(name)?;
        if let Some(why) = secrets::unusable(value) {
            return Err(Failure::Input(format!(
                "`{name}` {why}; the secrets file was not changed"
            )));
        }
    }
    if edited == all {
        errln!("no change");
        return Ok(Exit::Ok);
    }
    secrets::write_file(&s, &edited).map_err(|e| Failure::Input(e.to_string()))?;
    errln!("wrote {} ({} secrets)", s.file.display(), edited.len());
    Ok(Exit::Ok)
}

/// `envc secret rm FILE NAME`.
pub fn rm(file: &Path, name: &str, shared: &SharedArgs) -> Outcome {
    let s = settings(file, shared)?;
    let mut all = secrets::read_file(&s).map_err(|e| Failure::Input(e.to_string()))?;
    if all.remove(name).is_none() {
        return Err(Failure::Input(format!(
            "there is no secret `{name}` in {}",
            s.file.display()
        )));
    }
    secrets::write_file(&s, &all).map_err(|e| Failure::Input(e.to_string()))?;
    errln!("removed `{name}` from {}", s.file.display());
    Ok(Exit::Ok)
}

/// `envc secret list FILE`: every name, where it comes from, and whether FILE uses it.
pub fn list(file: &Path, params: &Params, shared: &SharedArgs, ui: Ui) -> Outcome {
    let s = settings(file, shared)?;
    let env = compile_env(file, params, true, ui)?;
    let used = env.spec.secret_names();
    let in_file = secrets::read_file(&s).map_err(|e| Failure::Input(e.to_string()))?;
    let mut names: Vec<&String> = in_file
        .keys()
        .chain(s.sources.keys())
        .chain(used.iter())
        .collect();
    names.sort();
    names.dedup();
    for name in names {
        let from = match s.sources.get(name) {
            Some(secrets::Source::Env(v)) => format!("env {v}"),
            Some(secrets::Source::Command(argv)) => format!("command {}", argv.join(" ")),
            None if in_file.contains_key(name) => "file".into(),
            None => "MISSING".into(),
        };
        let use_ = if used.contains(name) {
            "used"
        } else {
            "unused"
        };
        outln!("{name:<32} {from:<24} {use_}");
    }
    Ok(Exit::Ok)
}

/// `envc secret keygen OUT`.
pub fn keygen(out: &Path) -> Outcome {
    let (identity, recipient) = secrets::keygen();
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(out)
        .map_err(|e| {
            Failure::Input(format!(
                "cannot create {}: {e} (it is never overwritten)",
                out.display()
            ))
        })?;
    f.write_all(identity.as_bytes())
        .map_err(|e| Failure::Input(format!("cannot write {}: {e}", out.display())))?;
    outln!("{recipient}");
    errln!(
        "wrote the identity to {} (keep it secret: ENVC_AGE_IDENTITY={} lets envc read the secrets); add \"{recipient}\" to [secrets] recipients in envc.toml",
        out.display(),
        out.display()
    );
    Ok(Exit::Ok)
}
