//! The exporter's settings, read from the `OTEL_*` variables as the OpenTelemetry
//! specification defines them ("Environment Variable Specification" and "OTLP Exporter
//! Configuration"), each checked: a value out of its range is refused with its name, the
//! value and what is allowed.

use http::Uri;
use std::path::PathBuf;
use std::time::Duration;

/// The default ratio of root requests traced (`parentbased_traceidratio`): one in a
/// hundred. At 100,000 requests a second that is 1,000 spans a second, within what one
/// collector takes and within the span queue; a caller whose own trace is sampled
/// (`traceparent` flag `01`) is always followed.
pub const DEFAULT_TRACE_RATIO: f64 = 0.01;

/// How long an export may take by default (`OTEL_EXPORTER_OTLP_TIMEOUT`).
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// How often metrics are pushed by default (`OTEL_METRIC_EXPORT_INTERVAL`).
const DEFAULT_INTERVAL: Duration = Duration::from_secs(60);

/// A setting of the exporter that is not one.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{variable}={value:?}: {allowed}")]
pub struct OtlpError {
    /// The variable (or flag) that holds it.
    pub variable: String,
    /// What it holds.
    pub value: String,
    /// What it may hold.
    pub allowed: String,
}

impl OtlpError {
    fn new(variable: &str, value: &str, allowed: impl Into<String>) -> OtlpError {
        OtlpError {
            variable: variable.to_owned(),
            value: value.to_owned(),
            allowed: allowed.into(),
        }
    }
}

/// How the exporter talks to the collector (`OTEL_EXPORTER_OTLP_PROTOCOL`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    /// OTLP/gRPC: `opentelemetry.proto.collector.*.v1.*Service/Export`.
    Grpc,
    /// OTLP/HTTP with protobuf bodies: `POST /v1/metrics`, `POST /v1/traces`.
    HttpProtobuf,
}

/// Where one signal goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// How.
    pub protocol: Protocol,
    /// The URL: for gRPC its scheme and authority; for HTTP the whole URL posted to.
    pub url: Uri,
}

/// The sampler of request spans (`OTEL_TRACES_SAMPLER`, `OTEL_TRACES_SAMPLER_ARG`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Sampling {
    /// Every span, or none (`always_on`, `always_off`).
    Always(bool),
    /// This ratio of traces, by their trace ID (`traceidratio`).
    Ratio(f64),
    /// The caller's decision when the request carries one, else the inner sampling
    /// (`parentbased_*`).
    ParentBased(RootSampling),
}

/// A parent-based sampler's choice for root spans.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum RootSampling {
    /// Every root span, or none.
    Always(bool),
    /// This ratio of them.
    Ratio(f64),
}

impl Sampling {
    /// Whether no span is ever recorded, whatever the caller asks.
    #[must_use]
    pub fn is_off(self) -> bool {
        self == Sampling::Always(false)
    }
}

/// The files of TLS to the collector (`OTEL_EXPORTER_OTLP_CERTIFICATE`,
/// `..._CLIENT_CERTIFICATE`, `..._CLIENT_KEY`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TlsFiles {
    /// The CA that signs the collector's certificate, PEM; `None`: the system's roots.
    pub ca: Option<PathBuf>,
    /// A client certificate chain and its key, PEM, when the collector asks for one.
    pub client: Option<(PathBuf, PathBuf)>,
}

