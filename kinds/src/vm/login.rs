//! The key envc logs in to its machines with: one ed25519 pair of the store's
//! (`machines/id_ed25519`), made on first use, whichever provider asks first. QEMU gives its
//! public half to the guest at boot; EC2 imports it as the environment's key pair.

use std::path::{Path, PathBuf};

use tokio::sync::OnceCell;

use crate::error::StepError;

pub struct LoginKey {
    /// The private half; the public one is beside it (`.pub`).
    pub path: PathBuf,
    /// The public half, made once however many machines start at once.
    public: OnceCell<Result<String, StepError>>,
}

impl LoginKey {
    pub fn new(machines_dir: &Path) -> LoginKey {
        LoginKey {
            path: machines_dir.join("id_ed25519"),
            public: OnceCell::new(),
        }
    }

    /// The public half (`ssh-ed25519 AAAA… envc`), the pair made on first use.
    pub async fn public(&self) -> Result<String, StepError> {
        self.public.get_or_init(|| self.make()).await.clone()
    }

    async fn make(&self) -> Result<String, StepError> {
        let public = self.path.with_extension("pub");
        if !public.exists() {
            let parent = self.path.parent().unwrap_or(Path::new("."));
            std::fs::create_dir_all(parent)
                .map_err(|e| StepError::new(format!("cannot create {}: {e}", parent.display())))?;
            // Made under a name of this process's and moved into place, private half
            // last-but-one, public half last: another envc (another environment of this
            // store) never sees a pair whose halves do not match.
            let tmp = self
                .path
                .with_extension(format!("tmp{}", std::process::id()));
            let tmp_pub = PathBuf::from(format!("{}.pub", tmp.display()));
            let _ = std::fs::remove_file(&tmp);
            let _ = std::fs::remove_file(&tmp_pub);
            ssh_keygen(&tmp, "envc").await?;
            if !public.exists() {
                std::fs::rename(&tmp, &self.path)
                    .and_then(|()| std::fs::rename(&tmp_pub, &public))
                    .map_err(|e| {
                        StepError::new(format!(
                            "cannot store the login key {}: {e}",
                            self.path.display()
                        ))
                    })?;
            } else {
                let _ = std::fs::remove_file(&tmp);
                let _ = std::fs::remove_file(&tmp_pub);
            }
        }
        std::fs::read_to_string(&public)
            .map(|s| s.trim().to_string())
            .map_err(|e| StepError::new(format!("cannot read {}: {e}", public.display())))
    }
}

/// A new ed25519 key pair without a passphrase at `path` (and `path.pub`), by `ssh-keygen`.
pub async fn ssh_keygen(path: &Path, comment: &str) -> Result<(), StepError> {
    let out = tokio::process::Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-C", comment, "-f"])
        .arg(path)
        .output()
        .await
        .map_err(|e| {
            StepError::with_hint(
                format!("cannot run ssh-keygen: {e}"),
                "install openssh-client",
            )
        })?;
    if !out.status.success() {
        return Err(StepError::new(format!(
            "ssh-keygen failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(())
}
