//! HTTPS for the downstream listener, and mTLS when a client CA is configured; and TLS to
//! upstreams (a peer gateway: mTLS with fedgate's client certificate).

use crate::config::Invalid;
use std::{path::Path, sync::Arc};

use rustls::{
    RootCertStore, ServerConfig,
    pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject},
    server::WebPkiClientVerifier,
};

use serde::Deserialize;

/// `[gateway.tls]`: PEM files, relative to the config file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTls {
    pub cert: String,
    pub key: String,
    /// CA whose client certificates are accepted; set = every client must present one.
    pub client_ca: Option<String>,
}

/// `[upstreams.NAME] tls`
#[derive(Debug, Deserialize, Clone)]
#[serde(deny_unknown_fields)]
pub struct RawUpstreamTls {
    pub ca: String,
    pub cert: Option<String>,
    pub key: Option<String>,
}

/// Builds the rustls server config; paths are relative to `base` (the config file's folder).
pub fn server_config(base: &Path, raw: &RawTls) -> Result<ServerConfig, Invalid> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(base.join(&raw.cert))
        .and_then(|i| i.collect::<Result<_, _>>())
        .map_err(|e| Invalid(format!("cert `{}`: {e}", raw.cert)))?;
    let key = PrivateKeyDer::from_pem_file(base.join(&raw.key))
        .map_err(|e| Invalid(format!("key `{}`: {e}", raw.key)))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| Invalid(e.to_string()))?;
    let builder = match &raw.client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let mut roots = RootCertStore::empty();
            for cert in CertificateDer::pem_file_iter(base.join(ca))
                .map_err(|e| Invalid(format!("client_ca `{ca}`: {e}")))?
            {
                let cert = cert.map_err(|e| Invalid(format!("client_ca `{ca}`: {e}")))?;
                roots
                    .add(cert)
                    .map_err(|e| Invalid(format!("client_ca `{ca}`: {e}")))?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|e| Invalid(format!("client_ca `{ca}`: {e}")))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = builder
        .with_single_cert(certs, key)
        .map_err(|e| Invalid(format!("cert/key: {e}")))?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}

/// The rustls client config of an upstream: its CA as the only root, and the client
/// certificate when one is configured.
pub fn client_config(
    tls: &crate::config::snapshot::UpstreamTls,
) -> Result<rustls::ClientConfig, Invalid> {
    let shown = |p: &Path| p.display().to_string();
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(&tls.ca)
        .map_err(|e| Invalid(format!("tls.ca `{}`: {e}", shown(&tls.ca))))?
    {
        let cert = cert.map_err(|e| Invalid(format!("tls.ca `{}`: {e}", shown(&tls.ca))))?;
        roots
            .add(cert)
            .map_err(|e| Invalid(format!("tls.ca `{}`: {e}", shown(&tls.ca))))?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| Invalid(e.to_string()))?
        .with_root_certificates(roots);
    let mut config = match (&tls.cert, &tls.key) {
        (Some(cert), Some(key)) => {
            let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
                .and_then(|i| i.collect::<Result<_, _>>())
                .map_err(|e| Invalid(format!("tls.cert `{}`: {e}", shown(cert))))?;
            let key = PrivateKeyDer::from_pem_file(key)
                .map_err(|e| Invalid(format!("tls.key `{}`: {e}", shown(key))))?;
            builder
                .with_client_auth_cert(certs, key)
                .map_err(|e| Invalid(format!("tls.cert/key: {e}")))?
        }
        _ => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}
