//! `envc fmt [--check] FILE…`: canonical formatting, in place.

use std::io::Write;
use std::path::{Path, PathBuf};

use super::Ui;
use crate::exit::{Exit, Outcome};

pub fn fmt(files: &[PathBuf], check: bool, ui: Ui) -> Outcome {
    let mut failed = false;
    for f in files {
        let limit = envc_compiler::program::MAX_SOURCE_BYTES as u64;
        let text = match envc_lockfiles::file::read_bounded(f, limit) {
            Ok(b) => match String::from_utf8(b) {
                Ok(t) => t,
                Err(_) => {
                    crate::output::errln!("error: {} is not UTF-8 text", f.display());
                    failed = true;
                    continue;
                }
            },
            Err(e) => {
                crate::output::errln!("error: cannot read {}: {e}", f.display());
                failed = true;
                continue;
            }
        };
        match envc_lang::format::format(&text) {
            Ok(formatted) if formatted == text => {}
            Ok(formatted) => {
                if check {
                    crate::output::errln!(
                        "{}: not formatted (run `envc fmt {}`)",
                        f.display(),
                        f.display()
                    );
                    failed = true;
                } else if let Err(e) = write_atomically(f, formatted.as_bytes()) {
                    crate::output::errln!("error: cannot write {}: {e}", f.display());
                    failed = true;
                } else {
                    crate::output::errln!("formatted {}", f.display());
                }
            }
            Err(diagnostics) => {
                let mut sources = envc_compiler::SourceMap::default();
                sources.add(f.display().to_string(), text.as_str().into());
                crate::output::eprint_rendered(&ui.renderer(&sources, "").render_all(&diagnostics));
                crate::output::errln!("error: {} has syntax errors; not formatted", f.display());
                failed = true;
            }
        }
    }
    Ok(if failed { Exit::Input } else { Exit::Ok })
}

/// Writes beside the file and renames over it, so a crash never leaves half a file.
fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
    tmp.write_all(bytes)?;
    tmp.as_file().sync_all()?;
    if let Ok(meta) = std::fs::metadata(path) {
        let _ = std::fs::set_permissions(tmp.path(), meta.permissions());
    }
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}
