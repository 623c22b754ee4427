//! The one error type of the crate. Its Display is a plain sentence with the action and AWS's
//! own code and message; the caller (the EC2 provider) adds the node and the fix.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use crate::state::InstanceState;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AwsError {
    /// No credentials in any place of the chain; `tried` names each place and why it had none.
    NoCredentials {
        tried: Vec<String>,
    },
    NoRegion,
    /// A malformed shared credentials or config file.
    Config {
        path: PathBuf,
        line: usize,
        what: String,
    },
    /// An error answer from AWS (after retries where AWS says retry): its code and message.
    Api {
        action: String,
        status: u16,
        code: String,
        message: String,
        request_id: Option<String>,
        attempts: u32,
    },
    /// No answer (connection refused, timeout, cut) after retries.
    Http {
        action: String,
        endpoint: String,
        what: String,
        attempts: u32,
    },
    /// An answer this client cannot read (not XML, a missing field, an unknown state).
    BadResponse {
        action: String,
        what: String,
    },
    /// `wait_for_state` gave up: the instance was not in a wanted state before the timeout,
    /// or reached a state it cannot leave (`terminated` when that is not wanted).
    Wait {
        instance: String,
        want: Vec<InstanceState>,
        last: Option<InstanceState>,
        waited: Duration,
    },
}

/// What a caller does about an error, independent of AWS's exact code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// Local: no credentials, no region, a malformed file.
    Credentials,
    /// AWS refused the credentials or the permission.
    Unauthorized,
    NotFound,
    /// No capacity or a quota reached.
    Capacity,
    /// AWS throttled the calls, even after the retries.
    Throttled,
    /// Something else still uses the resource (a subnet with instances, …).
    DependencyViolation,
    /// The resource already exists.
    Conflict,
    /// No answer from the endpoint.
    Unreachable,
    Other,
}

/// The kind of an AWS error code.
pub(crate) fn kind_of_code(code: &str) -> ErrorKind {
    match code {
        "AuthFailure"
        | "UnauthorizedOperation"
        | "InvalidClientTokenId"
        | "SignatureDoesNotMatch"
        | "OptInRequired"
        | "Blocked"
        | "AccessDenied"
        | "AccessDeniedException"
        | "ExpiredToken"
        | "InvalidAccessKeyId"
        | "UnrecognizedClientException" => ErrorKind::Unauthorized,
        "InsufficientInstanceCapacity"
        | "InstanceLimitExceeded"
        | "VcpuLimitExceeded"
        | "InsufficientFreeAddressesInSubnet"
        | "InsufficientAddressCapacity"
        | "VpcLimitExceeded"
        | "AddressLimitExceeded" => ErrorKind::Capacity,
        "RequestLimitExceeded" | "Throttling" | "ThrottlingException" => ErrorKind::Throttled,
        "DependencyViolation" => ErrorKind::DependencyViolation,
        _ if code.ends_with(".NotFound")
            || code.ends_with(".Malformed")
            || code.starts_with("InvalidAMIID.") =>
        {
            ErrorKind::NotFound
        }
        _ if code.ends_with(".Duplicate") => ErrorKind::Conflict,
        _ => ErrorKind::Other,
    }
}

impl AwsError {
    pub fn kind(&self) -> ErrorKind {
        match self {
            AwsError::NoCredentials { .. } | AwsError::NoRegion | AwsError::Config { .. } => {
                ErrorKind::Credentials
            }
            AwsError::Api { code, .. } => kind_of_code(code),
            AwsError::Http { .. } => ErrorKind::Unreachable,
            AwsError::BadResponse { .. } | AwsError::Wait { .. } => ErrorKind::Other,
        }
    }

    /// AWS's error code, for an error answer.
    pub fn code(&self) -> Option<&str> {
        match self {
            AwsError::Api { code, .. } => Some(code),
            _ => None,
        }
    }
}

fn states(states: &[InstanceState]) -> String {
    states
        .iter()
        .map(|s| s.as_str())
        .collect::<Vec<_>>()
        .join(" or ")
}

impl fmt::Display for AwsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AwsError::NoCredentials { tried } => write!(
                f,
                "no AWS credentials found; tried {}",
                tried.join("; ")
            ),
            AwsError::NoRegion => write!(
                f,
                "no AWS region set (AWS_REGION, AWS_DEFAULT_REGION, or `region` in the profile of the config file)"
            ),
            // Line 0: the whole file, or a variable (`AWS_ENDPOINT_URL`) standing in for one.
            AwsError::Config { path, line: 0, what } => write!(f, "{}: {what}", path.display()),
            AwsError::Config { path, line, what } => {
                write!(f, "{}:{line}: {what}", path.display())
            }
            AwsError::Api {
                action,
                status,
                code,
                message,
                request_id,
                attempts,
            } => {
                write!(f, "EC2 {action} failed with {code}: {message} (HTTP {status}")?;
                if let Some(id) = request_id {
                    write!(f, ", request {id}")?;
                }
                if *attempts > 1 {
                    write!(f, ", after {attempts} attempts")?;
                }
                write!(f, ")")
            }
            AwsError::Http {
                action,
                endpoint,
                what,
                attempts,
            } => write!(
                f,
                "EC2 {action} got no answer from {endpoint} after {attempts} attempt{}: {what}",
                if *attempts == 1 { "" } else { "s" }
            ),
            AwsError::BadResponse { action, what } => {
                write!(f, "EC2 {action} answered something unreadable: {what}")
            }
            AwsError::Wait {
                instance,
                want,
                last,
                waited,
            } => {
                let want = states(want);
                match last {
                    Some(InstanceState::Terminated) => write!(
                        f,
                        "instance {instance} is terminated and will never be {want}"
                    ),
                    Some(last) => write!(
                        f,
                        "instance {instance} was not {want} after {:.1} s (it is {})",
                        waited.as_secs_f64(),
                        last.as_str()
                    ),
                    None => write!(
                        f,
                        "instance {instance} did not show up in DescribeInstances within {:.1} s",
                        waited.as_secs_f64()
                    ),
                }
            }
        }
    }
}

impl std::error::Error for AwsError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_of_codes() {
        for (code, kind) in [
            ("AuthFailure", ErrorKind::Unauthorized),
            ("UnauthorizedOperation", ErrorKind::Unauthorized),
            ("SignatureDoesNotMatch", ErrorKind::Unauthorized),
            ("InvalidInstanceID.NotFound", ErrorKind::NotFound),
            ("InvalidInstanceID.Malformed", ErrorKind::NotFound),
            ("InvalidAMIID.Unavailable", ErrorKind::NotFound),
            ("InsufficientInstanceCapacity", ErrorKind::Capacity),
            ("VcpuLimitExceeded", ErrorKind::Capacity),
            ("RequestLimitExceeded", ErrorKind::Throttled),
            ("DependencyViolation", ErrorKind::DependencyViolation),
            ("InvalidGroup.Duplicate", ErrorKind::Conflict),
            ("InvalidKeyPair.Duplicate", ErrorKind::Conflict),
            ("InvalidParameterValue", ErrorKind::Other),
        ] {
            assert_eq!(kind_of_code(code), kind, "{code}");
        }
    }
}
