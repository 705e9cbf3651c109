//! OpenTelemetry export, against a receiver no one here wrote the format of: the OTLP
//! collector services of `PyPI`'s `opentelemetry-proto` (`grpcio`, and OTLP/HTTP with the
//! same classes), in `test-servers/python/otlp_receiver.py`.

use super::*;
use atomflake_test_servers::clients::{curl_sequence, grpc_over_curl};
use serde_json::Value;
use std::collections::BTreeMap;

/// A running receiver, killed when dropped: its ports and the file of what it received.
struct Receiver {
    child: Killed,
    grpc: u16,
    http: u16,
    file: PathBuf,
}

impl Receiver {
    fn start(test: &str) -> Option<Receiver> {
        Receiver::start_with(test, &[])
    }

    /// A receiver started with `tls` (`CERT KEY CLIENT_CA`, or none).
    fn start_with(test: &str, tls: &[&str]) -> Option<Receiver> {
        let python = PythonClient::new(test, &venv(), "otlp_receiver.py")?;
        let file = tempdir(&format!("otlp-{test}")).join("received.jsonl");
        let mut args = vec![file.to_str().unwrap()];
        args.extend_from_slice(tls);
        let (child, _stdin, mut stdout) = spawn_piped(&mut python.plain(&args));
        let ready = stdout.next().expect("the receiver says it is ready").unwrap();
        let ports: Vec<u16> = ready
            .split_whitespace()
            .skip(1)
            .map(|port| port.parse().unwrap())
            .collect();
        Some(Receiver {
            child: Killed(child),
            grpc: ports[0],
            http: ports[1],
            file,
        })
    }

    fn endpoint(&self, protocol: &str) -> String {
        self.url("http", protocol)
    }

    fn url(&self, scheme: &str, protocol: &str) -> String {
        let port = if protocol == "grpc" { self.grpc } else { self.http };
        format!("{scheme}://127.0.0.1:{port}")
    }

    /// Every export received so far of `signal`.
    fn received(&self, signal: &str) -> Vec<Value> {
        let text = std::fs::read_to_string(&self.file).unwrap_or_default();
        text.lines()
            .map(|line| serde_json::from_str::<Value>(line).unwrap())
            .filter(|record| record["signal"] == signal)
            .collect()
    }

    /// Every span received so far.
    fn spans(&self) -> Vec<Value> {
        self.received("traces")
            .iter()
            .flat_map(|export| export["spans"].as_array().unwrap().clone())
            .collect()
    }
}

/// `atomflake serve --node 1` exporting to `receiver` over `protocol`, with `env` besides.
fn exporting(receiver: &Receiver, protocol: &str, env: &[(&str, &str)]) -> Server {
    let endpoint = receiver.endpoint(protocol);
    let mut all = vec![
        ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", protocol),
        ("OTEL_SERVICE_NAME", "ids-under-test"),
        ("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=test"),
    ];
    all.extend_from_slice(env);
    Server::start_with(&["--node", "1"], &all)
}

/// The value of each series of a Prometheus text, by its name and labels (`le` dropped:
/// buckets are keyed by their bound).
fn prometheus_series(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter(|line| !line.starts_with('#') && !line.is_empty())
        .map(|line| {
            let (series, value) = line.rsplit_once(' ').unwrap();
            (series.to_owned(), value.to_owned())
        })
        .collect()
}

