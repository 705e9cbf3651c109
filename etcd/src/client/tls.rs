//! TLS to the members (`etcds://`): rustls with the *ring* provider, and a watch on what a
//! member makes of this client's certificate.
//!
//! Over TLS 1.3 a member checks the client's certificate only after the client has finished
//! its side of the handshake. By then the client has sent its first request; a member that
//! refuses the certificate (or its absence) sends an alert and closes a connection with that
//! request unread, and the kernel may answer the unread bytes with a reset that drops the
//! alert before the client reads it. The refusal then looks like a connection that closed,
//! which is worth trying again, and the caller would retry for as long as it may. What
//! tells the two apart: the member asked for a client certificate in the handshake and
//! closed (or alerted) before it said anything over the connection. An HTTP/2 server's
//! first words are its settings, sent as soon as the handshake is done, so a member that
//! accepted the certificate has always said something first. [`Watch`] records such a
//! refusal, which the client reports in the same words with or without the alert.
//!
//! A TLS-terminating proxy in front of a member (`haproxy`, nginx's stream module,
//! ghostunnel) whose member is down completes the handshake and closes the same way, and so
//! does a member that crashes right after one: a verdict is one member's, and the client
//! goes on to the next member, reporting a refusal only once every member has refused.

use rustls::client::ResolvesClientCert;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::sign::CertifiedKey;
use rustls::{ClientConfig, RootCertStore, SignatureScheme};
use std::fmt;
use std::future::Future;
use std::io;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;
use tonic::codegen::http::Uri;

use super::endpoints::Tls;

/// How a member refused this client's certificate, learned from the connection itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Refusal {
    /// It asked for a client certificate, this client had none, and it closed.
    NoCertificate,
    /// It asked for a client certificate, this client sent its own, and it closed.
    Certificate,
}

impl Refusal {
    /// What to change, as the end of the refused call's message.
    pub(super) fn what_to_fix(self) -> &'static str {
        match self {
            Refusal::NoCertificate => {
                ": the member requires a client certificate and the etcds:// URL gives none: add \
                 cert= and key= (a certificate signed by a CA the member trusts)"
            }
            Refusal::Certificate => {
                ": the member refused this client's certificate (cert=): give one signed by a CA \
                 the member trusts (its --trusted-ca-file)"
            }
        }
    }

    const NONE: u8 = 0;

    fn code(self) -> u8 {
        match self {
            Refusal::NoCertificate => 1,
            Refusal::Certificate => 2,
        }
    }

    fn from_code(code: u8) -> Option<Refusal> {
        match code {
            1 => Some(Refusal::NoCertificate),
            2 => Some(Refusal::Certificate),
            _ => None,
        }
    }
}

/// The last refusal a member's connections met, until the client takes it: before each
/// attempt on the member and after it, so that a verdict speaks of one attempt alone.
#[derive(Debug, Clone, Default)]
pub(super) struct Verdict(Arc<AtomicU8>);

impl Verdict {
    /// The refusal recorded since the last take, if any, and forgets it.
    pub(super) fn take(&self) -> Option<Refusal> {
        Refusal::from_code(self.0.swap(Refusal::NONE, Ordering::AcqRel))
    }

    fn record(&self, refusal: Refusal) {
        self.0.store(refusal.code(), Ordering::Release);
    }
}

