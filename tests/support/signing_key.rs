//! A signing key made for a test, in a scratch GnuPG home: what a vendor's archive is
//! signed with in the tests of vendor archives (tests/lock.rs, tests/build.rs), and a
//! provider registry's SHA256SUMS in lockfiles/tests/provider_registry.rs.

#![allow(dead_code)]

use std::path::Path;
use std::process::Command;

/// A scratch GnuPG home with one signing key made for the test: its fingerprint, its public
/// key (armoured), and a way to clear-sign a Release with it.
pub struct TestKey {
    home: tempfile::TempDir,
    pub fingerprint: String,
}

impl TestKey {
    pub fn new(uid: &str) -> TestKey {
        let mut key = TestKey {
            home: tempfile::tempdir().unwrap(),
            fingerprint: String::new(),
        };
        key.gpg(&[
            "--passphrase",
            "",
            "--quick-gen-key",
            uid,
            "ed25519",
            "sign",
            "never",
        ]);
        let listing = String::from_utf8(key.gpg(&["--with-colons", "--list-keys"])).unwrap();
        key.fingerprint = listing
            .lines()
            .find_map(|l| l.strip_prefix("fpr:::::::::"))
            .and_then(|rest| rest.split(':').next())
            .unwrap()
            .to_string();
        key
    }

    fn gpg(&self, args: &[&str]) -> Vec<u8> {
        let o = Command::new("gpg")
            .arg("--homedir")
            .arg(self.home.path())
            .args(["--batch", "--quiet", "--pinentry-mode", "loopback"])
            .args(args)
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "gpg {args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        o.stdout
    }

    pub fn public(&self) -> Vec<u8> {
        self.gpg(&["--armor", "--export", &self.fingerprint])
    }

    /// The public key as a binary keyring, what gpgv takes (`ENVC_ARCHIVE_KEYRING`).
    pub fn keyring(&self) -> Vec<u8> {
        self.gpg(&["--export", &self.fingerprint])
    }

    /// Writes `DISTS/InRelease`: `DISTS/Release`, clear-signed with this key.
    pub fn sign(&self, dists: &Path) {
        let out = dists.join("InRelease");
        let _ = std::fs::remove_file(&out);
        self.gpg(&[
            "--local-user",
            &self.fingerprint,
            "--clearsign",
            "--output",
            out.to_str().unwrap(),
            dists.join("Release").to_str().unwrap(),
        ]);
    }
}

impl TestKey {
    /// Writes `FILE.sig`: a binary detached signature of `FILE` with this key, as a
    /// provider's publisher signs its SHA256SUMS (lockfiles/tests/provider_registry.rs).
    pub fn detach_sign(&self, file: &Path) {
        let out = format!("{}.sig", file.display());
        let _ = std::fs::remove_file(&out);
        self.gpg(&[
            "--local-user",
            &self.fingerprint,
            "--detach-sign",
            "--output",
            &out,
            file.to_str().unwrap(),
        ]);
    }
}

/// The agent that made and used the key stops with the test.
impl Drop for TestKey {
    fn drop(&mut self) {
        let _ = Command::new("gpgconf")
            .arg("--homedir")
            .arg(self.home.path())
            .args(["--kill", "gpg-agent"])
            .output();
    }
}