/// An OTLP export's points as the Prometheus series `GET /metrics` names them.
fn as_prometheus(export: &Value) -> BTreeMap<String, String> {
    let names = [
        ("atomflake.ids.served", "atomflake_ids_served_total"),
        ("atomflake.requests", "atomflake_requests_total"),
        ("atomflake.spent_tick_waits", "atomflake_spent_tick_waits_total"),
        ("atomflake.connections.open", "atomflake_connections_open"),
        (
            "atomflake.connections.health_only",
            "atomflake_health_only_connections_total",
        ),
        (
            "atomflake.connections.closed",
            "atomflake_connections_closed_total",
        ),
        ("atomflake.accept_errors", "atomflake_accept_errors_total"),
        (
            "atomflake.tls.handshake_failures",
            "atomflake_tls_handshake_failures_total",
        ),
        ("atomflake.serving", "atomflake_serving"),
        (
            "atomflake.otlp.spans_dropped",
            "atomflake_otlp_spans_dropped_total",
        ),
        (
            "atomflake.otlp.export_failures",
            "atomflake_otlp_export_failures_total",
        ),
    ];
    let mut series = BTreeMap::new();
    for point in export["points"].as_array().unwrap() {
        let name = point["name"].as_str().unwrap();
        let labels = |attributes: &Value, order: &[&str]| -> String {
            let pairs: Vec<String> = order
                .iter()
                .filter_map(|key| Some(format!("{key}=\"{}\"", attributes.get(*key)?.as_str()?)))
                .collect();
            if pairs.is_empty() {
                String::new()
            } else {
                format!("{{{}}}", pairs.join(","))
            }
        };
        if point["kind"] == "histogram" {
            let api = if name == "rpc.server.call.duration" {
                "grpc"
            } else {
                "http"
            };
            assert_eq!(point["unit"], "s", "{name}");
            let prefix = "atomflake_request_duration_seconds";
            let bounds = point["bounds"].as_array().unwrap();
            let mut cumulative = 0;
            for (bound, count) in bounds.iter().zip(point["buckets"].as_array().unwrap()) {
                cumulative += count.as_u64().unwrap();
                let le = format!("{:.6}", bound.as_f64().unwrap());
                series.insert(
                    format!("{prefix}_bucket{{api=\"{api}\",le=\"{le}\"}}"),
                    cumulative.to_string(),
                );
            }
            let count = point["count"].as_u64().unwrap().to_string();
            series.insert(
                format!("{prefix}_bucket{{api=\"{api}\",le=\"+Inf\"}}"),
                count.clone(),
            );
            series.insert(format!("{prefix}_count{{api=\"{api}\"}}"), count);
            series.insert(
                format!("{prefix}_sum{{api=\"{api}\"}}"),
                format!("{:.6}", point["sum"].as_f64().unwrap()),
            );
            continue;
        }
        let (_, prometheus) = names
            .iter()
            .find(|(otlp, _)| *otlp == name)
            .unwrap_or_else(|| panic!("unknown {name}"));
        let key = format!(
            "{prometheus}{}",
            labels(&point["attributes"], &["api", "outcome", "reason", "signal"])
        );
        series.insert(key, point["value"].as_u64().unwrap().to_string());
    }
    series
}

#[test]
fn otlp_metrics_are_what_the_metrics_endpoint_says_over_grpc_and_over_http() {
    let test = "otlp_metrics_are_what_the_metrics_endpoint_says_over_grpc_and_over_http";
    let Some(receiver) = Receiver::start(test) else {
        return;
    };
    for protocol in ["grpc", "http/protobuf"] {
        let server = exporting(&receiver, protocol, &[("OTEL_METRIC_EXPORT_INTERVAL", "200")]);
        for count in [1, 7, 100] {
            let (status, _) =
                http_get(&server.address, &format!("/v1/ids?count={count}"), HANG_GUARD).unwrap();
            assert_eq!(status, 200);
        }
        let scratch = tempdir(&format!("otlp-grpc-{}", protocol.len()));
        let grpc = grpc_over_curl(&server.address, &scratch, "GetIds", 5, None);
        assert_eq!(
            atomflake_test_servers::clients::grpc_status(test, grpc)
                .unwrap()
                .0,
            "0"
        );
        let (status, scraped) = http_get(&server.address, "/metrics", HANG_GUARD).unwrap();
        assert_eq!(status, 200);
        let scraped = prometheus_series(&scraped);
        let seen = receiver.received("metrics").len();
        // Two exports after the scrape, with nothing in between: the second has it all.
        let export = wait_for(
            "two metrics exports after the scrape",
            Duration::from_millis(50),
            || receiver.received("metrics").get(seen + 1).cloned(),
            || format!("{:?}", receiver.received("metrics").len()),
        );
        assert_eq!(export["via"], if protocol == "grpc" { "grpc" } else { "http" });
        let resource = &export["resource"];
        assert_eq!(resource["service.name"], "ids-under-test");
        assert_eq!(resource["deployment.environment"], "test");
        assert_eq!(resource["atomflake.nodes"], "1");
        assert_eq!(
            resource["atomflake.layout"],
            "41/10/12 bits, 1 ms ticks, epoch 1288834974657 ms"
        );
        assert_eq!(resource["service.instance.id"].as_str().unwrap().len(), 36);
        let pushed = as_prometheus(&export);
        assert_eq!(
            pushed.keys().collect::<Vec<_>>(),
            scraped.keys().collect::<Vec<_>>(),
            "{protocol}: the same series"
        );
        for (series, value) in &scraped {
            // The scrape's own connection was open while it was answered.
            if series == "atomflake_connections_open" {
                assert_eq!((value.as_str(), pushed[series].as_str()), ("1", "0"));
            } else {
                assert_eq!(pushed[series], *value, "{protocol}: {series}");
            }
        }
        let ids = "atomflake_ids_served_total{api=\"http\"}";
        assert_eq!(
            (
                pushed[ids].as_str(),
                pushed["atomflake_ids_served_total{api=\"grpc\"}"].as_str()
            ),
            ("108", "5")
        );
        let ok = "atomflake_requests_total{api=\"http\",outcome=\"ok\"}";
        assert_eq!(pushed[ok], "3", "{protocol}: scrapes are not counted");
        assert_eq!(
            pushed["atomflake_request_duration_seconds_count{api=\"grpc\"}"],
            "1"
        );
        assert_eq!(
            pushed["atomflake_otlp_export_failures_total{signal=\"metrics\"}"],
            "0"
        );
        let (status, _) = server.stop();
        assert!(status.success(), "{protocol}: {status}");
    }
}

