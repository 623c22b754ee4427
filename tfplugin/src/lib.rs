//! A client of the plugin protocol Terraform and OpenTofu providers speak, so that envc can
//! host any of them: [`handshake`] (go-plugin's: the magic cookie, the versions, the line a
//! provider prints) and [`tls`] (AutoMTLS) start and reach a provider process;
//! [`provider`] makes the calls of tfplugin6 over gRPC, whose messages [`wire`] spells
//! out; [`cty`] is the type system and value encodings those calls carry; [`schema`] is a
//! provider's schema as envc reads it; [`diagnostic`] what a provider says about a call.
//!
//! It knows nothing of envc: the `resource` kind maps its graph onto these calls.

pub mod cty;
pub mod diagnostic;
pub mod error;
pub mod handshake;
pub mod provider;
pub mod schema;
mod tls;
pub mod wire;

pub use cty::{Type, Value};
pub use diagnostic::{Diagnostic, PathStep, Severity};
pub use error::{PluginError, ValueError};
pub use provider::{Answered, Imported, Planned, Provider, StartOptions};
pub use schema::{Attribute, Block, Nesting, ProviderSchema, Schema};
