//! The node kinds: one module each, with everything the executor does for a node of that
//! kind (its remote operations beside it).

pub mod exec;
pub mod file;
pub mod gitops;
pub mod image;
pub mod package;
pub mod service;
pub mod vm;