/// `traceparent` with the sampled flag: a caller's trace that is recorded.
const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT: &str = "00f067aa0ba902b7";

#[test]
fn a_callers_traceparent_is_the_parent_of_its_request_span_over_http_and_grpc() {
    let test = "a_callers_traceparent_is_the_parent_of_its_request_span_over_http_and_grpc";
    let Some(receiver) = Receiver::start(test) else {
        return;
    };
    // A ratio of 0 records no root span: only the callers' sampled traces are.
    let server = exporting(&receiver, "http/protobuf", &[("OTEL_TRACES_SAMPLER_ARG", "0")]);
    let traceparent = format!("traceparent: 00-{TRACE}-{PARENT}-01");
    for _ in 0..20 {
        assert_eq!(
            http_get(&server.address, "/v1/ids?count=2", HANG_GUARD)
                .unwrap()
                .0,
            200
        );
    }
    let mut traced = Command::new("curl");
    traced.args([
        "-sS",
        "-o",
        "/dev/null",
        "-w",
        "%{http_code}",
        "-H",
        &traceparent,
        "-H",
        "tracestate: vendor=x",
    ]);
    let out = traced.arg(server.url("/v1/ids?count=3")).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "200");
    // curl takes the header after the URL as before it.
    let mut grpc = grpc_over_curl(&server.address, &tempdir("otlp-trace-grpc"), "GetIds", 2, None);
    grpc.args(["-H", &traceparent]);
    assert_eq!(
        atomflake_test_servers::clients::grpc_status(test, grpc)
            .unwrap()
            .0,
        "0"
    );
    let spans = wait_for(
        "the two traced requests' spans",
        Duration::from_millis(50),
        || {
            let spans = receiver.spans();
            (spans.len() >= 2).then_some(spans)
        },
        || format!("{:?}", receiver.spans()),
    );
    assert_eq!(spans.len(), 2, "only the callers' sampled traces: {spans:?}");
    let http = spans
        .iter()
        .find(|span| span["name"] == "GET /v1/ids")
        .expect("the HTTP span");
    let grpc = spans
        .iter()
        .find(|span| span["name"] == "atomflake.v1.Ids/GetIds")
        .expect("the gRPC span");
    for span in [http, grpc] {
        assert_eq!(span["trace_id"], TRACE, "{span}");
        assert_eq!(span["parent_span_id"], PARENT, "{span}");
        // SPAN_KIND_SERVER
        assert_eq!(span["kind"], 2, "{span}");
        assert_ne!(span["span_id"], PARENT);
    }
    assert_eq!(http["attributes"]["http.response.status_code"], 200);
    assert_eq!(http["attributes"]["http.route"], "/v1/ids");
    assert_eq!(http["attributes"]["url.scheme"], "http");
    assert_eq!(grpc["attributes"]["rpc.system.name"], "grpc");
    assert_eq!(grpc["attributes"]["rpc.response.status_code"], "OK");
    let (status, _) = server.stop();
    assert!(status.success());
}

