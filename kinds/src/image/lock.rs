//! What an image needs pinned: its Debian suite (with its updates unless it says not) and
//! its package set, and the tools that shape its bytes.

use envc_compiler::pin::PinKey;
use envc_lockfiles::needs::{ImageNeed, DEFAULT_SUITE};

use super::build::lock_includes;
use crate::node_type::LockNeeds;
use crate::spec::{NodeSpec, Val};

/// The tools whose versions can change an image's bytes: mmdebstrap lays out its root, GNU
/// tar writes the root's tarball, `mke2fs -d` its disk. Pinned for every image, and in its
/// id (`compiler/src/eval.rs::pin_keys`).
const IMAGE_TOOLS: &[&str] = &["mke2fs", "mmdebstrap", "tar"];

/// The Debian suite an image installs from.
pub fn suite_of(image: &NodeSpec) -> String {
    image.str_attr("suite").unwrap_or(DEFAULT_SUITE).to_string()
}

/// Whether a node (an image, a host) takes its Debian suite with the suites apt reads
/// beside it (`-updates`, `-security`): unless it says `updates = false`.
pub fn takes_updates(n: &NodeSpec) -> bool {
    !matches!(n.attr("updates"), Some(Val::Bool(false)))
}

pub(super) fn lock_needs(n: &NodeSpec, cx: &mut LockNeeds<'_>) {
    let key = PinKey::Image(n.name.clone()).to_string();
    if let Err(c) = cx.needs.add_suite(&suite_of(n), takes_updates(n), &key) {
        cx.conflict(c);
    }
    cx.needs.images.insert(
        n.name.clone(),
        ImageNeed {
            suite: suite_of(n),
            includes: lock_includes(&n.str_list("packages")),
        },
    );
    // A lab's image (a host's base) is built by the lab's tools: a build of plain hosts
    // must not need them, so they are not pinned for it.
    if !cx.lab {
        // What writes the image's bytes (`ToolRole::Shapes`).
        for tool in IMAGE_TOOLS {
            cx.tool(tool);
        }
    }
}
