//! The lockfile's pin of a cloud image, as a node carries it.

use envc_compiler::pin::PinKey;

use crate::spec::NodeSpec;

/// The AMI id the lockfile pins for image `image` in `region` (the compiler put the pin into
/// the node, and so into its id).
pub fn pinned(node: &NodeSpec, image: &str, region: &str) -> Option<String> {
    node.pins.get(&PinKey::cloud_image(image, region)).cloned()
}
