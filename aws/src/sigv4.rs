//! AWS Signature Version 4 for a request with no query string, signed in the
//! `Authorization` header.
//! <https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_sigv-create-signed-request.html>

use std::time::{SystemTime, UNIX_EPOCH};

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

/// The time of a signature, in its two spellings (`20150830T123600Z`, `20150830`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AmzDate {
    pub stamp: String,
    pub day: String,
}

impl AmzDate {
    /// The system clock. Only the signature sees it (AWS refuses one more than 5 minutes off).
    pub fn now() -> AmzDate {
        let secs = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        AmzDate::from_unix(secs)
    }

    pub fn from_unix(secs: u64) -> AmzDate {
        let days = secs / 86_400;
        let rem = secs % 86_400;
        let (y, m, d) = civil_from_days(days as i64);
        let day = format!("{y:04}{m:02}{d:02}");
        let stamp = format!(
            "{day}T{:02}{:02}{:02}Z",
            rem / 3600,
            (rem % 3600) / 60,
            rem % 60
        );
        AmzDate { stamp, day }
    }
}

/// Days since 1970-01-01 to a proleptic Gregorian date (Howard Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

pub(crate) struct Request<'a> {
    pub method: &'a str,
    /// The `Host` header's value: host, and `:port` when not the scheme's default.
    pub host: &'a str,
    /// The path, already URI-encoded (a `url::Url`'s path).
    pub path: &'a str,
    /// Headers to sign besides `host` and `x-amz-date`, e.g. `x-amz-security-token`.
    pub headers: &'a [(&'a str, &'a str)],
    pub payload: &'a [u8],
}

pub(crate) struct Key<'a> {
    pub access_key_id: &'a str,
    pub secret_access_key: &'a str,
    pub region: &'a str,
    pub service: &'a str,
}

pub(crate) fn sha256_hex(data: &[u8]) -> String {
    hex(&Sha256::digest(data))
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}

fn hmac(key: &[u8], data: &[u8]) -> Vec<u8> {
    // HMAC takes a key of any length; the error arm cannot happen.
    match Hmac::<Sha256>::new_from_slice(key) {
        Ok(mut mac) => {
            mac.update(data);
            mac.finalize().into_bytes().to_vec()
        }
        Err(_) => Vec::new(),
    }
}

/// The `Authorization` header's value.
pub(crate) fn authorization(req: &Request<'_>, key: &Key<'_>, date: &AmzDate) -> String {
    let mut headers: Vec<(String, String)> = vec![
        ("host".to_string(), req.host.trim().to_string()),
        ("x-amz-date".to_string(), date.stamp.clone()),
    ];
    for (name, value) in req.headers {
        headers.push((name.to_ascii_lowercase(), collapse(value)));
    }
    headers.sort();
    let signed: Vec<&str> = headers.iter().map(|(n, _)| n.as_str()).collect();
    let signed = signed.join(";");
    let mut canonical = format!("{}\n{}\n\n", req.method, req.path);
    for (name, value) in &headers {
        canonical.push_str(name);
        canonical.push(':');
        canonical.push_str(value);
        canonical.push('\n');
    }
    canonical.push('\n');
    canonical.push_str(&signed);
    canonical.push('\n');
    canonical.push_str(&sha256_hex(req.payload));

    let scope = format!("{}/{}/{}/aws4_request", date.day, key.region, key.service);
    let to_sign = format!(
        "AWS4-HMAC-SHA256\n{}\n{scope}\n{}",
        date.stamp,
        sha256_hex(canonical.as_bytes())
    );
    let k = hmac(
        format!("AWS4{}", key.secret_access_key).as_bytes(),
        date.day.as_bytes(),
    );
    let k = hmac(&k, key.region.as_bytes());
    let k = hmac(&k, key.service.as_bytes());
    let k = hmac(&k, b"aws4_request");
    let signature = hex(&hmac(&k, to_sign.as_bytes()));
    format!(
        "AWS4-HMAC-SHA256 Credential={}/{scope}, SignedHeaders={signed}, Signature={signature}",
        key.access_key_id
    )
}

/// A header value as SigV4 canonicalizes it: trimmed, inner runs of spaces as one.
fn collapse(value: &str) -> String {
    value.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// AWS's Signature Version 4 test suite (the `aws-sig-v4-test-suite` of the AWS General
    /// Reference, <https://docs.aws.amazon.com/general/latest/gr/signature-v4-test-suite.html>,
    /// now shipped with the SDKs, e.g. aws-c-auth's `tests/aws-signing-test-suite`): the
    /// `get-vanilla` and `post-x-www-form-urlencoded` vectors, their request, credentials,
    /// time and published `Authorization`.
    #[test]
    fn aws_test_suite_vectors() {
        let key = Key {
            access_key_id: "AKIDEXAMPLE",
            secret_access_key: "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
            region: "us-east-1",
            service: "service",
        };
        // 2015-08-30T12:36:00Z, which also checks the calendar arithmetic.
        let date = AmzDate::from_unix(1_440_938_160);
        assert_eq!(date.stamp, "20150830T123600Z");
        let check = |req: Request<'_>, expected: &str| {
            assert_eq!(authorization(&req, &key, &date), expected);
        };
        check(
            Request {
                method: "GET",
                host: "example.amazonaws.com",
                path: "/",
                headers: &[],
                payload: b"",
            },
            "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, \
             SignedHeaders=host;x-amz-date, \
             Signature=5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31",
        );
        check(
            Request {
                method: "POST",
                host: "example.amazonaws.com",
                path: "/",
                headers: &[("Content-Type", "application/x-www-form-urlencoded")],
                payload: b"Param1=value1",
            },
            "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, \
             SignedHeaders=content-type;host;x-amz-date, \
             Signature=ff11897932ad3f4e8b18135d722051e5ac45fc38421b1da7b9d196a0fe09473a",
        );
    }

    #[test]
    fn dates() {
        for (secs, stamp) in [
            (0, "19700101T000000Z"),
            (951_782_400, "20000229T000000Z"),
            (1_798_761_599, "20261231T235959Z"),
            (4_107_542_400, "21000301T000000Z"),
        ] {
            let d = AmzDate::from_unix(secs);
            assert_eq!(d.stamp, stamp);
            assert_eq!(d.day, &stamp[..8]);
        }
    }
}
