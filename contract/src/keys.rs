//! Signing keys of the binary cache: ed25519, written as Nix writes its binary-cache keys —
//! `NAME:BASE64` — so a key says whose it is wherever it appears (in `envc.toml`'s
//! `trusted-public-keys`, in a cache entry, in an error).
//!
//! The secret file holds the 32-byte seed; the public key is derived from it. Only entries
//! signed by a key listed as trusted are ever used.

use std::fmt;
use std::path::{Path, PathBuf};

use base64::Engine;
use ed25519_dalek::{Signature, Signer, SigningKey, VerifyingKey};

const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyError {
    pub what: String,
    pub hint: String,
}

impl fmt::Display for KeyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}\n  hint: {}", self.what, self.hint)
    }
}

impl std::error::Error for KeyError {}

fn key_error(what: impl Into<String>, hint: impl Into<String>) -> KeyError {
    KeyError {
        what: what.into(),
        hint: hint.into(),
    }
}

/// A name keys may have: it goes into file names and before the `:` of the text form.
fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
        && !name.starts_with('.')
}

/// `NAME:BASE64` → (name, the 32 bytes).
fn split(text: &str, what: &str) -> Result<(String, [u8; 32]), KeyError> {
    let text = text.trim();
    let form = format!("a {what} is written NAME:BASE64 (as `envc key generate` prints it)");
    let (name, b64) = text
        .split_once(':')
        .ok_or_else(|| key_error(format!("`{}` is not a {what}", clip(text)), &form))?;
    if !valid_name(name) {
        return Err(key_error(
            format!("`{}` is not a key name", clip(name)),
            "key names are letters, digits, `.`, `_` and `-`",
        ));
    }
    let bytes = B64
        .decode(b64)
        .map_err(|e| key_error(format!("the {what} `{name}` is not base64: {e}"), &form))?;
    let bytes: [u8; 32] = bytes.try_into().map_err(|b: Vec<u8>| {
        key_error(
            format!("the {what} `{name}` has {} bytes, not 32", b.len()),
            &form,
        )
    })?;
    Ok((name.to_string(), bytes))
}

/// Secret text never goes into a message whole.
fn clip(s: &str) -> String {
    s.chars().take(24).collect()
}

/// A public key that may verify cache entries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PublicKey {
    pub name: String,
    key: VerifyingKey,
}

impl PublicKey {
    pub fn parse(text: &str) -> Result<PublicKey, KeyError> {
        let (name, bytes) = split(text, "public key")?;
        let key = VerifyingKey::from_bytes(&bytes).map_err(|e| {
            key_error(
                format!("the public key `{name}` is not an ed25519 key: {e}"),
                "copy it again from `envc key generate`'s output or the .public file",
            )
        })?;
        Ok(PublicKey { name, key })
    }

    /// Whether `signature` (base64) is this key's signature of `message`.
    pub fn verifies(&self, message: &[u8], signature: &str) -> bool {
        let Ok(bytes) = B64.decode(signature) else {
            return false;
        };
        let Ok(bytes) = <[u8; 64]>::try_from(bytes.as_slice()) else {
            return false;
        };
        self.key
            .verify_strict(message, &Signature::from_bytes(&bytes))
            .is_ok()
    }
}

impl fmt::Display for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.name, B64.encode(self.key.to_bytes()))
    }
}

/// The key that signs what this machine pushes.
pub struct SecretKey {
    pub name: String,
    key: SigningKey,
}

impl fmt::Debug for SecretKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SecretKey({})", self.name)
    }
}

impl SecretKey {
    /// A new key from the operating system's randomness.
    pub fn generate(name: &str) -> Result<SecretKey, KeyError> {
        if !valid_name(name) {
            return Err(key_error(
                format!("`{}` is not a key name", clip(name)),
                "key names are letters, digits, `.`, `_` and `-`, e.g. `ci-2026`",
            ));
        }
        let mut seed = [0u8; 32];
        getrandom::fill(&mut seed).map_err(|e| {
            key_error(
                format!("no randomness from the operating system: {e}"),
                "this machine's getrandom(2) failed; retry",
            )
        })?;
        Ok(SecretKey {
            name: name.to_string(),
            key: SigningKey::from_bytes(&seed),
        })
    }