/// The rustls settings of an `etcds://` URL, its files read: the CA or the system's roots,
/// the client certificate if any, and HTTP/2 by ALPN.
///
/// # Errors
///
/// A file that cannot be read or used, named with the option that gives it.
pub(super) fn config(tls: &Tls) -> Result<Arc<ClientConfig>, String> {
    let read = |what: &str, path: &Path| {
        std::fs::read(path).map_err(|error| format!("cannot read {what} {}: {error}", path.display()))
    };
    let unusable = |what: &str, path: &Path, why: &dyn fmt::Display| {
        format!("cannot use the TLS files: {what} {}: {why}", path.display())
    };
    let certificates = |what: &str, path: &Path| -> Result<Vec<CertificateDer<'static>>, String> {
        let chain = CertificateDer::pem_slice_iter(&read(what, path)?)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|error| unusable(what, path, &error))?;
        if chain.is_empty() {
            return Err(unusable(what, path, &"it holds no PEM certificate"));
        }
        Ok(chain)
    };
    let mut roots = RootCertStore::empty();
    if let Some(ca) = &tls.ca {
        let what = "the CA certificate (cacert)";
        for certificate in certificates(what, ca)? {
            roots
                .add(certificate)
                .map_err(|error| unusable(what, ca, &error))?;
        }
    } else {
        roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
        if roots.is_empty() {
            return Err(
                "cannot use the TLS files: the URL names no CA (cacert=) and this system \
                        has no trusted root certificate"
                    .to_owned(),
            );
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|error| format!("cannot use the TLS files: {error}"))?
        .with_root_certificates(roots);
    let mut config = match &tls.identity {
        None => builder.with_no_client_auth(),
        Some((cert, key)) => {
            let chain = certificates("the client certificate (cert)", cert)?;
            let what = "the client key (key)";
            let key = PrivateKeyDer::from_pem_slice(&read(what, key)?).map_err(|error| match error {
                rustls::pki_types::pem::Error::NoItemsFound => {
                    unusable(what, key, &"it holds no PEM private key")
                }
                error => unusable(what, key, &error),
            })?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|error| format!("cannot use the TLS files: cert= and key=: {error}"))?
        }
    };
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(Arc::new(config))
}

/// Connects to one member over TLS, for a tonic channel: each connection is watched for a
/// refusal of the client's certificate, recorded in the member's [`Verdict`].
#[derive(Clone)]
pub(super) struct Connector {
    config: Arc<ClientConfig>,
    host: ServerName<'static>,
    address: String,
    verdict: Verdict,
}

impl Connector {
    /// A connector to `host` at `address` (`host:port`) with `config`, whose refusals go to
    /// `verdict`.
    ///
    /// # Errors
    ///
    /// `host` is neither a DNS name nor an IP address.
    pub(super) fn new(
        config: Arc<ClientConfig>,
        host: &str,
        address: String,
        verdict: Verdict,
    ) -> Result<Connector, String> {
        let host = ServerName::try_from(host.to_owned())
            .map_err(|_| format!("{host:?} is neither a DNS name nor an IP address"))?;
        Ok(Connector {
            config,
            host,
            address,
            verdict,
        })
    }
}

impl tonic::codegen::Service<Uri> for Connector {
    type Response = hyper_util::rt::TokioIo<Watch>;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = io::Result<Self::Response>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: Uri) -> Self::Future {
        let Connector {
            config,
            host,
            address,
            verdict,
        } = self.clone();
        Box::pin(async move {
            let tcp = TcpStream::connect(&address).await?;
            tcp.set_nodelay(true)?;
            // A settings copy per connection, so that what the handshake saw is its own.
            let asked = Arc::new(AtomicU8::new(Refusal::NONE));
            let mut config = ClientConfig::clone(&config);
            config.client_auth_cert_resolver = Arc::new(Noting {
                inner: config.client_auth_cert_resolver.clone(),
                asked: asked.clone(),
            });
            match TlsConnector::from(Arc::new(config)).connect(host, tcp).await {
                Ok(stream) => {
                    if stream.get_ref().1.alpn_protocol() != Some(b"h2") {
                        return Err(io::Error::other("the member did not agree to HTTP/2 (by ALPN)"));
                    }
                    Ok(hyper_util::rt::TokioIo::new(Watch {
                        stream,
                        asked,
                        heard: false,
                        verdict,
                    }))
                }
                Err(error) => Err(unheard_failure(&asked, &verdict, error)),
            }
        })
    }
}

/// The client-certificate resolver of one connection: notes that the member asked, and
/// whether a certificate went back.
#[derive(Debug)]
struct Noting {
    inner: Arc<dyn ResolvesClientCert>,
    asked: Arc<AtomicU8>,
}

