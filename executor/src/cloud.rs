//! The clouds `envc lock` asks for the images it pins (`envc_lockfiles::CloudImages`).

use envc_lockfiles::cloud::NoCloud;
use envc_lockfiles::CloudImages;

/// The cloud images client for this process.
pub(crate) fn clouds() -> Box<dyn CloudImages> {
    Box::new(NoCloud)
}
