//! What an EC2 machine is given to boot with: its SSH host key, made here and handed over in
//! its user data, so that envc knows the key before the first connection (no trust on first
//! use), and root's login through the environment's key pair.
//!
//! Why user data and not the console: cloud-init prints the host keys on the console, but
//! EC2 makes console output available only minutes after boot (and moto serves none), and
//! what it shows is still read over the API, not proven by the machine. The cost of user
//! data: the private host key is readable by whoever may call `DescribeInstanceAttribute`
//! on the instance, and by any process on the instance through the metadata service. That
//! is the same trust as the account itself; an attacker with it can replace the instance
//! anyway. docs/architecture.md says so too.

use std::path::Path;

use crate::error::StepError;
use crate::transport::{fingerprint, HostKey};

/// A host key pair made for one machine.
pub struct HostKeyPair {
    /// OpenSSH private key text.
    pub private: String,
    /// `ssh-ed25519 AAAA…` (no comment).
    pub public: String,
}

impl HostKeyPair {
    /// A new ed25519 pair, made with `ssh-keygen` in a private scratch directory that is
    /// removed at once (the private half lives on only in the user data).
    pub async fn generate(name: &str) -> Result<HostKeyPair, StepError> {
        let dir = tempfile::Builder::new()
            .prefix("envc-hostkey-")
            .tempdir()
            .map_err(|e| StepError::new(format!("cannot create a scratch directory: {e}")))?;
        let key = dir.path().join("key");
        crate::vm::login::ssh_keygen(&key, &format!("envc-host-{name}")).await?;
        let read = |p: &Path| {
            std::fs::read_to_string(p)
                .map_err(|e| StepError::new(format!("cannot read {}: {e}", p.display())))
        };
        let private = read(&key)?;
        let public = public_only(&read(&key.with_extension("pub"))?);
        Ok(HostKeyPair { private, public })
    }

    pub fn host_key(&self) -> Option<HostKey> {
        Some(HostKey {
            key: self.public.clone(),
            fingerprint: fingerprint(&self.public)?,
        })
    }
}

/// `TYPE BASE64` of a public key line, without its comment.
fn public_only(line: &str) -> String {
    line.split_whitespace()
        .take(2)
        .collect::<Vec<_>>()
        .join(" ")
}

/// The user data: a `#cloud-config` that installs the host key (and deletes the image's
/// own), and lets root in with the key pair's key (Debian's images let only `admin` in by
/// default; envc configures as root, as on every other target).
pub fn user_data(host: &HostKeyPair) -> String {
    let mut private = String::new();
    for line in host.private.lines() {
        private.push_str("    ");
        private.push_str(line);
        private.push('\n');
    }
    format!(
        "#cloud-config\n\
         # Written by envc: the host key envc pins before it first connects.\n\
         disable_root: false\n\
         ssh_deletekeys: true\n\
         ssh_genkeytypes: []\n\
         ssh_keys:\n  \
           ed25519_private: |\n{private}  \
           ed25519_public: {}\n",
        host.public
    )
}

/// The host key a machine was given, read back from its user data (a machine whose
/// creation was interrupted before envc recorded it: the key is what it booted with).
pub fn host_key_of(user_data: &str) -> Option<HostKey> {
    let line = user_data
        .lines()
        .find_map(|l| l.trim().strip_prefix("ed25519_public:"))?;
    let public = public_only(line.trim());
    Some(HostKey {
        fingerprint: fingerprint(&public)?,
        key: public,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_user_data_gives_back_the_key_it_carries() {
        let pair = HostKeyPair::generate("web-0").await.unwrap();
        let data = user_data(&pair);
        assert!(data.starts_with("#cloud-config\n"));
        assert!(data.contains("-----BEGIN OPENSSH PRIVATE KEY-----"));
        let key = host_key_of(&data).unwrap();
        assert_eq!(key.key, pair.public);
        assert_eq!(Some(key), pair.host_key());
        // A machine of someone else's user data has no key of envc's.
        assert_eq!(host_key_of("#!/bin/sh\necho hi\n"), None);
    }
}