#[test]
fn a_collector_that_stops_answering_costs_counted_span_drops_never_a_request() {
    let test = "a_collector_that_stops_answering_costs_counted_span_drops_never_a_request";
    let Some(receiver) = Receiver::start(test) else {
        return;
    };
    let server = exporting(
        &receiver,
        "grpc",
        &[
            ("OTEL_TRACES_SAMPLER", "always_on"),
            ("OTEL_METRIC_EXPORT_INTERVAL", "300"),
            // Longer than the run: an export under way holds its batch throughout.
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "60000"),
        ],
    );
    assert_eq!(http_get(&server.address, "/v1/ids", HANG_GUARD).unwrap().0, 200);
    wait_until(
        "a first span exported",
        Duration::from_millis(50),
        || !receiver.spans().is_empty(),
        String::new,
    );
    atomflake_test_servers::signal(receiver.child.0.id(), "-STOP");
    let requests = 4_000;
    let urls: Vec<String> = (0..requests).map(|_| server.url("/v1/ids?count=1")).collect();
    let started = Instant::now();
    let run = curl_sequence(&urls, &[]).unwrap().wait_with_output().unwrap();
    let took = started.elapsed();
    let answers = String::from_utf8(run.stdout).unwrap();
    let ok = answers.lines().filter(|line| *line == "200").count();
    assert_eq!(
        ok, requests,
        "every request answered while the collector is stopped"
    );
    // Well within the export timeout that the stopped collector holds an export for.
    assert!(
        took < Duration::from_secs(30),
        "{requests} requests took {took:?}"
    );
    let dropped = metric(&server.address, "atomflake_otlp_spans_dropped_total");
    assert!(
        dropped > 0,
        "a queue of 2048 spans and a batch under way cannot hold {requests} spans"
    );
    atomflake_test_servers::signal(receiver.child.0.id(), "-CONT");
    let (status, _) = server.stop();
    assert!(status.success());
    // Each span is received or counted as dropped: the last metrics export, at the end,
    // counts every request (but the one scrape of `/metrics`, traced too) and every drop.
    let last = receiver.received("metrics").last().cloned().unwrap();
    let pushed = as_prometheus(&last);
    let answered: u64 = pushed
        .iter()
        .filter(|(series, _)| series.starts_with("atomflake_requests_total"))
        .map(|(_, count)| count.parse::<u64>().unwrap())
        .sum();
    let dropped: u64 = pushed["atomflake_otlp_spans_dropped_total"].parse().unwrap();
    let exported = receiver.spans().iter().filter(|span| span["kind"] == 2).count();
    assert_eq!(
        exported as u64 + dropped,
        answered + 1,
        "exported {exported}, dropped {dropped}"
    );
}

