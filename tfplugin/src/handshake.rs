//! go-plugin's handshake: the host starts the plugin with a magic cookie in its environment
//! and the protocol versions it speaks; the plugin prints one line on stdout,
//! `CORE|APP|NETWORK|ADDRESS|PROTOCOL|CERT`, and serves gRPC there.

use base64::Engine;

use crate::error::Problem;

/// Terraform's cookie. Without it a provider prints that it is a plugin and exits.
pub const MAGIC_COOKIE_KEY: &str = "TF_PLUGIN_MAGIC_COOKIE";
pub const MAGIC_COOKIE_VALUE: &str =
    "d602bf8f470bc67ca7faa0386276bbdd4330efaf76d1a219cb4d6991ca9872b2";

/// The versions of tfplugin envc speaks. Protocol 5 (the SDKv2 providers) has its own
/// method names and is not spoken yet: such a provider is refused at the handshake.
pub const PROTOCOL_VERSIONS: &[u32] = &[6];

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Network {
    Unix,
    Tcp,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Handshake {
    pub protocol: u32,
    pub network: Network,
    pub address: String,
    /// The plugin's certificate (DER) when it serves TLS.
    pub server_cert: Option<Vec<u8>>,
}

/// Reads the handshake line. The error is a sentence about what is wrong with it.
pub fn parse(line: &str) -> Result<Handshake, Problem> {
    let line = line.trim_end();
    let parts: Vec<&str> = line.split('|').collect();
    if parts.len() < 5 {
        return Err(Problem(format!(
            "it printed `{line}`, not a handshake (CORE|APP|NETWORK|ADDRESS|PROTOCOL)"
        )));
    }
    if parts[0] != "1" {
        return Err(Problem(format!(
            "it speaks go-plugin core protocol {}, and envc speaks 1",
            parts[0]
        )));
    }
    let protocol: u32 = parts[1].parse().map_err(|_| {
        Problem(format!(
            "its protocol version `{}` is not a number",
            parts[1]
        ))
    })?;
    if !PROTOCOL_VERSIONS.contains(&protocol) {
        let spoken = PROTOCOL_VERSIONS
            .iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(", ");
        return Err(Problem(format!(
            "it speaks plugin protocol {protocol}, and envc speaks {spoken}; a provider built on the legacy SDKv2 speaks 5, which envc does not speak yet"
        )));
    }
    let network = match parts[2] {
        "unix" => Network::Unix,
        "tcp" => Network::Tcp,
        other => {
            return Err(Problem(format!(
                "it serves on a `{other}` network, and envc reaches unix and tcp"
            )))
        }
    };
    if parts[4] != "grpc" {
        return Err(Problem(format!(
            "it speaks `{}`, and envc speaks grpc (netrpc is Terraform 0.11's)",
            parts[4]
        )));
    }
    let server_cert = match parts
        .get(5)
        .map(|c| c.trim_end_matches('='))
        .filter(|c| !c.is_empty())
    {
        // go-plugin writes the certificate unpadded; Python's servers pad it.
        Some(cert) => Some(
            base64::engine::general_purpose::STANDARD_NO_PAD
                .decode(cert)
                .map_err(|e| Problem(format!("its certificate is not base64: {e}")))?,
        ),
        None => None,
    };
    Ok(Handshake {
        protocol,
        network,
        address: parts[3].to_string(),
        server_cert,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    type Expected<'a> = Result<(u32, Network, &'a str, Option<&'a [u8]>), &'a str>;

    fn check(line: &str, expected: Expected) {
        let got = parse(line).map_err(|p| p.0);
        let expected = expected
            .map(|(protocol, network, address, cert)| Handshake {
                protocol,
                network,
                address: address.to_string(),
                server_cert: cert.map(<[u8]>::to_vec),
            })
            .map_err(str::to_string);
        assert_eq!(got, expected, "{line}");
    }

    #[test]
    fn handshake_lines() {
        check(
            "1|6|unix|/tmp/plugin123|grpc|\n",
            Ok((6, Network::Unix, "/tmp/plugin123", None)),
        );
        check(
            "1|6|tcp|127.0.0.1:4000|grpc|AQID",
            Ok((6, Network::Tcp, "127.0.0.1:4000", Some(&[1, 2, 3]))),
        );
        check(
            "1|6|tcp|127.0.0.1:4000|grpc|AQIDBA==",
            Ok((6, Network::Tcp, "127.0.0.1:4000", Some(&[1, 2, 3, 4]))),
        );
        check(
            "1|5|unix|/tmp/p|grpc|",
            Err("it speaks plugin protocol 5, and envc speaks 6; a provider built on the legacy SDKv2 speaks 5, which envc does not speak yet"),
        );
        check(
            "1|6|unix|/tmp/p|netrpc|",
            Err("it speaks `netrpc`, and envc speaks grpc (netrpc is Terraform 0.11's)"),
        );
        check(
            "This binary is a plugin. These are not meant to be executed directly.",
            Err("it printed `This binary is a plugin. These are not meant to be executed directly.`, not a handshake (CORE|APP|NETWORK|ADDRESS|PROTOCOL)"),
        );
        check(
            "2|6|unix|/tmp/p|grpc|",
            Err("it speaks go-plugin core protocol 2, and envc speaks 1"),
        );
        check(
            "1|6|tcp|127.0.0.1:1|grpc|!!",
            Err("its certificate is not base64: Invalid symbol 33, offset 0."),
        );
    }
}
