//! The ssh_config a test gives envc (`ENVC_SSH_CONFIG`): the test's key for every host,
//! never a prompt, no banner noise in the output the test reads.

use std::path::{Path, PathBuf};

/// Writes `DIR/ssh_config`, logging in with `key`, and returns its path.
pub fn write(dir: &Path, key: &Path) -> PathBuf {
    let path = dir.join("ssh_config");
    let text = format!(
        "Host *\n  IdentityFile {}\n  IdentitiesOnly yes\n  BatchMode yes\n  LogLevel ERROR\n",
        key.display()
    );
    std::fs::write(&path, text).expect("the test's directory is writable");
    path
}