    pub fn parse(text: &str) -> Result<SecretKey, KeyError> {
        let (name, seed) = split(text, "secret key")?;
        Ok(SecretKey {
            name,
            key: SigningKey::from_bytes(&seed),
        })
    }

    /// Reads a secret key file (`ENVC_SIGNING_KEY`, `--signing-key`, `signing-key`).
    pub fn read(path: &Path) -> Result<SecretKey, KeyError> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            key_error(
                format!("cannot read the signing key {}: {e}", path.display()),
                "make one with `envc key generate NAME` and point ENVC_SIGNING_KEY at NAME.secret",
            )
        })?;
        SecretKey::parse(&text).map_err(|e| KeyError {
            what: format!("{}: {}", path.display(), e.what),
            hint: e.hint,
        })
    }

    pub fn public(&self) -> PublicKey {
        PublicKey {
            name: self.name.clone(),
            key: self.key.verifying_key(),
        }
    }

    /// The signature of `message`, base64.
    pub fn sign(&self, message: &[u8]) -> String {
        B64.encode(self.key.sign(message).to_bytes())
    }

    /// The text of the secret file.
    pub fn to_secret_text(&self) -> String {
        format!("{}:{}\n", self.name, B64.encode(self.key.to_bytes()))
    }

    /// Writes `NAME.secret` (mode 0600, never over an existing file) and `NAME.public` in
    /// `dir`; returns their paths.
    pub fn write(&self, dir: &Path) -> Result<(PathBuf, PathBuf), KeyError> {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let secret = dir.join(format!("{}.secret", self.name));
        let public = dir.join(format!("{}.public", self.name));
        let io = |path: &Path, e: std::io::Error| {
            let hint = if e.kind() == std::io::ErrorKind::AlreadyExists {
                "a key of that name exists: pick another name, or move the old key away first"
            } else {
                "check that the folder exists and is writable"
            };
            key_error(format!("cannot write {}: {e}", path.display()), hint)
        };
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&secret)
            .map_err(|e| io(&secret, e))?;
        f.write_all(self.to_secret_text().as_bytes())
            .and_then(|()| f.sync_all())
            .map_err(|e| io(&secret, e))?;
        std::fs::write(&public, format!("{}\n", self.public())).map_err(|e| io(&public, e))?;
        Ok((secret, public))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signature_verifies_with_its_public_key_only() {
        let a = SecretKey::generate("laptop").unwrap();
        let b = SecretKey::generate("other").unwrap();
        let sig = a.sign(b"entry");
        assert!(a.public().verifies(b"entry", &sig));
        assert!(!a.public().verifies(b"entrY", &sig));
        assert!(!b.public().verifies(b"entry", &sig));
        assert!(!a.public().verifies(b"entry", "not base64!"));
    }

    #[test]
    fn keys_round_trip_through_their_text() {
        let k = SecretKey::generate("ci-2026").unwrap();
        let again = SecretKey::parse(&k.to_secret_text()).unwrap();
        assert_eq!(again.public(), k.public());
        let public = k.public().to_string();
        assert!(public.starts_with("ci-2026:"), "{public}");
        assert_eq!(PublicKey::parse(&public).unwrap(), k.public());
    }

    #[test]
    fn malformed_keys_say_the_form() {
        let check = |text: &str, expected: &str| {
            let e = PublicKey::parse(text).unwrap_err();
            assert!(e.to_string().contains(expected), "{text}: {e}");
        };
        check("nocolon", "NAME:BASE64");
        check("bad name:AAAA", "not a key name");
        check("k:!!!", "not base64");
        check("k:AAAA", "has 3 bytes, not 32");
        assert!(SecretKey::generate("../x").is_err());
    }

    #[test]
    fn the_secret_file_is_private_and_never_overwritten() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let k = SecretKey::generate("k1").unwrap();
        let (secret, public) = k.write(dir.path()).unwrap();
        let mode = std::fs::metadata(&secret).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(SecretKey::read(&secret).unwrap().public(), k.public());
        let text = std::fs::read_to_string(public).unwrap();
        assert_eq!(PublicKey::parse(&text).unwrap(), k.public());
        let e = SecretKey::generate("k1")
            .unwrap()
            .write(dir.path())
            .unwrap_err();
        assert!(e.hint.contains("a key of that name exists"), "{e}");
    }
}
