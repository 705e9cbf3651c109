//! The TLS side of a [`Database`](super::Database): libpq's modes, the root and client
//! certificates, and the server-certificate check of the modes that do not check names.

use super::ConfigError;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::ParsedCertificate;
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;

/// How a connection uses TLS: libpq's `sslmode` (see the [module docs](super)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SslMode {
    /// Never TLS.
    Disable,
    /// TLS when the server offers it (tried first, as [`Prefer`](Self::Prefer)).
    Allow,
    /// TLS when the server offers it; libpq's default.
    Prefer,
    /// Always TLS; the certificate is checked only against a root certificate given.
    Require,
    /// Always TLS, with a certificate signed by the root certificate.
    VerifyCa,
    /// Always TLS, with a certificate signed by the root certificate for the host
    /// connected to.
    VerifyFull,
}

impl SslMode {
    pub(super) const ALL: [SslMode; 6] = [
        SslMode::Disable,
        SslMode::Allow,
        SslMode::Prefer,
        SslMode::Require,
        SslMode::VerifyCa,
        SslMode::VerifyFull,
    ];

    /// Its name in a connection string.
    pub fn as_str(self) -> &'static str {
        match self {
            SslMode::Disable => "disable",
            SslMode::Allow => "allow",
            SslMode::Prefer => "prefer",
            SslMode::Require => "require",
            SslMode::VerifyCa => "verify-ca",
            SslMode::VerifyFull => "verify-full",
        }
    }

    /// Whether a connection in this mode is refused unless it is TLS.
    pub fn requires_tls(self) -> bool {
        matches!(self, SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull)
    }

    /// Whether the server's certificate must be signed by a root certificate.
    fn verifies(self) -> bool {
        matches!(self, SslMode::VerifyCa | SslMode::VerifyFull)
    }
}

impl fmt::Display for SslMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for SslMode {
    type Err = ConfigError;

    fn from_str(value: &str) -> Result<SslMode, ConfigError> {
        SslMode::ALL
            .into_iter()
            .find(|mode| mode.as_str() == value)
            .ok_or_else(|| ConfigError::SslMode {
                value: value.to_owned(),
            })
    }
}

/// Where the root certificates come from.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RootCert {
    /// A PEM file of one or more certificates.
    File(PathBuf),
    /// The system's trusted roots (`sslrootcert=system`).
    System,
}

/// The TLS settings of a [`Database`](super::Database).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Tls {
    pub(super) mode: SslMode,
    pub(super) root: Option<RootCert>,
    /// The client certificate and its key.
    pub(super) client: Option<(PathBuf, PathBuf)>,
}

impl Tls {
    /// The rustls settings, read from the files now.
    pub(super) fn rustls_config(&self) -> Result<ClientConfig, ConfigError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let algorithms = provider.signature_verification_algorithms;
        let roots = self.roots()?;
        let builder = ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(tls_error)?;
        let builder = match (self.mode, roots) {
            (SslMode::VerifyFull, Some(roots)) => builder.with_root_certificates(roots),
            (mode, None) if mode.verifies() => {
                return Err(ConfigError::NoRootCert {
                    mode,
                    default: default_root_cert().unwrap_or_else(|| PathBuf::from("~/.postgresql/root.crt")),
                });
            }
            (_, roots) => builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(CertCheck { roots, algorithms })),
        };
        let mut config = match &self.client {
            None => builder.with_no_client_auth(),
            Some((cert, key)) => {
                let chain = CertificateDer::pem_file_iter(cert)
                    .and_then(Iterator::collect::<Result<Vec<_>, _>>)
                    .map_err(|err| file_error("sslcert", cert, &err))?;
                if chain.is_empty() {
                    return Err(no_certificate("sslcert", cert));
                }
                let key = PrivateKeyDer::from_pem_file(key).map_err(|err| file_error("sslkey", key, &err))?;
                builder.with_client_auth_cert(chain, key).map_err(tls_error)?
            }
        };
        // What PostgreSQL 17 asks of a direct TLS connection; earlier servers ignore it.
        config.alpn_protocols = vec![b"postgresql".to_vec()];
        Ok(config)
    }

    /// The root certificates to check the server's with, if any.
    fn roots(&self) -> Result<Option<RootCertStore>, ConfigError> {
        let mode = self.mode;
        let file = match &self.root {
            Some(RootCert::System) => {
                if mode != SslMode::VerifyFull {
                    return Err(ConfigError::SystemRootsNeedVerifyFull { mode });
                }
                let found = rustls_native_certs::load_native_certs();
                let mut roots = RootCertStore::empty();
                roots.add_parsable_certificates(found.certs);
                if roots.is_empty() {
                    return Err(ConfigError::Tls {
                        reason: "sslrootcert=system: no trusted root certificate found on this system"
                            .to_owned(),
                    });
                }
                return Ok(Some(roots));
            }
            Some(RootCert::File(path)) => path.clone(),
            None => match default_root_cert() {
                Some(path) if path.exists() => path,
                _ => return Ok(None),
            },
        };
        let certs = CertificateDer::pem_file_iter(&file)
            .and_then(Iterator::collect::<Result<Vec<_>, _>>)
            .map_err(|err| file_error("sslrootcert", &file, &err))?;
        let mut roots = RootCertStore::empty();
        let (_, refused) = roots.add_parsable_certificates(certs);
        if roots.is_empty() {
            return Err(if refused > 0 {
                ConfigError::File {
                    option: "sslrootcert",
                    path: file,
                    reason: format!("none of its {refused} certificates can be a root"),
                }
            } else {
                no_certificate("sslrootcert", &file)
            });
        }
        Ok(Some(roots))
    }
}