#[test]
fn exports_to_a_collector_over_mutual_tls_with_the_ca_given_and_fail_counted_without_it() {
    let test = "exports_to_a_collector_over_mutual_tls_with_the_ca_given_and_fail_counted_without_it";
    let Some(pki) = tls_pki(test) else {
        return;
    };
    let path = |name: &str| pki.path(name).to_str().unwrap().to_owned();
    let (cert, key, ca) = (path("server.crt"), path("server.key"), path("ca.pem"));
    let Some(receiver) = Receiver::start_with(test, &[&cert, &key, &ca]) else {
        return;
    };
    let (client_cert, client_key) = (path("client.crt"), path("client.key"));
    for protocol in ["grpc", "http/protobuf"] {
        let url = receiver.url("https", protocol);
        let env = |ca: &str| {
            [
                ("OTEL_EXPORTER_OTLP_ENDPOINT", url.clone()),
                ("OTEL_EXPORTER_OTLP_PROTOCOL", protocol.to_owned()),
                ("OTEL_METRIC_EXPORT_INTERVAL", "100".to_owned()),
                ("OTEL_EXPORTER_OTLP_CERTIFICATE", ca.to_owned()),
                ("OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE", client_cert.clone()),
                ("OTEL_EXPORTER_OTLP_CLIENT_KEY", client_key.clone()),
            ]
        };
        let seen = receiver.received("metrics").len();
        let trusted = env(&ca);
        let trusted: Vec<(&str, &str)> = trusted
            .iter()
            .map(|(name, value)| (*name, value.as_str()))
            .collect();
        let server = Server::start_with(&["--node", "1"], &trusted);
        wait_until(
            "a metrics export over TLS",
            Duration::from_millis(50),
            || receiver.received("metrics").len() > seen,
            || server.url("/metrics"),
        );
        let (status, _) = server.stop();
        assert!(status.success(), "{protocol}: {status}");
        // A collector whose certificate the CA given did not sign: refused, counted.
        let stranger = env(&path("other-ca.pem"));
        let stranger: Vec<(&str, &str)> = stranger
            .iter()
            .map(|(name, value)| (*name, value.as_str()))
            .collect();
        let server = Server::start_with(&["--node", "1"], &stranger);
        let failures = "atomflake_otlp_export_failures_total{signal=\"metrics\"}";
        wait_until(
            "a failed export counted",
            Duration::from_millis(50),
            || metric(&server.address, failures) > 0,
            String::new,
        );
        let (status, stderr) = server.stop();
        assert!(status.success(), "{protocol}: {status}");
        assert!(
            stderr.contains("an OTLP export of metrics failed"),
            "{protocol}: {stderr}"
        );
    }
}

#[test]
fn lease_claims_renewals_and_reclaims_are_spans_of_their_own() {
    let test = "lease_claims_renewals_and_reclaims_are_spans_of_their_own";
    let Some(database) = pg::Server::start("serve-otlp-lease") else {
        return;
    };
    let Some(receiver) = Receiver::start(test) else {
        return;
    };
    let url = database.url();
    let lease = lease_flags(&url, "otlp");
    let endpoint = receiver.endpoint("grpc");
    // No request is traced: lease spans are kept whatever the ratio, unless sampling is off.
    let env = [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
        ("OTEL_TRACES_SAMPLER_ARG", "0"),
    ];
    let first = Server::start_with(&[&lease[..], &["--reclaim"]].concat(), &env);
    let lost = node_of(&first);
    let named = |name: &str| -> Vec<Value> {
        receiver
            .spans()
            .into_iter()
            .filter(|span| span["name"] == name)
            .collect()
    };
    let node = lost.to_string();
    let renewed = |span: &Value| span["attributes"]["atomflake.nodes"] == node && span["status"] == 0;
    wait_until(
        "a renewal's span",
        Duration::from_millis(100),
        || named("lease.renew").iter().any(renewed),
        || format!("{:?}", receiver.spans()),
    );
    let last_id = *get_ids(&first, 16).last().unwrap();
    let (successor, _) = frozen_past_its_lease(&first, &lease, lost, last_id);
    signal(&first, "-CONT");
    wait_until(
        "a lease.reclaim span",
        Duration::from_millis(100),
        || !named("lease.reclaim").is_empty(),
        || format!("{:?}", receiver.spans()),
    );
    // SPAN_KIND_INTERNAL; status 0: unset, 2: error.
    let claims = named("lease.claim");
    assert_eq!(claims.len(), 1, "{claims:?}");
    assert_eq!(
        (claims[0]["kind"].as_u64(), claims[0]["status"].as_u64()),
        (Some(1), Some(0))
    );
    let renewals = named("lease.renew");
    assert!(
        renewals.iter().any(|span| span["status"] == 2),
        "the renewal that found the lease lost is an error: {renewals:?}"
    );
    assert!(
        receiver.spans().iter().all(|span| span["kind"] == 1),
        "no request span at a ratio of 0"
    );
    drop(successor);
    let (status, _) = first.stop();
    assert!(status.success());
}
