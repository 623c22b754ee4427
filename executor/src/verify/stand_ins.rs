//! `--lab-hosts FILE`: the clean machines that stand in for an environment's hosts in the
//! lab. TOML, one entry per host of the environment:
//!
//! ```toml
//! web1 = "10.77.0.12"                 # the address; port and user stay the host's own
//! [db1]
//! address = "10.77.0.13"
//! port = 2222
//! user = "admin"
//! ```
//!
//! A host the file does not name is stood in for by a fresh VM from its declared `base`
//! image; one with neither is refused (a lab that deploys to production's own host is no
//! lab). Every entry must name a host (a typo would leave the real one without a stand-in).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use envc_compiler::StandIn;

use crate::spec::{NodeSpec, Spec};

/// The most a lab-hosts file may hold.
const MAX_BYTES: u64 = 1 << 20;

/// Why the lab's stand-ins cannot be known; each names the file and line, or the host, and
/// the fix.
#[derive(Debug)]
pub enum StandInsError {
    Read {
        path: PathBuf,
        error: envc_lockfiles::file::ReadError,
    },
    NotUtf8(PathBuf),
    /// The file at `line` is not a lab-hosts file: `why`.
    Invalid {
        path: PathBuf,
        line: usize,
        why: String,
    },
    /// The file names a host the environment does not have; `hint` is the likely one or
    /// the list of its hosts.
    NotAHost {
        name: String,
        hint: String,
    },
    /// Hosts with neither a named machine nor a base image to boot a VM from.
    NoStandIn(Vec<String>),
}

impl std::fmt::Display for StandInsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StandInsError::Read { path, error } => {
                write!(f, "cannot read the lab hosts {}: {error}", path.display())
            }
            StandInsError::NotUtf8(path) => {
                write!(f, "{}: the lab hosts file is not UTF-8", path.display())
            }
            StandInsError::Invalid { path, line, why } => {
                write!(f, "{}:{line}: {why}", path.display())
            }
            StandInsError::NotAHost { name, hint } => write!(
                f,
                "the lab hosts name `{name}`, which is not a host of the environment\n  hint: {hint}"
            ),
            StandInsError::NoStandIn(missing) => write!(
                f,
                "the lab needs a clean machine standing in for each host; none is named for {}, and {} no base image to boot one from\n  hint: add `{} = \"ADDRESS\"` to the file given with --lab-hosts, or declare the host's base (`base = debian.default_image`) and the lab boots a fresh VM from it",
                missing.iter().map(|h| format!("`{h}`")).collect::<Vec<_>>().join(", "),
                if missing.len() == 1 { "it declares" } else { "they declare" },
                missing.first().map_or("", String::as_str)
            ),
        }
    }
}

impl std::error::Error for StandInsError {}

/// Reads and checks FILE; an error names the file, the line and the fix.
pub fn read(path: &Path) -> Result<BTreeMap<String, StandIn>, StandInsError> {
    let bytes = envc_lockfiles::file::read_bounded(path, MAX_BYTES).map_err(|error| {
        StandInsError::Read {
            path: path.to_path_buf(),
            error,
        }
    })?;
    let text = String::from_utf8(bytes).map_err(|_| StandInsError::NotUtf8(path.to_path_buf()))?;
    parse(&text).map_err(|(offset, why)| StandInsError::Invalid {
        path: path.to_path_buf(),
        line: text[..offset.min(text.len())].matches('\n').count() + 1,
        why,
    })
}

