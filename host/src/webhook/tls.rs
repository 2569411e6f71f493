//! The certificate the webhook server presents, swapped in place: every TLS handshake asks
//! [`ServingCert`] for the current one, so a renewed certificate (from the Secret the host
//! keeps, or from files someone else renews) is served from the next connection on, without a
//! restart and without dropping the connections in flight.

use std::{
    path::{Path, PathBuf},
    sync::{Arc, RwLock},
};

use rustls::{
    ServerConfig,
    crypto::CryptoProvider,
    pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject},
    server::{ClientHello, ResolvesServerCert},
    sign::CertifiedKey,
};

/// Why a certificate and key cannot be served.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// The PEM does not hold a certificate, or a key.
    #[error("{what}: {message}")]
    Pem {
        /// Which of them.
        what: &'static str,
        /// The cause.
        message: String,
    },
    /// The key does not fit the certificate, or the provider cannot use it.
    #[error("the key and certificate cannot be served: {0}")]
    Key(#[from] rustls::Error),
    /// A file of `--webhook-cert-dir` cannot be read.
    #[error("reading {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
}

/// The crypto library the host's TLS uses everywhere (kube's client, the registries').
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::aws_lc_rs::default_provider())
}

/// A certificate chain and its key, as rustls serves them.
pub fn certified_key(cert_pem: &str, key_pem: &str) -> Result<CertifiedKey, TlsError> {
    let chain = CertificateDer::pem_slice_iter(cert_pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|err| TlsError::Pem {
            what: "certificate",
            message: err.to_string(),
        })?;
    if chain.is_empty() {
        return Err(TlsError::Pem {
            what: "certificate",
            message: "no CERTIFICATE block".into(),
        });
    }
    let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes()).map_err(|err| TlsError::Pem {
        what: "private key",
        message: err.to_string(),
    })?;
    Ok(CertifiedKey::from_der(chain, key, &provider())?)
}

/// The certificate served now; none until the first one is loaded (handshakes fail until
/// then, which the API server reports as a failed call: the binding's failure policy decides).
#[derive(Debug, Default)]
pub struct ServingCert {
    current: RwLock<Option<(String, Arc<CertifiedKey>)>>,
}

impl ServingCert {
    /// Serves `cert_pem` with `key_pem` from the next handshake on; the same certificate
    /// again changes nothing. Returns whether it changed.
    pub fn set(&self, cert_pem: &str, key_pem: &str) -> Result<bool, TlsError> {
        if self
            .current
            .read()
            .ok()
            .and_then(|c| c.as_ref().map(|(pem, _)| pem == cert_pem))
            .unwrap_or(false)
        {
            return Ok(false);
        }
        let key = Arc::new(certified_key(cert_pem, key_pem)?);
        if let Ok(mut current) = self.current.write() {
            *current = Some((cert_pem.to_string(), key));
        }
        Ok(true)
    }

    /// Whether a certificate is loaded.
    pub fn is_loaded(&self) -> bool {
        self.current.read().map(|c| c.is_some()).unwrap_or(false)
    }

    /// A TLS server configuration that serves whatever this holds at each handshake.
    pub fn server_config(self: &Arc<Self>) -> Result<ServerConfig, TlsError> {
        let mut config = ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_cert_resolver(Arc::clone(self) as Arc<dyn ResolvesServerCert>);
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(config)
    }
}

impl ResolvesServerCert for ServingCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.current
            .read()
            .ok()
            .and_then(|c| c.as_ref().map(|(_, key)| Arc::clone(key)))
    }
}

/// What `--webhook-cert-dir` holds, in the layout of a `kubernetes.io/tls` Secret mounted as a
/// volume (cert-manager's): `tls.crt`, `tls.key` and, optionally, `ca.crt`, the bundle the host
/// patches into its configurations (without it they keep whatever `caBundle` they have, for a
/// CA injector to set).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertDir {
    /// The serving certificate (and chain).
    pub cert_pem: String,
    /// Its key.
    pub key_pem: String,
    /// The CA bundle, if the directory has one.
    pub ca_pem: Option<String>,
}

impl CertDir {
    /// Reads the three files of `dir` (through the symlinks a Secret volume swaps atomically).
    pub fn read(dir: &Path) -> Result<Self, TlsError> {
        let read = |name: &str| {
            let path = dir.join(name);
            std::fs::read_to_string(&path).map_err(|source| TlsError::Read { path, source })
        };
        let ca_pem = match read("ca.crt") {
            Ok(ca) => Some(ca),
            Err(TlsError::Read { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
                None
            }
            Err(err) => return Err(err),
        };
        Ok(Self {
            cert_pem: read("tls.crt")?,
            key_pem: read("tls.key")?,
            ca_pem,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::webhook::certs::{self, Step, Timing};

    fn material() -> certs::Material {
        certs::perform(
            Step::Create,
            None,
            1_800_000_000,
            &Timing::default(),
            &["wasmop.wasmop-system.svc".into(), "127.0.0.1".into()],
        )
        .expect("made")
        .expect("some")
    }

    #[test]
    fn a_made_certificate_is_served_and_set_twice_changes_nothing() {
        let m = material();
        let serving = ServingCert::default();
        assert!(!serving.is_loaded());
        assert!(
            serving
                .set(&m.leaf.cert_pem, &m.leaf.key_pem)
                .expect("loads")
        );
        assert!(
            !serving
                .set(&m.leaf.cert_pem, &m.leaf.key_pem)
                .expect("loads")
        );
        assert!(serving.is_loaded());
    }

    #[test]
    fn a_key_of_another_certificate_is_refused_and_the_old_one_stays() {
        let (a, b) = (material(), material());
        let serving = ServingCert::default();
        serving
            .set(&a.leaf.cert_pem, &a.leaf.key_pem)
            .expect("loads");
        let err = serving
            .set(&b.leaf.cert_pem, &a.leaf.key_pem)
            .expect_err("mismatched");
        assert!(matches!(err, TlsError::Key(_)), "{err}");
        assert!(serving.is_loaded());
        let garbage = certified_key("not pem", "nor this").expect_err("refused");
        assert!(garbage.to_string().contains("certificate"), "{garbage}");
    }

    #[test]
    fn a_cert_dir_without_a_bundle_reads() {
        let m = material();
        let dir = std::env::temp_dir().join(format!("wasmop-certdir-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        std::fs::write(dir.join("tls.crt"), &m.leaf.cert_pem).expect("write");
        std::fs::write(dir.join("tls.key"), &m.leaf.key_pem).expect("write");
        let read = CertDir::read(&dir).expect("reads");
        assert_eq!(read.ca_pem, None);
        std::fs::write(dir.join("ca.crt"), &m.ca.cert_pem).expect("write");
        assert_eq!(
            CertDir::read(&dir).expect("reads").ca_pem.as_deref(),
            Some(m.ca.cert_pem.as_str())
        );
        std::fs::remove_file(dir.join("tls.key")).expect("rm");
        assert!(matches!(CertDir::read(&dir), Err(TlsError::Read { .. })));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