/// Every setting of the exporter. Its `Debug` shows the headers' names, not their values
/// (credentials).
#[derive(Clone, PartialEq)]
pub struct Settings {
    /// Where metrics go; `None`: not exported (`OTEL_METRICS_EXPORTER=none`).
    pub metrics: Option<Target>,
    /// Where spans go; `None`: not exported (`OTEL_TRACES_EXPORTER=none`).
    pub traces: Option<Target>,
    /// Headers sent with each export (`OTEL_EXPORTER_OTLP_HEADERS`).
    pub headers: Vec<(String, String)>,
    /// How long an export may take (`OTEL_EXPORTER_OTLP_TIMEOUT`, ms).
    pub timeout: Duration,
    /// How often metrics are pushed (`OTEL_METRIC_EXPORT_INTERVAL`, ms).
    pub interval: Duration,
    /// Which requests are traced.
    pub sampling: Sampling,
    /// `service.name` (`OTEL_SERVICE_NAME`, else `service.name` of the resource
    /// attributes, else `atomflake`).
    pub service_name: String,
    /// The resource's attributes (`OTEL_RESOURCE_ATTRIBUTES`), decoded.
    pub attributes: Vec<(String, String)>,
    /// TLS to the collector, for `https://` URLs.
    pub tls: TlsFiles,
}

impl std::fmt::Debug for Settings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let headers: Vec<&str> = self.headers.iter().map(|(name, _)| name.as_str()).collect();
        f.debug_struct("Settings")
            .field("metrics", &self.metrics)
            .field("traces", &self.traces)
            .field("headers", &headers)
            .field("timeout", &self.timeout)
            .field("interval", &self.interval)
            .field("sampling", &self.sampling)
            .field("service_name", &self.service_name)
            .field("attributes", &self.attributes)
            .field("tls", &self.tls)
            .finish()
    }
}

impl Settings {
    /// The settings in `vars` (a lookup of the environment), `endpoint` (`--otlp-endpoint`)
    /// standing for `OTEL_EXPORTER_OTLP_ENDPOINT`; `None` when nothing is exported: no
    /// endpoint is set, `OTEL_SDK_DISABLED=true`, or both signals' exporters are `none`.
    ///
    /// # Errors
    ///
    /// A variable whose value is not allowed, with the allowed values.
    pub fn from_vars(
        vars: &dyn Fn(&str) -> Option<String>,
        endpoint: Option<&str>,
    ) -> Result<Option<Settings>, OtlpError> {
        let var = |name: &str| vars(name).filter(|value| !value.trim().is_empty());
        if let Some(disabled) = var("OTEL_SDK_DISABLED") {
            match disabled.trim().to_ascii_lowercase().as_str() {
                "true" => return Ok(None),
                "false" => {}
                _ => return Err(OtlpError::new("OTEL_SDK_DISABLED", &disabled, "true or false")),
            }
        }
        let general = match endpoint {
            Some(endpoint) => Some(("--otlp-endpoint".to_owned(), endpoint.to_owned())),
            None => {
                var("OTEL_EXPORTER_OTLP_ENDPOINT").map(|url| ("OTEL_EXPORTER_OTLP_ENDPOINT".to_owned(), url))
            }
        };
        let metrics = target(&var, "METRICS", "metrics", general.as_ref())?;
        let traces = target(&var, "TRACES", "traces", general.as_ref())?;
        if metrics.is_none() && traces.is_none() {
            return Ok(None);
        }
        let attributes = match var("OTEL_RESOURCE_ATTRIBUTES") {
            Some(list) => pairs("OTEL_RESOURCE_ATTRIBUTES", &list)?,
            None => Vec::new(),
        };
        let service_name = var("OTEL_SERVICE_NAME")
            .or_else(|| {
                attributes
                    .iter()
                    .find(|(key, _)| key == "service.name")
                    .map(|(_, value)| value.clone())
            })
            .unwrap_or_else(|| "atomflake".to_owned());
        let client = match (
            var("OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE"),
            var("OTEL_EXPORTER_OTLP_CLIENT_KEY"),
        ) {
            (Some(cert), Some(key)) => Some((PathBuf::from(cert), PathBuf::from(key))),
            (None, None) => None,
            (Some(cert), None) => {
                return Err(OtlpError::new(
                    "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE",
                    &cert,
                    "set together with OTEL_EXPORTER_OTLP_CLIENT_KEY",
                ));
            }
            (None, Some(key)) => {
                return Err(OtlpError::new(
                    "OTEL_EXPORTER_OTLP_CLIENT_KEY",
                    &key,
                    "set together with OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE",
                ));
            }
        };
        Ok(Some(Settings {
            metrics,
            traces,
            headers: match var("OTEL_EXPORTER_OTLP_HEADERS") {
                Some(list) => pairs("OTEL_EXPORTER_OTLP_HEADERS", &list)?,
                None => Vec::new(),
            },
            timeout: millis(&var, "OTEL_EXPORTER_OTLP_TIMEOUT", DEFAULT_TIMEOUT)?,
            interval: millis(&var, "OTEL_METRIC_EXPORT_INTERVAL", DEFAULT_INTERVAL)?,
            sampling: sampling(
                var("OTEL_TRACES_SAMPLER").as_deref(),
                var("OTEL_TRACES_SAMPLER_ARG").as_deref(),
            )?,
            service_name,
            attributes,
            tls: TlsFiles {
                ca: var("OTEL_EXPORTER_OTLP_CERTIFICATE").map(PathBuf::from),
                client,
            },
        }))
    }
}

