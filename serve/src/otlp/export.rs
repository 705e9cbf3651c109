//! One export to the collector: OTLP/gRPC through the clients that tonic generates from
//! the OTLP protos (`opentelemetry-proto`), or OTLP/HTTP as a protobuf `POST`; TLS through
//! rustls with the ring provider, as the server's own.

use super::config::{OtlpError, Protocol, Target, TlsFiles};
use bytes::Bytes;
use http::header::{CONTENT_TYPE, HOST};
use http::{HeaderMap, HeaderName, HeaderValue, Request, Uri};
use http_body_util::{BodyExt as _, Full};
use hyper_util::rt::TokioIo;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_client::MetricsServiceClient;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;
use rustls::ClientConfig;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{PrivateKeyDer, ServerName};
use std::io;
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tonic::transport::{Channel, Endpoint};

/// A connection to the collector, plain or over TLS.
trait Io: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> Io for T {}

/// One signal's way to the collector.
#[derive(Clone, Debug)]
pub(crate) struct Exporter {
    target: Target,
    headers: HeaderMap,
    timeout: Duration,
    /// OTLP/gRPC's endpoint, and its channel (HTTP/2, reconnected as needed) once made
    /// on the runtime by the first export.
    grpc: Option<(Endpoint, Arc<OnceLock<Channel>>)>,
    tls: Option<Arc<ClientConfig>>,
}

impl Exporter {
    /// An exporter to `target`, sending `headers`, each export within `timeout`.
    pub(crate) fn new(
        target: &Target,
        headers: &[(String, String)],
        timeout: Duration,
        tls: &TlsFiles,
    ) -> Result<Exporter, OtlpError> {
        let mut map = HeaderMap::new();
        for (name, value) in headers {
            // The value holds credentials: the error names the header alone.
            let bad = || OtlpError {
                variable: "OTEL_EXPORTER_OTLP_HEADERS".to_owned(),
                value: format!("{name}=(not shown)"),
                allowed: "header names and values that HTTP allows".to_owned(),
            };
            let name = HeaderName::try_from(name.as_str()).map_err(|_| bad())?;
            let mut value = HeaderValue::try_from(value.as_str()).map_err(|_| bad())?;
            // Shown as `Sensitive` by `Debug`, and kept out of HTTP/2's header table.
            value.set_sensitive(true);
            map.append(name, value);
        }
        let tls = if target.url.scheme_str() == Some("https") {
            let alpn: &[u8] = match target.protocol {
                Protocol::Grpc => b"h2",
                Protocol::HttpProtobuf => b"http/1.1",
            };
            Some(Arc::new(client_config(tls, alpn)?))
        } else {
            None
        };
        let grpc = match target.protocol {
            Protocol::HttpProtobuf => None,
            Protocol::Grpc => {
                // The channel's own URL is plain: the connector makes the TLS.
                let authority = target.url.authority().map_or("", |authority| authority.as_str());
                let endpoint =
                    Endpoint::from_shared(format!("http://{authority}")).map_err(|_| OtlpError {
                        variable: "OTEL_EXPORTER_OTLP_ENDPOINT".to_owned(),
                        value: target.url.to_string(),
                        allowed: "an http:// or https:// URL with a host".to_owned(),
                    })?;
                Some((endpoint.timeout(timeout), Arc::new(OnceLock::new())))
            }
        };
        Ok(Exporter {
            target: target.clone(),
            headers: map,
            timeout,
            grpc,
            tls,
        })
    }

    /// The gRPC channel, made at the first call (on the runtime, which runs its worker).
    fn channel(&self) -> Option<Channel> {
        let (endpoint, channel) = self.grpc.as_ref()?;
        let channel = channel.get_or_init(|| {
            let tls = self.tls.clone();
            let connector = tower::service_fn(move |uri: Uri| {
                let tls = tls.clone();
                async move { connect(&uri, tls).await.map(TokioIo::new) }
            });
            endpoint.connect_with_connector_lazy(connector)
        });
        Some(channel.clone())
    }

    /// Sends `request` to the metrics service, within the timeout.
    pub(crate) async fn metrics(&self, request: ExportMetricsServiceRequest) -> Result<(), String> {
        let grpc = async |channel, call| MetricsServiceClient::new(channel).export(call).await.map(drop);
        self.send(request, grpc).await
    }

    /// Sends `request` to the trace service, within the timeout.
    pub(crate) async fn traces(&self, request: ExportTraceServiceRequest) -> Result<(), String> {
        let grpc = async |channel, call| TraceServiceClient::new(channel).export(call).await.map(drop);
        self.send(request, grpc).await
    }

    /// Sends `request` as `grpc` calls its service over the channel, or as an OTLP/HTTP
    /// post, within the timeout.
    async fn send<M: prost::Message>(
        &self,
        request: M,
        grpc: impl AsyncFnOnce(Channel, tonic::Request<M>) -> Result<(), tonic::Status>,
    ) -> Result<(), String> {
        self.within(async {
            match self.channel() {
                Some(channel) => grpc(channel, self.call(request))
                    .await
                    .map_err(|status| status.to_string()),
                None => self.post(request.encode_to_vec()).await,
            }
        })
        .await
    }