impl ResolvesClientCert for Noting {
    fn resolve(&self, hints: &[&[u8]], schemes: &[SignatureScheme]) -> Option<Arc<CertifiedKey>> {
        let answer = self.inner.resolve(hints, schemes);
        let refusal = if answer.is_some() {
            Refusal::Certificate
        } else {
            Refusal::NoCertificate
        };
        self.asked.store(refusal.code(), Ordering::Release);
        answer
    }

    fn has_certs(&self) -> bool {
        self.inner.has_certs()
    }
}

/// `error`, from a connection on which the member has not said a word, after recording
/// in `verdict` a refusal where it is one: the member asked for a certificate (`asked`
/// holds what went back) and the connection failed by the member's hand (closed, reset,
/// or an alert), not because this client refused the member's certificate.
fn unheard_failure(asked: &AtomicU8, verdict: &Verdict, error: io::Error) -> io::Error {
    let by_the_member = match error
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
    {
        Some(rustls::Error::AlertReceived(_)) | None => true,
        Some(_) => false,
    };
    if by_the_member && let Some(refusal) = Refusal::from_code(asked.load(Ordering::Acquire)) {
        verdict.record(refusal);
    }
    error
}

/// A TLS connection to a member that records a refusal of the client's certificate: a
/// member that asked for one and then failed the connection before it sent a byte.
pub(super) struct Watch {
    stream: TlsStream<TcpStream>,
    /// What the member asked and got back, as a [`Refusal`]'s code.
    asked: Arc<AtomicU8>,
    /// Whether the member has said anything over the connection.
    heard: bool,
    verdict: Verdict,
}

impl Watch {
    /// `error` from the connection, a refusal recorded where it is one.
    fn failed(&self, error: io::Error) -> io::Error {
        if self.heard {
            error
        } else {
            unheard_failure(&self.asked, &self.verdict, error)
        }
    }

    fn stream(&mut self) -> Pin<&mut TlsStream<TcpStream>> {
        Pin::new(&mut self.stream)
    }
}

