//! envc's AWS EC2 client: the few EC2 Query-API calls envc's `vm` machines on EC2 need,
//! signed with SigV4 (`sigv4.rs`), answered in XML (`xml.rs`), retried with exponential
//! backoff and full jitter where AWS says retry (`retry.rs`), with credentials from the AWS
//! SDKs' standard environment variables and shared files (`credentials.rs`).
//!
//! Hand-written rather than the official SDK: aws-sdk-ec2 alone compiles for many minutes
//! on the 2-core CI, and envc needs a few dozen calls. Everything the client reads from the
//! process environment arrives in an explicit [`AwsEnv`]; the clock is read only to sign.

pub mod credentials;
pub mod ec2;
pub mod error;
mod retry;
mod sigv4;
mod state;
mod xml;

pub use credentials::{load_credentials, AwsEnv, Credentials};
pub use ec2::*;
pub use error::{AwsError, ErrorKind};