    async fn within(&self, export: impl Future<Output = Result<(), String>>) -> Result<(), String> {
        let url = &self.target.url;
        match tokio::time::timeout(self.timeout, export).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(error)) => Err(format!("the collector at {url}: {error}")),
            Err(_) => Err(format!(
                "the collector at {url} did not answer within {:?}",
                self.timeout
            )),
        }
    }

    /// `message` as a gRPC call with the headers as metadata.
    fn call<T>(&self, message: T) -> tonic::Request<T> {
        let mut request = tonic::Request::new(message);
        *request.metadata_mut() = tonic::metadata::MetadataMap::from_headers(self.headers.clone());
        request
    }

    /// `body` posted as `application/x-protobuf`, over a connection of its own (an
    /// export every few seconds at most).
    async fn post(&self, body: Vec<u8>) -> Result<(), String> {
        let url = &self.target.url;
        let io = connect(url, self.tls.clone())
            .await
            .map_err(|error| error.to_string())?;
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(io))
            .await
            .map_err(|error| error.to_string())?;
        let connection = tokio::spawn(connection);
        let mut request = Request::post(url.path_and_query().map_or("/", |path| path.as_str()))
            .header(CONTENT_TYPE, "application/x-protobuf")
            .body(Full::new(Bytes::from(body)))
            .map_err(|error| error.to_string())?;
        let headers = request.headers_mut();
        if let Some(authority) = url.authority() {
            headers.insert(
                HOST,
                HeaderValue::try_from(authority.as_str()).map_err(|error| error.to_string())?,
            );
        }
        headers.extend(self.headers.clone());
        let response = sender
            .send_request(request)
            .await
            .map_err(|error| error.to_string())?;
        let status = response.status();
        let _ = response.into_body().collect().await;
        drop(sender);
        let _ = connection.await;
        if status.is_success() {
            Ok(())
        } else {
            Err(format!("HTTP {status}"))
        }
    }
}

/// A connection to `uri`'s host and port, over TLS with `tls` when given.
async fn connect(uri: &Uri, tls: Option<Arc<ClientConfig>>) -> io::Result<Box<dyn Io>> {
    let host = uri
        .host()
        .unwrap_or_default()
        .trim_start_matches('[')
        .trim_end_matches(']');
    let port = uri.port_u16().unwrap_or(if tls.is_some() { 443 } else { 80 });
    let tcp = TcpStream::connect((host, port)).await?;
    let _ = tcp.set_nodelay(true);
    let Some(tls) = tls else {
        return Ok(Box::new(tcp));
    };
    let name = ServerName::try_from(host.to_owned())
        .map_err(|error| io::Error::new(io::ErrorKind::InvalidInput, error))?;
    Ok(Box::new(
        tokio_rustls::TlsConnector::from(tls).connect(name, tcp).await?,
    ))
}

/// The client side of TLS to the collector: the CA of `files` or the system's roots, and
/// a client certificate when `files` has one.
fn client_config(files: &TlsFiles, alpn: &[u8]) -> Result<ClientConfig, OtlpError> {
    let refused = |variable: &str, path: &std::path::Path, why: String| OtlpError {
        variable: variable.to_owned(),
        value: path.display().to_string(),
        allowed: why,
    };
    let mut roots = rustls::RootCertStore::empty();
    match &files.ca {
        Some(ca) => {
            let certs = crate::tls::certificates(ca, "OTEL_EXPORTER_OTLP_CERTIFICATE")
                .map_err(|why| refused("OTEL_EXPORTER_OTLP_CERTIFICATE", ca, why))?;
            for cert in certs {
                roots
                    .add(cert)
                    .map_err(|error| refused("OTEL_EXPORTER_OTLP_CERTIFICATE", ca, error.to_string()))?;
            }
        }
        None => {
            roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|error| OtlpError {
            variable: "OTEL_EXPORTER_OTLP_CERTIFICATE".to_owned(),
            value: String::new(),
            allowed: error.to_string(),
        })?
        .with_root_certificates(roots);
    let mut config = match &files.client {
        None => builder.with_no_client_auth(),
        Some((cert, key)) => {
            let chain = crate::tls::certificates(cert, "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE")
                .map_err(|why| refused("OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE", cert, why))?;
            let private = PrivateKeyDer::from_pem_file(key)
                .map_err(|error| refused("OTEL_EXPORTER_OTLP_CLIENT_KEY", key, error.to_string()))?;
            builder
                .with_client_auth_cert(chain, private)
                .map_err(|error| refused("OTEL_EXPORTER_OTLP_CLIENT_KEY", key, error.to_string()))?
        }
    };
    config.alpn_protocols = vec![alpn.to_vec()];
    Ok(config)
}
