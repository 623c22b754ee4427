//! What a package needs pinned: itself, in the Debian suite of what its target runs (the
//! image its VM boots or its host was provisioned from, a cloud image's suite, else its
//! host's), from a vendor's archive where it says so.

use std::collections::BTreeMap;

use envc_compiler::pin::PinKey;
use envc_lockfiles::needs::{VendorArchive, DEFAULT_SUITE};
use envc_lockfiles::REQUIRED;

use crate::image::lock as image;
use crate::node_type::LockNeeds;
use crate::spec::{NodeSpec, Val};

pub(super) fn lock_needs(n: &NodeSpec, cx: &mut LockNeeds<'_>) {
    let target = n.target.map(|t| &cx.spec.nodes[t]);
    let image = target.and_then(|t| match t.attr("image") {
        Some(Val::Node(img)) => Some(&cx.spec.nodes[*img]),
        _ => t.base.as_deref().and_then(|key| {
            (cx.spec.nodes.iter().chain(&cx.spec.lab_images)).find(|i| i.key == key)
        }),
    });
    // A cloud image's Debian suite is known, the packages it ships are not: its
    // packages are locked as for a host without a base, their closure pinned
    // whole from `required` up.
    let cloud_suite =
        target
            .and_then(crate::vm::lock::cloud_of)
            .and_then(|c| match c.get("image") {
                Some(Val::Record(i)) => match i.get("suite") {
                    Some(Val::Str(s)) if !s.is_empty() => Some(s.clone()),
                    _ => None,
                },
                _ => None,
            });
    // The suite its image was built from, else the one its host says it runs.
    let suite = match (image, cloud_suite) {
        (Some(i), _) => image::suite_of(i),
        (None, Some(s)) => s,
        (None, None) => target
            .and_then(|t| t.str_attr("suite"))
            .unwrap_or(DEFAULT_SUITE)
            .to_string(),
    };
    // Whether the suite comes with its updates: its image says (recorded with
    // the image), else its host.
    if let (None, Some(t)) = (image, target) {
        if let Err(c) = cx.needs.add_suite(&suite, image::takes_updates(t), &t.key) {
            cx.conflict(c);
        }
    }
    // The image's name is its pin's: what the VM boots, what the host was
    // provisioned from. A host without a base is any Debian system.
    let starts_from = image.map_or(REQUIRED.to_string(), |i| {
        PinKey::Image(i.name.clone()).to_string()
    });
    let version = n
        .str_attr("version")
        .filter(|v| !v.is_empty())
        .map(str::to_string);
    let vendor = match n.attr("archive") {
        Some(Val::Record(fields)) => match vendor_archive(fields) {
            Ok((name, archive)) => {
                if let Err(e) = cx.needs.add_vendor(&name, archive) {
                    cx.conflict(e);
                }
                Some(name)
            }
            Err(e) => {
                cx.conflict(format!("`{}`: {e}", n.key));
                None
            }
        },
        _ => None,
    };
    if let Err(c) = cx.needs.add_package(
        &n.name,
        &suite,
        vendor.as_deref(),
        version,
        &n.key,
        &starts_from,
    ) {
        cx.conflict(c);
    }
}

/// Why a package's `archive` is not a vendor archive envc can pin.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BadVendorArchive {
    /// A field `debian.vendor_archive` always gives is missing or not a string.
    NoField(&'static str),
    NotAFingerprint {
        name: String,
        fingerprint: String,
    },
    BadName(String),
    NotHttp {
        name: String,
        url: String,
    },
    NoKey(String),
}

impl std::fmt::Display for BadVendorArchive {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BadVendorArchive::NoField(k) => write!(f, "its archive has no `{k}` string"),
            BadVendorArchive::NotAFingerprint { name, fingerprint } => write!(
                f,
                "archive `{name}`: {fingerprint:?} is not an OpenPGP fingerprint (40 hex digits)"
            ),
            BadVendorArchive::BadName(name) => write!(
                f,
                "archive name {name:?}: a vendor archive's name is one word, not Debian's `debian/…`"
            ),
            BadVendorArchive::NotHttp { name, url } => {
                write!(f, "archive `{name}`: url {url:?} is not http(s)")
            }
            BadVendorArchive::NoKey(name) => write!(f, "archive `{name}` has no `key` file"),
        }
    }
}

/// A package's `archive` (what `debian.vendor_archive` makes): its name and declaration.
fn vendor_archive(
    fields: &BTreeMap<String, Val>,
) -> Result<(String, VendorArchive), BadVendorArchive> {
    let text = |k: &'static str| match fields.get(k) {
        Some(Val::Str(s)) => Ok(s.clone()),
        _ => Err(BadVendorArchive::NoField(k)),
    };
    let name = text("name")?;
    let url = text("url")?.trim_end_matches('/').to_string();
    let fingerprint = text("fingerprint")?.replace(' ', "").to_ascii_uppercase();
    if !envc_lockfiles::text::is_fingerprint(&fingerprint) {
        return Err(BadVendorArchive::NotAFingerprint { name, fingerprint });
    }
    if name.is_empty() || name.contains(char::is_whitespace) || name.starts_with("debian/") {
        return Err(BadVendorArchive::BadName(name));
    }
    if !(url.starts_with("http://") || url.starts_with("https://")) {
        return Err(BadVendorArchive::NotHttp { name, url });
    }
    let key = match fields.get("key") {
        Some(Val::Path { path, .. }) => path.clone(),
        _ => return Err(BadVendorArchive::NoKey(name)),
    };
    Ok((
        name,
        VendorArchive {
            url,
            suite: text("suite")?,
            components: crate::spec::strings(fields.get("components")),
            key,
            fingerprint,
        },
    ))
}
