//! go-plugin's AutoMTLS, from the client's side. envc makes a fresh self-signed certificate
//! for each provider process and hands it over in `PLUGIN_CLIENT_CERT`; the provider makes
//! its own and prints it in the handshake. Each side then trusts exactly the other's
//! certificate: no CA, no names, nothing that outlives the process. A provider that serves
//! TLS without asking for AutoMTLS (tfprovider's Python servers) is held to its printed
//! certificate the same way.

use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, SignatureScheme};

use crate::error::Problem;

/// envc's certificate and key for one provider process.
pub(crate) struct ClientIdentity {
    pub pem: String,
    der: CertificateDer<'static>,
    key: Vec<u8>,
}

impl ClientIdentity {
    pub fn new() -> Result<ClientIdentity, Problem> {
        use rcgen::{
            BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
            KeyUsagePurpose,
        };
        let key =
            KeyPair::generate().map_err(|e| Problem(format!("cannot make a client key: {e}")))?;
        let mut params = CertificateParams::new(vec!["localhost".to_string()])
            .map_err(|e| Problem(format!("cannot make a client certificate: {e}")))?;
        params
            .distinguished_name
            .push(DnType::CommonName, "localhost");
        params
            .distinguished_name
            .push(DnType::OrganizationName, "envc");
        // What go-plugin's own client certificate carries: Go checks the client's
        // certificate against a pool holding only itself, so it is its own CA, and
        // it must allow client authentication.
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
            KeyUsagePurpose::KeyAgreement,
            KeyUsagePurpose::KeyCertSign,
        ];
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ClientAuth,
            ExtendedKeyUsagePurpose::ServerAuth,
        ];
        let cert = params
            .self_signed(&key)
            .map_err(|e| Problem(format!("cannot sign the client certificate: {e}")))?;
        Ok(ClientIdentity {
            pem: cert.pem(),
            der: cert.der().clone(),
            key: key.serialize_der(),
        })
    }

    /// A TLS configuration that trusts only `server_cert` and presents this identity.
    pub fn config(&self, server_cert: Vec<u8>) -> Result<Arc<ClientConfig>, Problem> {
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let verifier = PinnedServer {
            cert: CertificateDer::from(server_cert),
            provider: provider.clone(),
        };
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(self.key.clone()));
        let mut config = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| Problem(format!("TLS: {e}")))?
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(verifier))
            .with_client_auth_cert(vec![self.der.clone()], key)
            .map_err(|e| Problem(format!("TLS: {e}")))?;
        // gRPC servers in Go refuse a TLS connection that did not agree on HTTP/2.
        config.alpn_protocols = vec![b"h2".to_vec()];
        Ok(Arc::new(config))
    }
}

/// Trusts one certificate, byte for byte, whatever name or dates it carries; signatures
/// are still checked, so only the holder of its key can answer.
#[derive(Debug)]
struct PinnedServer {
    cert: CertificateDer<'static>,
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for PinnedServer {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        if end_entity.as_ref() == self.cert.as_ref() {
            Ok(ServerCertVerified::assertion())
        } else {
            Err(rustls::Error::General(
                "the provider presented a certificate other than the one its handshake printed"
                    .into(),
            ))
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}