/// Where the signal `SIGNAL` (`METRICS`, `TRACES`; `path`: `metrics`, `traces`) goes, or
/// `None` when its exporter is `none` or no endpoint is set.
fn target(
    var: &dyn Fn(&str) -> Option<String>,
    signal: &str,
    path: &str,
    general: Option<&(String, String)>,
) -> Result<Option<Target>, OtlpError> {
    let exporter = format!("OTEL_{signal}_EXPORTER");
    match var(&exporter).as_deref().map(str::trim) {
        None | Some("otlp") => {}
        Some("none") => return Ok(None),
        Some(other) => return Err(OtlpError::new(&exporter, other, "otlp or none")),
    }
    let protocol_var = format!("OTEL_EXPORTER_OTLP_{signal}_PROTOCOL");
    let (protocol_name, protocol) = match var(&protocol_var) {
        Some(value) => (protocol_var, value),
        None => (
            "OTEL_EXPORTER_OTLP_PROTOCOL".to_owned(),
            var("OTEL_EXPORTER_OTLP_PROTOCOL").unwrap_or_else(|| "http/protobuf".to_owned()),
        ),
    };
    let protocol = match protocol.trim() {
        "grpc" => Protocol::Grpc,
        "http/protobuf" => Protocol::HttpProtobuf,
        other => return Err(OtlpError::new(&protocol_name, other, "grpc or http/protobuf")),
    };
    let own = format!("OTEL_EXPORTER_OTLP_{signal}_ENDPOINT");
    let (name, url, whole) = match (var(&own), general) {
        (Some(url), _) => (own, url, true),
        (None, Some((name, url))) => (name.clone(), url.clone(), false),
        (None, None) => return Ok(None),
    };
    let url = url.trim();
    let allowed = "an http:// or https:// URL with a host";
    let parsed: Uri = url.parse().map_err(|_| OtlpError::new(&name, url, allowed))?;
    if !matches!(parsed.scheme_str(), Some("http" | "https")) || parsed.host().is_none_or(str::is_empty) {
        return Err(OtlpError::new(&name, url, allowed));
    }
    // OTLP/HTTP: a signal's own endpoint is the whole URL; the general one is a base that
    // `v1/<signal>` is appended to. OTLP/gRPC takes the scheme and authority alone.
    let url = if protocol == Protocol::HttpProtobuf && !whole {
        let base = url.trim_end_matches('/');
        format!("{base}/v1/{path}")
            .parse()
            .map_err(|_| OtlpError::new(&name, url, allowed))?
    } else {
        parsed
    };
    Ok(Some(Target { protocol, url }))
}

