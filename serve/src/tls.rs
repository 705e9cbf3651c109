//! TLS for the one port ([`Tls`]): rustls with the ring provider, HTTP/2 (gRPC) and
//! HTTP/1.1 chosen by ALPN, a certificate that is reloaded without dropping connections,
//! and optional client certificates, checked again on open connections at each reload and
//! whose connections end when they expire.

use crate::metrics::Closed;
use rustls::RootCertStore;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, UnixTime};
use rustls::server::danger::ClientCertVerifier;
use rustls::server::{ClientHello, ResolvesServerCert, ServerConfig, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::sync::watch;

/// Where a server's certificate and key are, and the CA of the client certificates it
/// requires, if any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// The certificate chain, PEM: the server's certificate first.
    pub cert: PathBuf,
    /// Its private key, PEM (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
    /// The CA whose client certificates are required, PEM; `None`: none are asked for.
    pub client_ca: Option<PathBuf>,
}

/// The server side of TLS: the rustls configuration that every new connection uses, which
/// [`reload`](Tls::reload) makes afresh from the files (the certificate, its key and the
/// client CA) for the connections after it. A connection keeps the certificate it was
/// opened with; its client's certificate, when the server asks for one, is checked again
/// against the client CA of each reload, and the connection is closed once that CA no
/// longer trusts it, or once the certificate's `notAfter` passes.
#[derive(Debug, Clone)]
pub struct Tls {
    files: TlsFiles,
    /// What the files held at the last reload: read by each handshake, watched by each
    /// connection that presented a client certificate.
    config: Arc<watch::Sender<Config>>,
}

/// The configuration of one reading of the files.
#[derive(Debug, Clone)]
pub(crate) struct Config {
    server: Arc<ServerConfig>,
    /// The verifier of client certificates made from the client CA, if one is asked for.
    clients: Option<Arc<dyn ClientCertVerifier>>,
}

/// A connection's watch on the client CA: made before its handshake, so that no reload
/// after the configuration it was opened with goes unseen.
#[derive(Debug)]
pub(crate) struct Trust(watch::Receiver<Config>);

impl Trust {
    /// Completes, with why, once `chain` (the certificates the connection's client
    /// presented, its own first) no longer authenticates the connection: its own
    /// certificate expires ([`Closed::Expired`], the second after its `notAfter`), or a
    /// reload brings a client CA that does not trust it now ([`Closed::Untrusted`]). Never
    /// when there is no chain (no client certificate asked for).
    pub(crate) async fn ended(self, chain: Option<Vec<CertificateDer<'static>>>) -> Closed {
        let Some((own, intermediates)) = chain.as_deref().and_then(<[_]>::split_first) else {
            return std::future::pending().await;
        };
        tokio::select! {
            () = self.lost(own, intermediates) => Closed::Untrusted,
            () = expiry(own) => Closed::Expired,
        }
    }

    /// Completes once a reload brings a client CA that does not trust `own` (with
    /// `intermediates`) now; never when no reload comes.
    async fn lost(mut self, own: &CertificateDer<'_>, intermediates: &[CertificateDer<'_>]) {
        while self.0.changed().await.is_ok() {
            let clients = self.0.borrow_and_update().clients.clone();
            if let Some(clients) = clients
                && clients
                    .verify_client_cert(own, intermediates, UnixTime::now())
                    .is_err()
            {
                return;
            }
        }
        std::future::pending::<()>().await;
    }
}

/// Completes when `cert` has expired by the wall clock, as read now: at the second after
/// its `notAfter` (a certificate is valid through that second, RFC 5280 4.1.2.5; from the
/// next one the handshake's verifier refuses it too, so a client cannot reconnect with
/// it). At once when that is past; never when the certificate cannot be read, which the
/// verifier could.
async fn expiry(cert: &CertificateDer<'_>) {
    match expired_from(cert).map(|at| at.duration_since(SystemTime::now())) {
        Some(Ok(left)) => tokio::time::sleep(left).await,
        Some(Err(_passed)) => {}
        None => std::future::pending().await,
    }
}

/// The second after `cert`'s `notAfter`, from which it has expired: `None` when it is not
/// an X.509 certificate in DER.
fn expired_from(cert: &CertificateDer<'_>) -> Option<SystemTime> {
    use x509_cert::der::Decode;
    let cert = x509_cert::Certificate::from_der(cert).ok()?;
    let not_after = cert.tbs_certificate.validity.not_after.to_unix_duration();
    Some(UNIX_EPOCH + not_after + Duration::from_secs(1))
}

/// One certificate, for every handshake of the configuration that holds it.
#[derive(Debug)]
struct Fixed(Arc<CertifiedKey>);

impl ResolvesServerCert for Fixed {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(Arc::clone(&self.0))
    }
}