/// libpq's default root certificate file, `~/.postgresql/root.crt`.
fn default_root_cert() -> Option<PathBuf> {
    let home = std::env::var_os("HOME")?;
    Some(Path::new(&home).join(".postgresql/root.crt"))
}

fn file_error(option: &'static str, path: &Path, error: &rustls::pki_types::pem::Error) -> ConfigError {
    ConfigError::File {
        option,
        path: path.to_owned(),
        reason: match error {
            rustls::pki_types::pem::Error::Io(io) => io.to_string(),
            rustls::pki_types::pem::Error::NoItemsFound => "no PEM item of the kind needed".to_owned(),
            other => format!("not a PEM file ({other})"),
        },
    }
}

fn no_certificate(option: &'static str, path: &Path) -> ConfigError {
    ConfigError::File {
        option,
        path: path.to_owned(),
        reason: "holds no PEM certificate".to_owned(),
    }
}

#[expect(clippy::needless_pass_by_value, reason = "called as map_err(tls_error)")]
fn tls_error(error: rustls::Error) -> ConfigError {
    ConfigError::Tls {
        reason: error.to_string(),
    }
}

/// The server-certificate check of every mode but `verify-full` (which is rustls' own).
/// With `roots`, the certificate must chain to one of them, whatever names it holds
/// (libpq's `verify-ca`, and `require` or `prefer` with a root certificate at hand).
/// Without, it is taken as it is: TLS encrypts and nothing is authenticated (libpq's
/// `require` and `prefer` without a root certificate). Either way the handshake's
/// signatures are checked, so the server holds the key of the certificate it sent.
#[derive(Debug)]
struct CertCheck {
    roots: Option<RootCertStore>,
    algorithms: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for CertCheck {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        if let Some(roots) = &self.roots {
            let cert = ParsedCertificate::try_from(end_entity)?;
            rustls::client::verify_server_cert_signed_by_trust_anchor(
                &cert,
                roots,
                intermediates,
                now,
                self.algorithms.all,
            )?;
        }
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::database::Database;

    fn parse(text: &str) -> Result<Database, ConfigError> {
        text.parse()
    }

    #[test]
    fn every_libpq_mode_parses_and_an_unknown_one_names_the_allowed() {
        let missing = PathBuf::from("/nonexistent/root.pem");
        for mode in SslMode::ALL {
            let parsed = parse(&format!(
                "host=db sslmode={mode} sslrootcert={}",
                missing.display()
            ));
            if mode == SslMode::Disable {
                // No TLS: the file is never read.
                assert_eq!(parsed.unwrap().ssl_mode(), mode);
            } else {
                assert_eq!(
                    parsed.unwrap_err(),
                    ConfigError::File {
                        option: "sslrootcert",
                        path: missing.clone(),
                        reason: "No such file or directory (os error 2)".to_owned()
                    },
                    "{mode}"
                );
            }
        }
        let error = parse("host=db sslmode=verify").unwrap_err();
        assert_eq!(
            error.to_string(),
            "sslmode \"verify\" is invalid: allowed disable, allow, prefer, require, verify-ca, verify-full"
        );
    }
}