/// Parses the file's text; an error is (byte offset, message).
pub fn parse(text: &str) -> Result<BTreeMap<String, StandIn>, (usize, String)> {
    let doc: toml::Table = text.parse().map_err(|e: toml::de::Error| {
        let at = e.span().map_or(0, |s| s.start);
        (at, format!("not valid TOML: {}", e.message()))
    })?;
    let at = |key: &str| text.find(key).unwrap_or(0);
    let mut out = BTreeMap::new();
    for (host, value) in doc {
        let stand_in = match value {
            toml::Value::String(address) => StandIn::Machine {
                address,
                port: None,
                user: None,
            },
            toml::Value::Table(t) => {
                for k in t.keys() {
                    if !["address", "port", "user"].contains(&k.as_str()) {
                        return Err((at(k), format!("`{host}`: unknown key `{k}`; a stand-in has `address`, `port` and `user`")));
                    }
                }
                let Some(toml::Value::String(address)) = t.get("address") else {
                    return Err((at(&host), format!("`{host}` needs `address = \"…\"`")));
                };
                let port = match t.get("port") {
                    None => None,
                    Some(toml::Value::Integer(p)) => Some(u16::try_from(*p).ok().filter(|p| *p > 0).ok_or_else(|| {
                        (at("port"), format!("`{host}`: port {p} is not between 1 and 65535"))
                    })?),
                    Some(_) => return Err((at("port"), format!("`{host}`: port must be a number"))),
                };
                let user = match t.get("user") {
                    None => None,
                    Some(toml::Value::String(u)) => Some(u.clone()),
                    Some(_) => return Err((at("user"), format!("`{host}`: user must be a string"))),
                };
                StandIn::Machine {
                    address: address.clone(),
                    port,
                    user,
                }
            }
            _ => {
                return Err((
                    at(&host),
                    format!("`{host}` must be an address (`{host} = \"10.0.0.5\"`) or a table with `address`"),
                ))
            }
        };
        if matches!(&stand_in, StandIn::Machine { address, .. } if address.trim().is_empty()) {
            return Err((at(&host), format!("`{host}`: the address is empty")));
        }
        out.insert(host, stand_in);
    }
    Ok(out)
}

/// A stand-in for every host of the environment: the machine `named` gives it, else a
/// fresh VM from its declared `base`. Every name in `named` must be a host.
pub fn complete(
    spec: &Spec,
    mut named: BTreeMap<String, StandIn>,
) -> Result<BTreeMap<String, StandIn>, StandInsError> {
    let hosts: Vec<&NodeSpec> = spec
        .nodes
        .iter()
        .filter(|n| n.kind.is_target() && !crate::kinds::of(n.kind).boots())
        .collect();
    for name in named.keys() {
        if !hosts.iter().any(|h| h.name == *name) {
            let hint = envc_lang::did_you_mean(name, hosts.iter().map(|h| h.name.as_str()))
                .unwrap_or_else(|| {
                    let names: Vec<&str> = hosts.iter().map(|h| h.name.as_str()).collect();
                    format!("its hosts are: {}", names.join(", "))
                });
            return Err(StandInsError::NotAHost {
                name: name.clone(),
                hint,
            });
        }
    }
    let mut missing = Vec::new();
    for h in hosts {
        if named.contains_key(&h.name) {
            continue;
        }
        match h.base {
            Some(_) => {
                named.insert(h.name.clone(), StandIn::Vm);
            }
            None => missing.push(h.name.as_str()),
        }
    }
    match missing.as_slice() {
        [] => Ok(named),
        _ => Err(StandInsError::NoStandIn(
            missing.into_iter().map(str::to_string).collect(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each input, parsed: the stand-ins as `name=address:port:user`, or the error with
    /// its line.
    fn check(input: &str, expected: &str) {
        let got = match parse(input) {
            Ok(m) => m
                .iter()
                .map(|(k, s)| match s {
                    StandIn::Machine {
                        address,
                        port,
                        user,
                    } => format!(
                        "{k}={address}:{}:{}",
                        port.map_or("-".into(), |p| p.to_string()),
                        user.as_deref().unwrap_or("-")
                    ),
                    StandIn::Vm => format!("{k}=vm"),
                })
                .collect::<Vec<_>>()
                .join(" "),
            Err((at, why)) => {
                format!("line {}: {why}", input[..at].matches('\n').count() + 1)
            }
        };
        assert_eq!(got, expected, "{input}");
    }

    #[test]
    fn lab_hosts_files() {
        check("web = \"10.0.0.5\"\n", "web=10.0.0.5:-:-");
        check(
            "web = \"10.0.0.5\"\n[db]\naddress = \"10.0.0.6\"\nport = 2222\nuser = \"admin\"\n",
            "db=10.0.0.6:2222:admin web=10.0.0.5:-:-",
        );
        check("", "");
        check("[db]\nport = 22\n", "line 1: `db` needs `address = \"…\"`");
        check(
            "[db]\naddress = \"a\"\nport = 70000\n",
            "line 3: `db`: port 70000 is not between 1 and 65535",
        );
        check(
            "[db]\naddress = \"a\"\nhost = \"b\"\n",
            "line 3: `db`: unknown key `host`; a stand-in has `address`, `port` and `user`",
        );
        check(
            "web = 5\n",
            "line 1: `web` must be an address (`web = \"10.0.0.5\"`) or a table with `address`",
        );
        check("web = \"\"\n", "line 1: `web`: the address is empty");
        assert!(parse("web = \n")
            .unwrap_err()
            .1
            .starts_with("not valid TOML"));
    }
}