impl Tls {
    /// Reads `files` and makes the configuration: TLS 1.2 and 1.3, ALPN `h2` and
    /// `http/1.1`, client certificates required and verified against `client_ca` when
    /// given.
    ///
    /// # Errors
    ///
    /// A file that cannot be read, holds no certificate or key, or a key that is not the
    /// certificate's; each names the file.
    pub fn new(files: TlsFiles) -> Result<Tls, String> {
        let config = server_config(&files)?;
        Ok(Tls {
            files,
            config: Arc::new(watch::Sender::new(config)),
        })
    }

    /// Reads the files again (the certificate, its key and the client CA); the
    /// connections opened after use them, and the open connections whose client
    /// certificate the client CA read no longer trusts are closed (gracefully: the
    /// requests under way get a second to finish). On an error what is in use stays.
    ///
    /// # Errors
    ///
    /// As [`Tls::new`]'s.
    pub fn reload(&self) -> Result<(), String> {
        let config = server_config(&self.files)?;
        self.config.send_replace(config);
        Ok(())
    }

    /// The files it was made from.
    pub fn files(&self) -> &TlsFiles {
        &self.files
    }

    /// Reloads whenever the certificate's, the key's or the client CA's file changes
    /// (looked at every second), on a task of the current runtime, and logs each reload or
    /// failure.
    pub fn watch_files(&self) -> tokio::task::JoinHandle<()> {
        let tls = self.clone();
        let files = [
            Some(&self.files.cert),
            Some(&self.files.key),
            self.files.client_ca.as_ref(),
        ];
        let files: Vec<PathBuf> = files.into_iter().flatten().cloned().collect();
        crate::reload::watch_files(files, move || {
            tls.reload_logged("a file changed");
        })
    }

    /// [`Tls::reload`], logged with `why`.
    pub fn reload_logged(&self, why: &str) {
        match self.reload() {
            Ok(()) => tracing::info!(
                target: "atomflake serve",
                event = "tls_reloaded",
                cert = %self.files.cert.display(),
                "TLS certificate reloaded ({why}): {}",
                self.files.cert.display()
            ),
            Err(error) => tracing::error!(
                target: "atomflake serve",
                event = "tls_reload_failed",
                %error,
                "TLS certificate not reloaded ({why}), the one in use stays: {error}"
            ),
        }
    }

    /// An acceptor for one connection's handshake, and the connection's watch on the
    /// client CA of the reloads after it.
    pub(crate) fn acceptor(&self) -> (tokio_rustls::TlsAcceptor, Trust) {
        let trust = Trust(self.config.subscribe());
        let server = Arc::clone(&trust.0.borrow().server);
        (tokio_rustls::TlsAcceptor::from(server), trust)
    }
}

/// The configuration of `files`, each read now.
fn server_config(files: &TlsFiles) -> Result<Config, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let key = Arc::new(certified_key(files, &provider)?);
    let builder = ServerConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .map_err(|error| format!("cannot set up TLS: {error}"))?;
    let mut clients = None;
    let builder = match &files.client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let mut roots = RootCertStore::empty();
            for cert in certificates(ca, "--tls-client-ca")? {
                roots
                    .add(cert)
                    .map_err(|error| format!("--tls-client-ca {}: {error}", ca.display()))?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|error| format!("--tls-client-ca {}: {error}", ca.display()))?;
            clients = Some(Arc::clone(&verifier));
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut server = builder.with_cert_resolver(Arc::new(Fixed(key)));
    server.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Config {
        server: Arc::new(server),
        clients,
    })
}

/// The PEM certificates in `path`, at least one.
pub(crate) fn certificates(path: &Path, option: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    let shown = path.display();
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(Iterator::collect::<Result<Vec<_>, _>>)
        .map_err(|error| format!("{option} {shown}: {error}"))?;
    if certs.is_empty() {
        return Err(format!("{option} {shown}: no PEM certificate in it"));
    }
    Ok(certs)
}

/// The certificate chain and key of `files`, checked to belong together.
fn certified_key(files: &TlsFiles, provider: &CryptoProvider) -> Result<CertifiedKey, String> {
    let chain = certificates(&files.cert, "--tls-cert")?;
    let key_file = files.key.display();
    let key = PrivateKeyDer::from_pem_file(&files.key).map_err(|error| match error {
        rustls::pki_types::pem::Error::NoItemsFound => {
            format!("--tls-key {key_file}: no PEM private key in it")
        }
        error => format!("--tls-key {key_file}: {error}"),
    })?;
    let signing = provider
        .key_provider
        .load_private_key(key)
        .map_err(|error| format!("--tls-key {key_file}: {error}"))?;
    let certified = CertifiedKey::new(chain, signing);
    certified.keys_match().map_err(|_| {
        format!(
            "--tls-key {key_file} is not the key of --tls-cert {}",
            files.cert.display()
        )
    })?;
    Ok(certified)
}
