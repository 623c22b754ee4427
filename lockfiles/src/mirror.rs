//! The Debian mirror this machine's apt uses: what an unlocked image builds from and what a
//! new lockfile pins, unless `$ENVC_DEBIAN_MIRROR` names another.

use std::path::PathBuf;

/// No Debian mirror in apt's sources, and none in `$ENVC_DEBIAN_MIRROR`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NoMirror;

impl std::fmt::Display for NoMirror {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(
            "no Debian mirror found in /etc/apt/sources.list or /etc/apt/sources.list.d\n  \
             hint: set ENVC_DEBIAN_MIRROR=http://deb.debian.org/debian",
        )
    }
}

impl std::error::Error for NoMirror {}

/// The mirror apt on this machine is configured with (`$ENVC_DEBIAN_MIRROR` overrides): the
/// first `deb` or `URIs:` line that names an http(s) Debian archive.
pub fn local_mirror() -> Result<String, NoMirror> {
    if let Ok(m) = std::env::var("ENVC_DEBIAN_MIRROR") {
        if !m.is_empty() {
            return Ok(m.trim_end_matches('/').to_string());
        }
    }
    let mut files = vec![PathBuf::from("/etc/apt/sources.list")];
    if let Ok(dir) = std::fs::read_dir("/etc/apt/sources.list.d") {
        let mut more: Vec<PathBuf> = dir.filter_map(|e| Some(e.ok()?.path())).collect();
        more.sort();
        files.extend(more);
    }
    for f in files {
        let Ok(text) = std::fs::read_to_string(&f) else {
            continue;
        };
        if let Some(uri) = first_debian_uri(&text) {
            return Ok(uri);
        }
    }
    Err(NoMirror)
}

fn first_debian_uri(text: &str) -> Option<String> {
    text.lines()
        .map(str::trim)
        .filter(|l| l.starts_with("deb ") || l.starts_with("URIs:"))
        .flat_map(|l| l.split_whitespace())
        .find(|w| {
            (w.starts_with("http://") || w.starts_with("https://"))
                && w.trim_end_matches('/').ends_with("/debian")
        })
        .map(|w| w.trim_end_matches('/').to_string())
}

#[cfg(test)]
mod tests {
    use super::first_debian_uri;

    #[test]
    fn finds_the_debian_mirror_in_either_format() {
        let check = |text: &str, expected: Option<&str>| {
            assert_eq!(first_debian_uri(text).as_deref(), expected, "{text}");
        };
        check(
            "Types: deb\nURIs: http://deb.debian.org/debian\nSuites: bookworm\n",
            Some("http://deb.debian.org/debian"),
        );
        check(
            "# deb http://old/debian\ndeb [arch=amd64] https://mirror.example/debian/ bookworm main\n",
            Some("https://mirror.example/debian"),
        );
        check(
            "deb https://packages.cloud.google.com/apt cloud-sdk main\n",
            None,
        );
        check("URIs: http://deb.debian.org/debian-security\n", None);
    }
}