impl AsyncRead for Watch {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        match self.stream().poll_read(cx, buf) {
            Poll::Ready(Ok(())) if buf.filled().len() > before => {
                self.heard = true;
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Ok(())) => {
                let _ = self.failed(io::ErrorKind::UnexpectedEof.into());
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(error)) => Poll::Ready(Err(self.failed(error))),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl AsyncWrite for Watch {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        match self.stream().poll_write(cx, buf) {
            Poll::Ready(Err(error)) => Poll::Ready(Err(self.failed(error))),
            other => other,
        }
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.stream().poll_flush(cx) {
            Poll::Ready(Err(error)) => Poll::Ready(Err(self.failed(error))),
            other => other,
        }
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.stream().poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    //! The rule against a member played by an in-process TLS server that fails each
    //! connection the same way every time: a reset straight after the handshake (the alert
    //! lost), with or without having asked for a client certificate, and with or without
    //! having said a word first.

    use super::super::{CallError, Client};
    use super::*;
    use atomflake_test_servers::pki::{Pki, has_openssl};
    use rustls::ServerConfig;
    use rustls::server::WebPkiClientVerifier;
    use std::time::{Duration, Instant};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// How the played member treats a connection once its handshake is done.
    #[derive(Clone, Copy)]
    struct Member {
        /// Whether it asks for a client certificate (and takes the connection without one).
        asks: bool,
        /// Whether it sends its HTTP/2 settings before it resets the connection.
        speaks: bool,
    }

    /// A member that asks for a client certificate and resets in silence: a refusal.
    const REFUSES: Member = Member {
        asks: true,
        speaks: false,
    };

    /// A member that does not ask for a client certificate and resets in silence: a
    /// connection that failed.
    const RESETS: Member = Member {
        asks: false,
        speaks: false,
    };

    /// Plays `member` on a free loopback port, on a thread of its own, with the member
    /// certificate of `pki`: the port.
    fn play(pki: &Pki, member: Member) -> u16 {
        let (cert, key) = (pki.path("member.crt"), pki.path("member.key"));
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .unwrap();
        let builder = if member.asks {
            let mut roots = RootCertStore::empty();
            let ca = std::fs::read(pki.path("ca.pem")).unwrap();
            roots.add(CertificateDer::from_pem_slice(&ca).unwrap()).unwrap();
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .allow_unauthenticated()
                .build()
                .unwrap();
            builder.with_client_cert_verifier(verifier)
        } else {
            builder.with_no_client_auth()
        };
        let chain = CertificateDer::pem_file_iter(&cert)
            .unwrap()
            .collect::<Result<Vec<_>, _>>()
            .unwrap();
        let mut config = builder
            .with_single_cert(chain, PrivateKeyDer::from_pem_file(&key).unwrap())
            .unwrap();
        config.alpn_protocols = vec![b"h2".to_vec()];
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));

        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        listener.set_nonblocking(true).unwrap();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).unwrap();
                while let Ok((tcp, _)) = listener.accept().await {
                    let Ok(mut tls) = acceptor.accept(tcp).await else {
                        continue;
                    };
                    if member.speaks {
                        // An empty SETTINGS frame (length 0, type 4, no flags, stream 0); then
                        // what the client sends is read until it falls quiet, and the
                        // connection closed in order, so that no reset can drop the frame.
                        let _ = tls.write_all(&[0, 0, 0, 4, 0, 0, 0, 0, 0]).await;
                        let _ = tls.flush().await;
                        let mut sink = [0; 4096];
                        while let Ok(Ok(read)) =
                            tokio::time::timeout(Duration::from_millis(300), tls.read(&mut sink)).await
                        {
                            if read == 0 {
                                break;
                            }
                        }
                        let _ = tls.shutdown().await;
                        continue;
                    }
                    let (tcp, _) = tls.into_inner();
                    // A reset: what the kernel sends for a request left unread.
                    let _ = tcp.set_zero_linger();
                }
            });
        });

        port
    }

    /// The error of one call to a cluster of members played as `members`, in that order, by
    /// a client that presents the client certificate when `with_certificate`, and how long
    /// the call took; the call may take 3 s, each attempt 1 s.
    fn call(test: &str, members: &[Member], with_certificate: bool) -> Option<(CallError, Duration)> {
        if !has_openssl(test) {
            return None;
        }
        let pki = Pki::temporary(test);
        pki.ca("ca");
        pki.leaf("member", "ca", "127.0.0.1", "IP:127.0.0.1");
        pki.leaf("client", "ca", "app", "");
        let ports: Vec<String> = members
            .iter()
            .map(|&member| format!("127.0.0.1:{}", play(&pki, member)))
            .collect();
        let ca = pki.path("ca.pem");
        let query = if with_certificate {
            let (cert, key) = (pki.path("client.crt"), pki.path("client.key"));
            format!(
                "cacert={}&cert={}&key={}",
                ca.display(),
                cert.display(),
                key.display()
            )
        } else {
            format!("cacert={}", ca.display())
        };
        let endpoints = format!("etcds://{}?{query}", ports.join(",")).parse().unwrap();
        let mut client = Client::new(&endpoints, Duration::from_secs(1), "/atomflake/").unwrap();
        let start = Instant::now();
        let error = client.grant(10, Duration::from_secs(3)).unwrap_err();
        Some((error, start.elapsed()))
    }

    /// Fails unless `error` is the refusal that ends with `what_to_fix`, met at once.
    fn assert_refused((error, took): (CallError, Duration), what_to_fix: &str) {
        assert!(error.refused, "taken as transient: {error}");
        assert!(error.text.ends_with(what_to_fix), "{error}");
        assert!(
            took < Duration::from_secs(1),
            "the refusal took {took:?}: {error}"
        );
    }

    /// Fails unless `error` is a transient failure, tried again until the call's time was
    /// nearly up (the last attempt is not begun with less than a quarter of one left).
    fn assert_transient((error, took): (CallError, Duration)) {
        assert!(!error.refused, "taken as a refusal: {error}");
        assert!(took >= Duration::from_secs(2), "given up after {took:?}: {error}");
    }

    /// Files that hold no certificate or no key are refused, named with their option.
    #[test]
    fn tls_files_without_a_certificate_or_a_key_are_named() {
        if !has_openssl("tls-files") {
            return;
        }
        let pki = Pki::temporary("tls-files");
        pki.ca("ca");
        pki.leaf("client", "ca", "app", "");
        let empty = pki.path("empty.pem");
        std::fs::write(&empty, "not a PEM file\n").unwrap();
        let error = |ca: &Path, key: &Path| {
            let tls = Tls {
                ca: Some(ca.to_owned()),
                identity: Some((pki.path("client.crt"), key.to_owned())),
            };
            config(&tls).unwrap_err()
        };
        assert_eq!(
            error(&empty, &pki.path("client.key")),
            format!(
                "cannot use the TLS files: the CA certificate (cacert) {}: it holds no PEM certificate",
                empty.display()
            )
        );
        assert_eq!(
            error(&pki.path("ca.pem"), &empty),
            format!(
                "cannot use the TLS files: the client key (key) {}: it holds no PEM private key",
                empty.display()
            )
        );
    }

    #[test]
    fn a_member_that_asks_for_a_certificate_and_resets_in_silence_refuses_the_clients() {
        if let Some(result) = call("tls-ask-none", &[REFUSES], false) {
            assert_refused(result, Refusal::NoCertificate.what_to_fix());
        }
        if let Some(result) = call("tls-ask-cert", &[REFUSES], true) {
            assert_refused(result, Refusal::Certificate.what_to_fix());
        }
    }

    #[test]
    fn a_reset_is_transient_where_the_member_did_not_ask_or_had_spoken() {
        if let Some(result) = call("tls-no-ask", &[RESETS], true) {
            assert_transient(result);
        }
        if let Some(result) = call(
            "tls-spoke",
            &[Member {
                asks: true,
                speaks: true,
            }],
            false,
        ) {
            assert_transient(result);
        }
    }

    /// A refusal from one member is not the cluster's: the call goes on to the others, and
    /// is a refusal only when every member refused it; while one fails otherwise, it is
    /// tried again until its time is up, as a transient failure. A proxy that terminates
    /// TLS and closes once its own member is down looks like a refusal to this client.
    #[test]
    fn a_refusal_is_reported_only_when_every_member_refused() {
        if let Some(result) = call("tls-refuses-then-resets", &[REFUSES, RESETS], true) {
            assert_transient(result);
        }
        if let Some(result) = call("tls-resets-then-refuses", &[RESETS, REFUSES], true) {
            assert_transient(result);
        }
        if let Some(result) = call("tls-all-refuse", &[REFUSES, REFUSES, REFUSES], true) {
            assert_refused(result, Refusal::Certificate.what_to_fix());
        }
    }

    /// A refusal that a member's connection met outside the call that meets the member next
    /// (a connection of an earlier call, failing while the client waited on another member)
    /// is not that call's: after a success, a call that the member fails to answer in time
    /// is transient. Against a real etcd that speaks TLS only and requires client
    /// certificates.
    #[test]
    fn a_refusal_met_before_a_success_is_not_reported_after_it() {
        let test = "tls-verdict-after-success";
        let Some((cluster, pki)) = atomflake_test_servers::etcd::secure(test, 1, Vec::new()) else {
            return;
        };
        let endpoints = format!(
            "etcds://127.0.0.1:{}?cacert={}&cert={}&key={}",
            cluster.client_port(0),
            pki.path("ca.pem").display(),
            pki.path("client.crt").display(),
            pki.path("client.key").display()
        )
        .parse()
        .unwrap();
        let mut client = Client::new(&endpoints, Duration::from_secs(1), "/atomflake/").unwrap();
        client.verdicts[0].record(Refusal::Certificate);
        client.grant(10, Duration::from_secs(3)).unwrap();
        cluster.freeze(0);
        let start = Instant::now();
        let error = client.grant(10, Duration::from_secs(3)).unwrap_err();
        let took = start.elapsed();
        cluster.thaw(0);
        assert_transient((error, took));
    }
}
