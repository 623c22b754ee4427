//! The store, below everything that runs: immutable blake3-addressed objects, one ref per
//! environment, the records that say what was realized where (`record`), an
//! environment's states and history (`state`), the lock that makes one run at a time
//! (`envlock`), and their shared copy in a bucket (`remote`, `shared_state`).
//!
//! Plain typed data and files. It names no node kind, runs no step and opens no
//! connection to a target: Cargo keeps it so, since it depends on none of the crates
//! that do (Nix's libstore is the model: the engine and the kinds sit on it).

pub mod damage;
pub mod envlock;
pub mod held;
pub mod names;
pub mod object_id;
pub mod record;
pub mod remote;
pub mod shared_state;
pub mod state;
pub mod store;
