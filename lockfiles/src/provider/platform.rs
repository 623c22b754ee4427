//! The platform a provider package is built for, as the registry protocol names it:
//! `linux_amd64`, `darwin_arm64` (Go's GOOS and GOARCH).

use std::fmt;

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Platform {
    pub os: String,
    pub arch: String,
}

impl Platform {
    pub fn new(os: &str, arch: &str) -> Platform {
        Platform {
            os: os.to_string(),
            arch: arch.to_string(),
        }
    }

    /// This machine, in Go's names (Rust's `macos` is `darwin`, `x86_64` is `amd64`, …).
    pub fn current() -> Platform {
        let os = match std::env::consts::OS {
            "macos" => "darwin",
            other => other,
        };
        let arch = match std::env::consts::ARCH {
            "x86_64" => "amd64",
            "aarch64" => "arm64",
            "x86" => "386",
            other => other,
        };
        Platform::new(os, arch)
    }

    /// Reads `OS_ARCH`; `None` when there is no `_` between two non-empty names.
    pub fn parse(text: &str) -> Option<Platform> {
        let (os, arch) = text.split_once('_')?;
        let name = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric());
        (name(os) && name(arch)).then(|| Platform::new(os, arch))
    }
}

impl fmt::Display for Platform {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}_{}", self.os, self.arch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_platforms_as_go_does() {
        assert_eq!(
            Platform::parse("linux_amd64"),
            Some(Platform::new("linux", "amd64"))
        );
        assert_eq!(Platform::parse("linux"), None);
        assert_eq!(Platform::parse("linux_"), None);
        assert_eq!(Platform::parse("a_b_c"), None);
        let here = Platform::current().to_string();
        assert!(
            !here.contains("x86_64") && !here.contains("macos"),
            "{here}"
        );
    }
}