/// A duration in milliseconds, at least 1 and at most a day; `default` when unset.
fn millis(
    var: &dyn Fn(&str) -> Option<String>,
    name: &str,
    default: Duration,
) -> Result<Duration, OtlpError> {
    const DAY_MS: u64 = 86_400_000;
    let Some(value) = var(name) else {
        return Ok(default);
    };
    match value.trim().parse::<u64>() {
        Ok(ms @ 1..=DAY_MS) => Ok(Duration::from_millis(ms)),
        _ => Err(OtlpError::new(
            name,
            &value,
            format!("milliseconds, 1 to {DAY_MS}"),
        )),
    }
}

/// The sampler named by `OTEL_TRACES_SAMPLER` with its argument; unset:
/// `parentbased_traceidratio` at [`DEFAULT_TRACE_RATIO`] (or at the argument, if set).
fn sampling(name: Option<&str>, arg: Option<&str>) -> Result<Sampling, OtlpError> {
    let ratio = |default: f64| -> Result<f64, OtlpError> {
        let Some(arg) = arg else {
            return Ok(default);
        };
        match arg.trim().parse::<f64>() {
            Ok(ratio) if (0.0..=1.0).contains(&ratio) => Ok(ratio),
            _ => Err(OtlpError::new(
                "OTEL_TRACES_SAMPLER_ARG",
                arg,
                "a ratio from 0 to 1",
            )),
        }
    };
    Ok(match name.map(str::trim) {
        None => Sampling::ParentBased(RootSampling::Ratio(ratio(DEFAULT_TRACE_RATIO)?)),
        Some("always_on") => Sampling::Always(true),
        Some("always_off") => Sampling::Always(false),
        // The specification's default argument of a ratio sampler is 1.
        Some("traceidratio") => Sampling::Ratio(ratio(1.0)?),
        Some("parentbased_always_on") => Sampling::ParentBased(RootSampling::Always(true)),
        Some("parentbased_always_off") => Sampling::ParentBased(RootSampling::Always(false)),
        Some("parentbased_traceidratio") => Sampling::ParentBased(RootSampling::Ratio(ratio(1.0)?)),
        Some(other) => {
            return Err(OtlpError::new(
                "OTEL_TRACES_SAMPLER",
                other,
                "always_on, always_off, traceidratio, parentbased_always_on, \
                 parentbased_always_off or parentbased_traceidratio",
            ));
        }
    })
}

