//! The messages of tfplugin6, written by hand: the subset envc sends and reads, each field
//! with the number the protocol gives it. A field a provider sends that is not here is
//! skipped by prost, as protobuf means it to be, so a newer minor version of the protocol
//! still decodes. Written rather than generated so that the build needs no `protoc`, no
//! build script and no vendored `.proto`; the names follow the protocol's, so its
//! documentation reads against this file.
//!
//! Maps are `BTreeMap`s: a schema's resource types come out in one order on every machine.

use std::collections::BTreeMap;

/// A value, in one of two encodings: msgpack, which carries unknowns, or JSON.
#[derive(Clone, PartialEq, prost::Message)]
pub struct DynamicValue {
    #[prost(bytes = "vec", tag = "1")]
    pub msgpack: Vec<u8>,
    #[prost(bytes = "vec", tag = "2")]
    pub json: Vec<u8>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
#[repr(i32)]
pub enum Severity {
    Invalid = 0,
    Error = 1,
    Warning = 2,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Diagnostic {
    #[prost(enumeration = "Severity", tag = "1")]
    pub severity: i32,
    #[prost(string, tag = "2")]
    pub summary: String,
    #[prost(string, tag = "3")]
    pub detail: String,
    #[prost(message, optional, tag = "4")]
    pub attribute: Option<AttributePath>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct AttributePath {
    #[prost(message, repeated, tag = "1")]
    pub steps: Vec<Step>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Step {
    #[prost(oneof = "Selector", tags = "1, 2, 3")]
    pub selector: Option<Selector>,
}

#[derive(Clone, PartialEq, prost::Oneof)]
pub enum Selector {
    #[prost(string, tag = "1")]
    AttributeName(String),
    #[prost(string, tag = "2")]
    ElementKeyString(String),
    #[prost(int64, tag = "3")]
    ElementKeyInt(i64),
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct RawState {
    #[prost(bytes = "vec", tag = "1")]
    pub json: Vec<u8>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Schema {
    #[prost(int64, tag = "1")]
    pub version: i64,
    #[prost(message, optional, tag = "2")]
    pub block: Option<Block>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Block {
    #[prost(int64, tag = "1")]
    pub version: i64,
    #[prost(message, repeated, tag = "2")]
    pub attributes: Vec<Attribute>,
    #[prost(message, repeated, tag = "3")]
    pub block_types: Vec<NestedBlock>,
    #[prost(string, tag = "4")]
    pub description: String,
    #[prost(bool, tag = "6")]
    pub deprecated: bool,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Attribute {
    #[prost(string, tag = "1")]
    pub name: String,
    /// The attribute's cty type, as JSON (`"string"`, `["list","string"]`); empty when
    /// `nested_type` gives it instead.
    #[prost(bytes = "vec", tag = "2")]
    pub r#type: Vec<u8>,
    #[prost(message, optional, tag = "10")]
    pub nested_type: Option<Object>,
    #[prost(string, tag = "3")]
    pub description: String,
    #[prost(bool, tag = "4")]
    pub required: bool,
    #[prost(bool, tag = "5")]
    pub optional: bool,
    #[prost(bool, tag = "6")]
    pub computed: bool,
    #[prost(bool, tag = "7")]
    pub sensitive: bool,
    #[prost(bool, tag = "9")]
    pub deprecated: bool,
    #[prost(bool, tag = "11")]
    pub write_only: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
#[repr(i32)]
pub enum NestingMode {
    Invalid = 0,
    Single = 1,
    List = 2,
    Set = 3,
    Map = 4,
    Group = 5,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct NestedBlock {
    #[prost(string, tag = "1")]
    pub type_name: String,
    #[prost(message, optional, tag = "2")]
    pub block: Option<Block>,
    #[prost(enumeration = "NestingMode", tag = "3")]
    pub nesting: i32,
    #[prost(int64, tag = "4")]
    pub min_items: i64,
    #[prost(int64, tag = "5")]
    pub max_items: i64,
}

/// An attribute's nested object type (protocol 6 only). Its nesting uses the values of
/// [`NestingMode`] up to `Map`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Object {
    #[prost(message, repeated, tag = "1")]
    pub attributes: Vec<Attribute>,
    #[prost(enumeration = "NestingMode", tag = "3")]
    pub nesting: i32,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ServerCapabilities {
    #[prost(bool, tag = "1")]
    pub plan_destroy: bool,
    #[prost(bool, tag = "2")]
    pub get_provider_schema_optional: bool,
    #[prost(bool, tag = "3")]
    pub move_resource_state: bool,
}

/// What envc can handle. It asks for no deferrals: a change whose configuration is not
/// yet known waits in envc's own graph until it is.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ClientCapabilities {
    #[prost(bool, tag = "1")]
    pub deferral_allowed: bool,
    #[prost(bool, tag = "2")]
    pub write_only_attributes_allowed: bool,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Deferred {
    #[prost(int32, tag = "1")]
    pub reason: i32,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Empty {}

#[derive(Clone, PartialEq, prost::Message)]
pub struct GetProviderSchemaResponse {
    #[prost(message, optional, tag = "1")]
    pub provider: Option<Schema>,
    #[prost(btree_map = "string, message", tag = "2")]
    pub resource_schemas: BTreeMap<String, Schema>,
    #[prost(btree_map = "string, message", tag = "3")]
    pub data_source_schemas: BTreeMap<String, Schema>,
    #[prost(message, repeated, tag = "4")]
    pub diagnostics: Vec<Diagnostic>,
    #[prost(message, optional, tag = "6")]
    pub server_capabilities: Option<ServerCapabilities>,
}

/// ValidateProviderConfig, ValidateResourceConfig and ValidateDataResourceConfig share it:
/// the type name is empty for the provider's own configuration, which has none.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ValidateRequest {
    #[prost(string, tag = "1")]
    pub type_name: String,
    #[prost(message, optional, tag = "2")]
    pub config: Option<DynamicValue>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ValidateProviderConfigRequest {
    #[prost(message, optional, tag = "1")]
    pub config: Option<DynamicValue>,
}

/// ValidateProviderConfig's diagnostics are field 2 (field 1 once held a prepared config).
#[derive(Clone, PartialEq, prost::Message)]
pub struct ValidateProviderConfigResponse {
    #[prost(message, repeated, tag = "2")]
    pub diagnostics: Vec<Diagnostic>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct DiagnosticsResponse {
    #[prost(message, repeated, tag = "1")]
    pub diagnostics: Vec<Diagnostic>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ConfigureProviderRequest {
    #[prost(string, tag = "1")]
    pub terraform_version: String,
    #[prost(message, optional, tag = "2")]
    pub config: Option<DynamicValue>,
    #[prost(message, optional, tag = "3")]
    pub client_capabilities: Option<ClientCapabilities>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct UpgradeResourceStateRequest {
    #[prost(string, tag = "1")]
    pub type_name: String,
    #[prost(int64, tag = "2")]
    pub version: i64,
    #[prost(message, optional, tag = "3")]
    pub raw_state: Option<RawState>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct UpgradeResourceStateResponse {
    #[prost(message, optional, tag = "1")]
    pub upgraded_state: Option<DynamicValue>,
    #[prost(message, repeated, tag = "2")]
    pub diagnostics: Vec<Diagnostic>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ReadResourceRequest {
    #[prost(string, tag = "1")]
    pub type_name: String,
    #[prost(message, optional, tag = "2")]
    pub current_state: Option<DynamicValue>,
    #[prost(bytes = "vec", tag = "3")]
    pub private: Vec<u8>,
    #[prost(message, optional, tag = "5")]
    pub client_capabilities: Option<ClientCapabilities>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ReadResourceResponse {
    #[prost(message, optional, tag = "1")]
    pub new_state: Option<DynamicValue>,
    #[prost(message, repeated, tag = "2")]
    pub diagnostics: Vec<Diagnostic>,
    #[prost(bytes = "vec", tag = "3")]
    pub private: Vec<u8>,
    #[prost(message, optional, tag = "4")]
    pub deferred: Option<Deferred>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct PlanResourceChangeRequest {
    #[prost(string, tag = "1")]
    pub type_name: String,
    #[prost(message, optional, tag = "2")]
    pub prior_state: Option<DynamicValue>,
    #[prost(message, optional, tag = "3")]
    pub proposed_new_state: Option<DynamicValue>,
    #[prost(message, optional, tag = "4")]
    pub config: Option<DynamicValue>,
    #[prost(bytes = "vec", tag = "5")]
    pub prior_private: Vec<u8>,
    #[prost(message, optional, tag = "7")]
    pub client_capabilities: Option<ClientCapabilities>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct PlanResourceChangeResponse {
    #[prost(message, optional, tag = "1")]
    pub planned_state: Option<DynamicValue>,
    #[prost(message, repeated, tag = "2")]
    pub requires_replace: Vec<AttributePath>,
    #[prost(bytes = "vec", tag = "3")]
    pub planned_private: Vec<u8>,
    #[prost(message, repeated, tag = "4")]
    pub diagnostics: Vec<Diagnostic>,
    #[prost(bool, tag = "5")]
    pub legacy_type_system: bool,
    #[prost(message, optional, tag = "6")]
    pub deferred: Option<Deferred>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ApplyResourceChangeRequest {
    #[prost(string, tag = "1")]
    pub type_name: String,
    #[prost(message, optional, tag = "2")]
    pub prior_state: Option<DynamicValue>,
    #[prost(message, optional, tag = "3")]
    pub planned_state: Option<DynamicValue>,
    #[prost(message, optional, tag = "4")]
    pub config: Option<DynamicValue>,
    #[prost(bytes = "vec", tag = "5")]
    pub planned_private: Vec<u8>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ApplyResourceChangeResponse {
    #[prost(message, optional, tag = "1")]
    pub new_state: Option<DynamicValue>,
    #[prost(bytes = "vec", tag = "2")]
    pub private: Vec<u8>,
    #[prost(message, repeated, tag = "3")]
    pub diagnostics: Vec<Diagnostic>,
    #[prost(bool, tag = "4")]
    pub legacy_type_system: bool,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ImportResourceStateRequest {
    #[prost(string, tag = "1")]
    pub type_name: String,
    #[prost(string, tag = "2")]
    pub id: String,
    #[prost(message, optional, tag = "3")]
    pub client_capabilities: Option<ClientCapabilities>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ImportedResource {
    #[prost(string, tag = "1")]
    pub type_name: String,
    #[prost(message, optional, tag = "2")]
    pub state: Option<DynamicValue>,
    #[prost(bytes = "vec", tag = "3")]
    pub private: Vec<u8>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ImportResourceStateResponse {
    #[prost(message, repeated, tag = "1")]
    pub imported_resources: Vec<ImportedResource>,
    #[prost(message, repeated, tag = "2")]
    pub diagnostics: Vec<Diagnostic>,
    #[prost(message, optional, tag = "3")]
    pub deferred: Option<Deferred>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ReadDataSourceRequest {
    #[prost(string, tag = "1")]
    pub type_name: String,
    #[prost(message, optional, tag = "2")]
    pub config: Option<DynamicValue>,
    #[prost(message, optional, tag = "4")]
    pub client_capabilities: Option<ClientCapabilities>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ReadDataSourceResponse {
    #[prost(message, optional, tag = "1")]
    pub state: Option<DynamicValue>,
    #[prost(message, repeated, tag = "2")]
    pub diagnostics: Vec<Diagnostic>,
    #[prost(message, optional, tag = "3")]
    pub deferred: Option<Deferred>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct StopProviderResponse {
    #[prost(string, tag = "1")]
    pub error: String,
}
