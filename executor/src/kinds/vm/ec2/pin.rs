//! The lockfile's pin of a cloud image, as a node carries it.

use crate::spec::NodeSpec;

/// The pinned AMI of image `image` in `region`: id, name, owner.
pub fn pinned(_node: &NodeSpec, _image: &str, _region: &str) -> Option<(String, String, String)> {
    None // wired to PinKey::CloudImage once the lockfile pins it
}