/// `key=value,key=value` with percent-encoded values (W3C Baggage's form, which
/// `OTEL_RESOURCE_ATTRIBUTES` and `OTEL_EXPORTER_OTLP_HEADERS` take).
fn pairs(name: &str, list: &str) -> Result<Vec<(String, String)>, OtlpError> {
    // Headers hold credentials: their errors show where, not what.
    let secret = name == "OTEL_EXPORTER_OTLP_HEADERS";
    list.split(',')
        .filter(|pair| !pair.trim().is_empty())
        .enumerate()
        .map(|(index, pair)| {
            let bad = || {
                let (value, which) = if secret {
                    ("(not shown)".to_owned(), format!("pair {} is not one", index + 1))
                } else {
                    (list.to_owned(), format!("{pair:?} is not one"))
                };
                OtlpError::new(name, &value, format!("key=value pairs split by commas; {which}"))
            };
            let (key, value) = pair.split_once('=').ok_or_else(bad)?;
            let key = key.trim();
            let value = percent_encoding::percent_decode_str(value.trim())
                .decode_utf8()
                .map_err(|_| bad())?;
            if key.is_empty() {
                return Err(bad());
            }
            Ok((key.to_owned(), value.into_owned()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(vars: &[(&str, &str)], endpoint: Option<&str>) -> Result<Option<Settings>, OtlpError> {
        let lookup = |name: &str| {
            vars.iter()
                .find(|(key, _)| *key == name)
                .map(|(_, value)| (*value).to_owned())
        };
        Settings::from_vars(&lookup, endpoint)
    }

    fn on(vars: &[(&str, &str)]) -> Settings {
        settings(vars, None).unwrap().unwrap()
    }

    fn refused(vars: &[(&str, &str)]) -> String {
        settings(vars, None).unwrap_err().to_string()
    }

    const AT: (&str, &str) = ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318");

    #[test]
    fn off_without_an_endpoint_or_when_disabled() {
        assert_eq!(settings(&[], None), Ok(None));
        assert_eq!(settings(&[AT, ("OTEL_SDK_DISABLED", "TRUE")], None), Ok(None));
        assert_eq!(
            settings(&[("OTEL_SDK_DISABLED", "true")], Some("http://a:1")),
            Ok(None)
        );
        assert_eq!(
            settings(
                &[
                    AT,
                    ("OTEL_METRICS_EXPORTER", "none"),
                    ("OTEL_TRACES_EXPORTER", "none")
                ],
                None
            ),
            Ok(None)
        );
        assert!(
            settings(&[AT, ("OTEL_SDK_DISABLED", "false")], None)
                .unwrap()
                .is_some()
        );
    }

    #[test]
    fn the_defaults_are_the_specifications_but_the_sampler() {
        let settings = on(&[AT]);
        let http = Protocol::HttpProtobuf;
        assert_eq!(
            settings.metrics,
            Some(Target {
                protocol: http,
                url: "http://127.0.0.1:4318/v1/metrics".parse().unwrap()
            })
        );
        assert_eq!(
            settings.traces,
            Some(Target {
                protocol: http,
                url: "http://127.0.0.1:4318/v1/traces".parse().unwrap()
            })
        );
        assert_eq!(settings.timeout, Duration::from_secs(10));
        assert_eq!(settings.interval, Duration::from_secs(60));
        assert_eq!(
            settings.sampling,
            Sampling::ParentBased(RootSampling::Ratio(0.01))
        );
        assert_eq!(settings.service_name, "atomflake");
    }

    #[test]
    fn endpoints_protocols_and_signals() {
        let both = on(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "https://collector:4317/"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
            ("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", "http/protobuf"),
            (
                "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
                "https://other:4318/custom/path",
            ),
            ("OTEL_TRACES_EXPORTER", "otlp"),
        ]);
        assert_eq!(both.metrics.unwrap().url, "https://other:4318/custom/path");
        let traces = both.traces.unwrap();
        assert_eq!(
            (traces.protocol, traces.url.to_string()),
            (Protocol::Grpc, "https://collector:4317/".to_owned())
        );
        let flag = settings(&[AT], Some("http://flag:9/base/")).unwrap().unwrap();
        assert_eq!(flag.traces.unwrap().url, "http://flag:9/base/v1/traces");
        assert_eq!(on(&[AT, ("OTEL_TRACES_EXPORTER", "none")]).traces, None);
    }

    #[test]
    fn samplers_resources_and_headers() {
        let sampler = |name: &str, arg: &str| {
            let mut vars = vec![AT, ("OTEL_TRACES_SAMPLER", name)];
            if !arg.is_empty() {
                vars.push(("OTEL_TRACES_SAMPLER_ARG", arg));
            }
            on(&vars).sampling
        };
        assert_eq!(sampler("always_off", ""), Sampling::Always(false));
        assert_eq!(sampler("traceidratio", ""), Sampling::Ratio(1.0));
        assert_eq!(sampler("traceidratio", "0.25"), Sampling::Ratio(0.25));
        assert_eq!(
            sampler("parentbased_always_on", ""),
            Sampling::ParentBased(RootSampling::Always(true))
        );
        assert_eq!(
            on(&[AT, ("OTEL_TRACES_SAMPLER_ARG", "0.5")]).sampling,
            Sampling::ParentBased(RootSampling::Ratio(0.5))
        );
        let settings = on(&[
            AT,
            (
                "OTEL_RESOURCE_ATTRIBUTES",
                "service.name=ids, deployment.environment=eu%2Cwest",
            ),
            ("OTEL_EXPORTER_OTLP_HEADERS", "authorization=Bearer%20abc"),
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "2500"),
            ("OTEL_METRIC_EXPORT_INTERVAL", "1000"),
        ]);
        assert_eq!(settings.service_name, "ids");
        assert_eq!(
            settings.attributes[1],
            ("deployment.environment".to_owned(), "eu,west".to_owned())
        );
        assert_eq!(
            settings.headers,
            [("authorization".to_owned(), "Bearer abc".to_owned())]
        );
        assert_eq!(
            (settings.timeout, settings.interval),
            (Duration::from_millis(2500), Duration::from_secs(1))
        );
        assert_eq!(on(&[AT, ("OTEL_SERVICE_NAME", "named")]).service_name, "named");
    }

    #[test]
    fn header_values_are_never_shown() {
        let secret = "Bearer%20s3cr3t";
        let settings = on(&[
            AT,
            ("OTEL_EXPORTER_OTLP_HEADERS", &format!("authorization={secret}")),
        ]);
        assert!(!format!("{settings:?}").contains("s3cr3t"), "{settings:?}");
        assert!(format!("{settings:?}").contains("authorization"), "{settings:?}");
        assert_eq!(
            refused(&[AT, ("OTEL_EXPORTER_OTLP_HEADERS", "a=1,s3cr3t")]),
            "OTEL_EXPORTER_OTLP_HEADERS=\"(not shown)\": key=value pairs split by commas; pair 2 is not one"
        );
    }

    #[test]
    fn each_bad_value_is_refused_with_what_is_allowed() {
        assert_eq!(
            refused(&[AT, ("OTEL_SDK_DISABLED", "yes")]),
            "OTEL_SDK_DISABLED=\"yes\": true or false"
        );
        assert_eq!(
            refused(&[AT, ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")]),
            "OTEL_EXPORTER_OTLP_PROTOCOL=\"http/json\": grpc or http/protobuf"
        );
        assert_eq!(
            refused(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4317")]),
            "OTEL_EXPORTER_OTLP_ENDPOINT=\"collector:4317\": an http:// or https:// URL with a host"
        );
        assert_eq!(
            settings(&[], Some("ftp://x")).unwrap_err().to_string(),
            "--otlp-endpoint=\"ftp://x\": an http:// or https:// URL with a host"
        );
        assert_eq!(
            refused(&[AT, ("OTEL_METRIC_EXPORT_INTERVAL", "0")]),
            "OTEL_METRIC_EXPORT_INTERVAL=\"0\": milliseconds, 1 to 86400000"
        );
        assert_eq!(
            refused(&[AT, ("OTEL_EXPORTER_OTLP_TIMEOUT", "1s")]),
            "OTEL_EXPORTER_OTLP_TIMEOUT=\"1s\": milliseconds, 1 to 86400000"
        );
        assert_eq!(
            refused(&[AT, ("OTEL_TRACES_SAMPLER_ARG", "1.5")]),
            "OTEL_TRACES_SAMPLER_ARG=\"1.5\": a ratio from 0 to 1"
        );
        assert!(
            refused(&[AT, ("OTEL_TRACES_SAMPLER", "jaeger_remote")])
                .starts_with("OTEL_TRACES_SAMPLER=\"jaeger_remote\": always_on, always_off, traceidratio,")
        );
        assert_eq!(
            refused(&[AT, ("OTEL_METRICS_EXPORTER", "prometheus")]),
            "OTEL_METRICS_EXPORTER=\"prometheus\": otlp or none"
        );
        assert_eq!(
            refused(&[AT, ("OTEL_RESOURCE_ATTRIBUTES", "a=1,b")]),
            "OTEL_RESOURCE_ATTRIBUTES=\"a=1,b\": key=value pairs split by commas; \"b\" is not one"
        );
        assert_eq!(
            refused(&[AT, ("OTEL_EXPORTER_OTLP_CLIENT_KEY", "k.pem")]),
            "OTEL_EXPORTER_OTLP_CLIENT_KEY=\"k.pem\": set together with OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE"
        );
    }
}
