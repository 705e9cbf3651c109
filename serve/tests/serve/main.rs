//! The service's behaviour, served in this process by [`atomflake_serve::Server`] on a loopback port and
//! driven by clients no one here wrote: `curl`, Python's `requests` and `grpcio` (stubs
//! generated from the proto by `grpcio-tools`) and `openssl`. What needs the `atomflake`
//! process (its flags, signals, exit codes, the open-file limit, leases) is tested in
//! `cli/tests/serve.rs`.

mod compression;
mod connection_age;
mod grpc_web;
mod lifecycle;

use atomflake::{Id, Layout, ShardedGenerator};
use atomflake_serve::{DrainCause, Drained, Ended, Limits, Service, Tls, TlsFiles, Tokens};
use atomflake_test_servers::clients::{
    PythonClient, curl, curl_https, curl_sequence, grpc_body_over_curl, grpc_over_curl, grpc_status,
    http_get, ids_of, metric, spawn_piped, tls_pki,
};
use atomflake_test_servers::files::{replace, replace_keeping_stamp};
use atomflake_test_servers::{HANG_GUARD, now_ms, skip, wait_until};
use std::collections::HashSet;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex, PoisonError, mpsc};
use std::time::{Duration, Instant};
use tokio_stream::wrappers::UnboundedReceiverStream;

/// What a [`Server`] serves, and how.
struct Setup {
    layout: Layout,
    nodes: Vec<u64>,
    limits: Limits,
    cors_origins: Vec<String>,
    tls: Option<TlsFiles>,
    /// The token file, and whether `/metrics` asks for a token too.
    tokens: Option<(PathBuf, bool)>,
    /// How long the drain waits for the requests under way.
    drain: Duration,
    /// The mask of `as=masked`.
    mask: Option<[u8; 16]>,
}

impl Setup {
    /// Twitter's layout on `node`, the default limits, no CORS, TLS or tokens.
    fn node(node: u64) -> Setup {
        Setup {
            layout: Layout::TWITTER,
            nodes: vec![node],
            limits: Limits::default(),
            cors_origins: Vec::new(),
            tls: None,
            tokens: None,
            drain: Duration::from_secs(10),
            mask: None,
        }
    }

    fn mask(self, key: [u8; 16]) -> Setup {
        Setup {
            mask: Some(key),
            ..self
        }
    }

    fn drain(self, drain: Duration) -> Setup {
        Setup { drain, ..self }
    }

    fn layout(self, layout: Layout) -> Setup {
        Setup { layout, ..self }
    }

    fn limits(self, limits: Limits) -> Setup {
        Setup { limits, ..self }
    }

    /// TLS with `pki`'s `server` certificate, and its client CA when given.
    fn tls(self, pki: &atomflake_test_servers::pki::Pki, client_ca: Option<PathBuf>) -> Setup {
        let files = TlsFiles {
            cert: pki.path("server.crt"),
            key: pki.path("server.key"),
            client_ca,
        };
        Setup {
            tls: Some(files),
            ..self
        }
    }

    fn tokens(self, file: &Path, metrics: bool) -> Setup {
        Setup {
            tokens: Some((file.to_owned(), metrics)),
            ..self
        }
    }
}

/// The log lines a server's threads write, kept for the test to read.
#[derive(Clone, Default)]
struct Logs(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Logs {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Logs {
    /// Logs through `tracing` on this thread into these logs, for as long as it lives.
    fn capture_on_this_thread(&self) {
        let logs = self.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || logs.clone())
            .with_ansi(false)
            .finish();
        // Held for the thread's life: the thread is the server's.
        std::mem::forget(tracing::subscriber::set_default(subscriber));
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap_or_else(PoisonError::into_inner)).into_owned()
    }
}

/// An [`atomflake_serve::Server`] on a free loopback port, on a runtime of its own on a
/// thread of its own, until [`stop`](Server::stop) (or its drop) asks it to drain.
struct Server {
    address: String,
    logs: Logs,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    /// Cuts the drain.
    cut: Option<tokio::sync::oneshot::Sender<()>>,
    /// Asks for a reload of the TLS certificate and the tokens.
    reload: tokio::sync::mpsc::UnboundedSender<()>,
    served: Option<std::thread::JoinHandle<std::io::Result<Ended>>>,
}

impl Server {
    fn start(setup: Setup) -> Server {
        let logs = Logs::default();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let (cut, cut_asked) = tokio::sync::oneshot::channel::<()>();
        let (reload, reloads) = tokio::sync::mpsc::unbounded_channel::<()>();
        let (started, start) = mpsc::channel();
        let thread_logs = logs.clone();
        let served = std::thread::spawn(move || {
            thread_logs.capture_on_this_thread();
            let worker_logs = thread_logs.clone();
            // More workers than a test's requests that mint a million IDs at once, so
            // that a connection's timers never wait behind them on a two-core machine.
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(4)
                .enable_all()
                .thread_name("atomflake-serve")
                .on_thread_start(move || worker_logs.capture_on_this_thread())
                .build()
                .unwrap();
            runtime.block_on(async move {
                let generator = ShardedGenerator::new(setup.layout, setup.nodes).unwrap();
                let mut service = Service::new(generator, setup.limits, None)
                    .unwrap()
                    .allow_origins(&setup.cors_origins)
                    .unwrap();
                if let Some(files) = setup.tls {
                    service = service.with_tls(Tls::new(files).unwrap());
                }
                if let Some((file, metrics)) = setup.tokens {
                    service = service.require_tokens(Arc::new(Tokens::from_file(&file, metrics).unwrap()));
                }
                if let Some(key) = setup.mask {
                    service = service.with_mask(atomflake::Mask::new(key));
                }
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
                started.send(listener.local_addr().unwrap().to_string()).unwrap();
                atomflake_serve::Server::new(listener, service)
                    .drain_time(setup.drain)
                    .with_graceful_shutdown(async move {
                        let _ = stopped.await;
                    })
                    .cut_drain_when(|_| async move {
                        // A test that never cuts drops the sender: no cut then.
                        if cut_asked.await.is_err() {
                            std::future::pending::<()>().await;
                        }
                    })
                    .reload_on(UnboundedReceiverStream::new(reloads), "asked by the test")
                    .run()
                    .await
            })
        });
        let address = start.recv().expect("the server starts");
        Server {
            address,
            logs,
            stop: Some(stop),
            cut: Some(cut),
            reload,
            served: Some(served),
        }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.address)
    }

    /// Drains it, as a SIGTERM does the command's: how the drain ended.
    fn stop(self) -> Drained {
        self.stop_ended().drained
    }

    /// Drains it: how it ended.
    fn stop_ended(mut self) -> Ended {
        self.begin_drain();
        self.served.take().unwrap().join().unwrap().unwrap()
    }

    /// Begins the drain (the shutdown future completes), as a SIGTERM does the command's.
    fn begin_drain(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }

    /// Cuts the drain, as a second SIGTERM does the command's.
    fn cut(&mut self) {
        let _ = self.cut.take().unwrap().send(());
    }

    /// Once the drain has ended: how the server ended.
    fn ended(mut self) -> Ended {
        self.served.take().unwrap().join().unwrap().unwrap()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// A fresh directory under the target's temporary directory.
fn tempdir(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("serve-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The venv of the Python clients, shared with `cli/tests/serve.rs`.
fn venv() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join("serve-venv")
}

/// A [`grpc_over_curl`] call to `server`.
fn grpc(server: &Server, method: &str, count: u64, timeout: Option<&str>) -> Command {
    let scratch = Path::new(env!("CARGO_TARGET_TMPDIR"));
    grpc_over_curl(&server.address, scratch, method, count, timeout)
}

/// How far before a request's start its IDs' times may lie: the server's default clock is
/// read on the minting path as the time its discipline thread stored, a tick late while
/// that thread has not run in this millisecond, more while a loaded machine keeps it from
/// running. A second: still the time of the request, never another clock's or epoch's.
const CLOCK_LAG_MS: u64 = 1_000;

/// Checks that every ID decodes, in `layout`, to `node` and a time in `from..=to` (Unix
/// ms).
fn assert_decode(ids: &[u64], layout: Layout, node: u64, from: u64, to: u64) {
    for &id in ids {
        let parts = layout.decode(Id::new(id));
        assert_eq!(parts.node, node, "{id}");
        assert!(
            (from..=to).contains(&parts.unix_ms),
            "{id} at {}: not minted in {from}..={to}",
            parts.unix_ms
        );
    }
}
/// `as=uuid` gives the IDs as UUIDs of version 7, which sort as the IDs and which
/// `GET /v1/ids/{uuid}` decodes back to IDs of the server's node, after the strings asked
/// for before them; a layout whose times pass 2^48 ms has none, and says so.
#[test]
fn ids_as_uuids_sort_as_the_ids_and_decode_back_to_them() {
    let test = "ids_as_uuids_sort_as_the_ids_and_decode_back_to_them";
    let server = Server::start(Setup::node(6));
    let Some((status, strings)) = curl(&server.url("/v1/ids?count=3")) else {
        skip(test, "no curl");
        return;
    };
    assert_eq!(status, 200, "{strings}");
    let uuids = json_ids(&server, "/v1/ids?as=uuid&count=5");
    let uuids: Vec<&str> = uuids.iter().map(|uuid| uuid.as_str().unwrap()).collect();
    assert_eq!(uuids.len(), 5);
    assert!(uuids.windows(2).all(|pair| pair[0] < pair[1]), "{uuids:?}");
    let mut ids = ids_of(&strings);
    for uuid in &uuids {
        let (status, body) = curl(&server.url(&format!("/v1/ids/{uuid}"))).unwrap();
        assert_eq!(status, 200, "{body}");
        let decoded: serde_json::Value = serde_json::from_str(&body).unwrap();
        let id: u64 = decoded["id"].as_str().unwrap().parse().unwrap();
        assert_eq!(Id::new(id).to_uuid(Layout::TWITTER).unwrap().to_string(), *uuid);
        assert_eq!(decoded["node"], 6, "{body}");
        ids.push(id);
    }
    assert!(
        ids.windows(2).all(|pair| pair[0] < pair[1]),
        "after the strings: {ids:?}"
    );
    let (status, body) = curl(&server.url("/v1/ids/01665fa2-4db3-7fac-8e92-c5527c95b00")).unwrap();
    assert_eq!(
        (status, body.as_str()),
        (
            400,
            r#"{"error":"invalid UUID \"01665fa2-4db3-7fac-8e92-c5527c95b00\": not a UUID (invalid group length in group 4: expected 12, found 11): a UUID is 32 hex digits, grouped 8-4-4-4-12 by hyphens or not"}"#
        )
    );
    assert_eq!(server.stop(), Drained::Finished);

    // 40 bits of 1 s ticks from 1970 reach past 2^48 ms.
    let long = Layout::builder()
        .timestamp_bits(40)
        .node_bits(0)
        .sequence_bits(24)
        .tick_ms(1000)
        .build()
        .unwrap();
    let server = Server::start(Setup::node(0).layout(long));
    assert_eq!(
        curl(&server.url("/v1/ids?as=uuid")).unwrap(),
        (
            400,
            r#"{"error":"as=uuid needs a layout whose times end by 2^48 ms, which a UUID of version 7 holds: this server's layout (40/0/24 bits, 1000 ms ticks, epoch 0 ms) ends at 1099511627776000 ms; allowed as=string"}"#
                .to_owned()
        )
    );
    assert_eq!(server.stop(), Drained::Finished);
}

/// `as=base62` gives 11-character texts that sort as the IDs, which decode back as their
/// base32 texts do, and `as=masked` (with a mask) masked IDs that
/// `GET /v1/ids/{id}?as=masked` decodes back to IDs of the node; a server with no key
/// refuses `as=masked`, and the masked IDs are the repository's vectors' mask.
#[test]
fn ids_as_base62_and_masked_decode_back_to_the_servers_ids() {
    let test = "ids_as_base62_and_masked_decode_back_to_the_servers_ids";
    let key: [u8; 16] = std::array::from_fn(|i| u8::try_from(i).unwrap());
    let server = Server::start(Setup::node(4).mask(key));
    let Some((status, texts)) = curl(&server.url("/v1/ids?as=base62&count=5")) else {
        skip(test, "no curl");
        return;
    };
    assert_eq!(status, 200, "{texts}");
    let texts: serde_json::Value = serde_json::from_str(&texts).unwrap();
    let texts: Vec<&str> = texts["ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    assert!(
        texts.iter().all(|t| t.len() == 11) && texts.windows(2).all(|w| w[0] < w[1]),
        "{texts:?}"
    );
    let mut ids = Vec::new();
    for text in &texts {
        let (status, body) = curl(&server.url(&format!("/v1/ids/{text}"))).unwrap();
        assert_eq!(status, 200, "{body}");
        let decoded: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(decoded["node"], 4, "{body}");
        ids.push(decoded["id"].as_str().unwrap().parse::<u64>().unwrap());
    }
    // The same IDs in base32 (as `atomflake mint --format base32` writes them) decode to
    // the same; text of no form is refused, naming it.
    for &id in &ids {
        let base32 = Id::new(id).to_base32();
        let (status, body) = curl(&server.url(&format!("/v1/ids/{base32}"))).unwrap();
        let decoded: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!((status, &decoded["id"]), (200, &id.to_string().into()), "{body}");
    }
    assert_eq!(
        curl(&server.url("/v1/ids/0000000000U00")).unwrap(),
        (
            400,
            r#"{"error":"invalid ID \"0000000000U00\": invalid character 'U' at byte 10 in base32 id: base32 ids use Crockford's digits 0-9 and A-Z without U (I and L read as 1, O as 0)"}"#.to_owned()
        )
    );
    let (status, masked) = curl(&server.url("/v1/ids?as=masked&count=5")).unwrap();
    assert_eq!(status, 200, "{masked}");
    let mask = atomflake::Mask::new(key);
    for masked in ids_of(&masked) {
        let (status, body) = curl(&server.url(&format!("/v1/ids/{masked}?as=masked"))).unwrap();
        assert_eq!(status, 200, "{body}");
        let decoded: serde_json::Value = serde_json::from_str(&body).unwrap();
        let id: u64 = decoded["id"].as_str().unwrap().parse().unwrap();
        assert_eq!(
            (mask.mask(Id::new(id)).get(), &decoded["node"]),
            (masked, &4.into()),
            "{body}"
        );
        ids.push(id);
    }
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "in minting order: {ids:?}");
    assert_eq!(
        curl(&server.url("/v1/ids/1?as=uuid")).unwrap(),
        (
            400,
            r#"{"error":"as \"uuid\" is not a form a decode takes: allowed masked"}"#.to_owned()
        )
    );
    assert_eq!(server.stop(), Drained::Finished);

    let server = Server::start(Setup::node(4));
    for path in ["/v1/ids?as=masked", "/v1/ids/1?as=masked"] {
        let (status, body) = curl(&server.url(path)).unwrap();
        assert_eq!(status, 400, "{path}");
        assert!(
            body.contains("as=masked needs a server started with --mask-key-file: this one has no key"),
            "{path}: {body}"
        );
    }
    assert_eq!(server.stop(), Drained::Finished);
}

/// On the JavaScript layout (53 bits), `as=number` gives the IDs as JSON numbers, each at
/// most 2^53 - 1, after the strings asked for before them.
#[test]
fn ids_as_numbers_on_the_javascript_layout_are_json_numbers_a_javascript_number_holds() {
    let test = "ids_as_numbers_on_the_javascript_layout_are_json_numbers_a_javascript_number_holds";
    let layout = Layout::JAVASCRIPT;
    let server = Server::start(Setup::node(3).layout(layout));
    let Some((status, strings)) = curl(&server.url("/v1/ids?count=5&as=string")) else {
        skip(test, "no curl");
        return;
    };
    assert_eq!(status, 200, "{strings}");
    let numbers: Vec<u64> = json_ids(&server, "/v1/ids?as=number&count=5")
        .iter()
        .map(|id| id.as_u64().unwrap_or_else(|| panic!("{id} is not a JSON number")))
        .collect();
    let strings = ids_of(&strings);
    assert_eq!((strings.len(), numbers.len()), (5, 5));
    let all: Vec<u64> = strings.iter().chain(&numbers).copied().collect();
    assert!(
        all.is_sorted() && all.windows(2).all(|pair| pair[0] < pair[1]),
        "{all:?}"
    );
    for id in &all {
        assert!(*id < 1 << 53, "{id}");
        assert_eq!(layout.decode(Id::new(*id)).node, 3, "{id}");
    }
    // JavaScript's own reading of the answer: JSON.parse gives numbers that are safe
    // integers and print back as the digits sent.
    let (_, answer) = curl(&server.url("/v1/ids?count=200&as=number")).unwrap();
    let script = "const text = require('fs').readFileSync(0, 'utf8'); \
                  const ids = JSON.parse(text).ids; \
                  const digits = text.match(/[0-9]+/g); \
                  const bad = ids.filter((id, i) => !Number.isSafeInteger(id) || String(id) !== digits[i]); \
                  console.log(ids.length + ' ' + bad.length);";
    let Ok(mut node) = Command::new("node")
        .args(["-e", script])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
    else {
        skip(test, "no node command (Node.js)");
        return;
    };
    std::io::Write::write_all(&mut node.stdin.take().unwrap(), answer.as_bytes()).unwrap();
    let output = node.wait_with_output().unwrap();
    assert_eq!(
        String::from_utf8_lossy(&output.stdout).trim(),
        "200 0",
        "{answer}"
    );
}

/// `GET /v1/ids` and `GetIds` in their plain forms are answered without the router; every
/// other form goes through it. Both must give the same answers, and the router must still
/// get the whole body of a call the plain path began to read.
#[test]
fn plain_id_requests_and_every_other_form_get_the_same_answers() {
    let test = "plain_id_requests_and_every_other_form_get_the_same_answers";
    let server = Server::start(Setup::node(9));
    let get = |path: &str| {
        let Some(answer) = curl(&format!("http://{}{path}", server.address)) else {
            skip(test, "no curl");
            return None;
        };
        Some(answer)
    };
    // The same query, plain and percent-encoded (which only the router decodes).
    for (plain, routed) in [
        ("/v1/ids?count=0", "/v1/ids?count=%30"),
        ("/v1/ids?count=4097", "/v1/ids?count=%34097"),
        (
            "/v1/ids?count=99999999999999999999999",
            "/v1/ids?count=%399999999999999999999999",
        ),
    ] {
        let (Some(plain_answer), Some(routed_answer)) = (get(plain), get(routed)) else {
            return;
        };
        assert_eq!(plain_answer.0, 400, "{plain}: {plain_answer:?}");
        assert_eq!(plain_answer, routed_answer, "{plain} and {routed}");
    }
    let (Some(plain), Some(routed)) = (get("/v1/ids?count=3"), get("/v1/ids?count=%33")) else {
        return;
    };
    assert_eq!((plain.0, routed.0), (200, 200));
    assert_eq!((ids_of(&plain.1).len(), ids_of(&routed.1).len()), (3, 3));
    assert_eq!(
        get("/v1/ids").map(|(status, body)| (status, ids_of(&body).len())),
        Some((200, 1))
    );

    let scratch = tempdir(test);
    let call = |name: &str, frames: &[&[u8]], headers: &[String]| {
        let mut body = Vec::new();
        for message in frames {
            body.push(0);
            body.extend(u32::try_from(message.len()).unwrap().to_be_bytes());
            body.extend(*message);
        }
        let path = scratch.join(name);
        std::fs::write(&path, body).unwrap();
        grpc_status(
            test,
            grpc_body_over_curl(&server.address, &path, "GetIds", headers),
        )
        .map(|(status, message, _)| (status, message))
    };
    let Some(plain) = call("plain", &[&[0x08, 0x03]], &[]) else {
        return;
    };
    assert_eq!(plain, ("0".to_owned(), String::new()));
    let range = "count 0 is out of range: allowed 1..=4096".to_owned();
    assert_eq!(
        call("zero", &[&[0x08, 0x00]], &[]),
        Some(("3".to_owned(), range.clone()))
    );
    // Two messages go to the router's gRPC service, which answers the first.
    assert_eq!(
        call("two", &[&[0x08, 0x00], &[0x08, 0x01]], &[]),
        Some(("3".to_owned(), range.clone()))
    );
    // A call in gzip goes to the router (this message's flag says it is sent as it is);
    // one in an encoding the server does not read is refused by name.
    let gzip = call("gzip", &[&[0x08, 0x01]], &["grpc-encoding: gzip".to_owned()]).unwrap();
    assert_eq!(gzip, ("0".to_owned(), String::new()));
    let deflate = call(
        "deflate",
        &[&[0x08, 0x01]],
        &["grpc-encoding: deflate".to_owned()],
    )
    .unwrap();
    assert_eq!(deflate.0, "12", "{deflate:?}");
    assert!(deflate.1.contains("deflate"), "{deflate:?}");
    // Over the limit of a request message: read past it, then refused by tonic in full.
    let mut large = vec![0x08, 0x00, 0x12, 0xff, 0x07];
    large.resize(1_029, 0);
    let over = call("large", &[&large], &[]).unwrap();
    assert_eq!(over.0, "11", "{over:?}");
    // With identity encoding named, a plain call.
    assert_eq!(
        call(
            "identity",
            &[&[0x08, 0x00]],
            &["grpc-encoding: identity".to_owned()]
        ),
        Some(("3".to_owned(), range))
    );
}

#[test]
fn curl_gets_ids_that_decode_to_the_servers_node_and_the_time_of_the_request() {
    let test = "curl_gets_ids_that_decode_to_the_servers_node_and_the_time_of_the_request";
    let server = Server::start(Setup::node(5).limits(Limits {
        max_count: 1000,
        ..Limits::default()
    }));
    let before = now_ms() - CLOCK_LAG_MS;
    let Some((status, body)) = curl(&server.url("/v1/ids?count=1000")) else {
        skip(test, "no curl");
        return;
    };
    let after = now_ms();
    assert_eq!(status, 200, "{body}");
    let ids = ids_of(&body);
    assert_eq!(ids.len(), 1000);
    assert!(ids.windows(2).all(|pair| pair[0] < pair[1]), "not in order");
    assert_decode(&ids, Layout::TWITTER, 5, before, after);
    let (status, body) = curl(&server.url("/v1/ids")).unwrap();
    assert_eq!((status, ids_of(&body).len()), (200, 1), "count defaults to 1");

    for (query, error) in [
        ("count=0", "count 0 is out of range: allowed 1..=1000"),
        ("count=1001", "count 1001 is out of range: allowed 1..=1000"),
        (
            "count=-1",
            r#"count \"-1\" is not a whole number: allowed 1..=1000"#,
        ),
        (
            "count=99999999999999999999",
            r#"count \"99999999999999999999\" is not a whole number: allowed 1..=1000"#,
        ),
        ("size=2", r#"unknown parameter \"size\": allowed count and as"#),
        (
            "as=text",
            r#"as \"text\" is not a form: allowed string, number, uuid, base62 or masked"#,
        ),
        (
            "as=number",
            "as=number needs a layout whose IDs are at most 2^53 - 1 (9007199254740991), which JavaScript's \
             numbers hold exactly: this server's layout (41/10/12 bits, 1 ms ticks, epoch 1288834974657 ms) \
             reaches 9223372036854775807; allowed as=string",
        ),
    ] {
        let answer = curl(&server.url(&format!("/v1/ids?{query}"))).unwrap();
        assert_eq!(answer, (400, format!(r#"{{"error":"{error}"}}"#)), "{query}");
    }

    let id = ids[0];
    let (status, body) = curl(&server.url(&format!("/v1/ids/{id}"))).unwrap();
    assert_eq!(status, 200, "{body}");
    let decoded: serde_json::Value = serde_json::from_str(&body).unwrap();
    let parts = Layout::TWITTER.decode(Id::new(id));
    assert_eq!(
        (
            &decoded["id"],
            &decoded["node"],
            &decoded["sequence"],
            &decoded["unix_ms"]
        ),
        (
            &id.to_string().into(),
            &5.into(),
            &parts.sequence.into(),
            &parts.unix_ms.into()
        )
    );
    for (text, error) in [
        ("x1", r#"invalid ID \"x1\": "#),
        ("9223372036854775808", r#"invalid ID \"9223372036854775808\": "#),
    ] {
        let (status, body) = curl(&server.url(&format!("/v1/ids/{text}"))).unwrap();
        assert_eq!(status, 400, "{body}");
        assert!(body.starts_with(&format!(r#"{{"error":"{error}"#)), "{body}");
    }

    assert_eq!(curl(&server.url("/healthz")).unwrap(), (200, "serving\n".into()));
    let (status, metrics) = curl(&server.url("/metrics")).unwrap();
    assert_eq!(status, 200);
    for line in [
        "atomflake_ids_served_total{api=\"http\"} 1001",
        "atomflake_requests_total{api=\"http\",outcome=\"invalid\"} 9",
        "atomflake_serving 1",
    ] {
        assert!(metrics.lines().any(|l| l == line), "no {line:?} in\n{metrics}");
    }
    assert_eq!(server.stop(), Drained::Finished);
}

#[test]
fn python_clients_over_http_and_grpc_get_distinct_ids_of_the_servers_nodes() {
    let test = "python_clients_over_http_and_grpc_get_distinct_ids_of_the_servers_nodes";
    let Some(client) = PythonClient::new(test, &venv(), "serve_client.py") else {
        return;
    };
    // Sonyflake puts the machine ID below the sequence: its runs step by 1 << 16.
    for (layout, node) in [("twitter", "5"), ("sonyflake", "300")] {
        let layout_of = if layout == "twitter" {
            Layout::TWITTER
        } else {
            Layout::SONYFLAKE
        };
        let server = Server::start(Setup::node(node.parse().unwrap()).layout(layout_of));
        let stubs = tempdir(&format!("stubs-{layout}"));
        let before = now_ms() - CLOCK_LAG_MS;
        let ids = PythonClient::ids(client.command(&server.address, &stubs, "4096"), layout);
        let after = now_ms();
        assert_eq!(ids.len(), 50 + 3 + 7 + 100_000 + 4096 + 10_000, "{layout}");
        let distinct: HashSet<u64> = ids.iter().copied().collect();
        assert_eq!(distinct.len(), ids.len(), "{layout}: an ID twice");
        assert!(
            ids.windows(2).all(|pair| pair[0] < pair[1]),
            "{layout}: out of order"
        );
        for &id in &ids {
            let parts = layout_of.decode(Id::new(id));
            assert_eq!(parts.node, node.parse::<u64>().unwrap(), "{layout}: {id}");
            assert!(
                (before..=after).contains(&parts.unix_ms),
                "{layout}: {id} at {}",
                parts.unix_ms
            );
        }
        assert_eq!(server.stop(), Drained::Finished, "{layout}");
        let _ = std::fs::remove_dir_all(stubs);
    }
}

/// A raw connection to `server` that sends `head` (perhaps nothing) and no more.
fn partial_request(server: &Server, head: &str) -> std::net::TcpStream {
    use std::io::Write;
    let mut stream = std::net::TcpStream::connect(&server.address).unwrap();
    stream.write_all(head.as_bytes()).unwrap();
    stream
}

/// Whether the server closed `stream` within `within`: a read ends (EOF or reset) rather
/// than timing out.
fn closed_within(stream: &mut std::net::TcpStream, within: Duration) -> bool {
    use std::io::Read;
    let deadline = Instant::now() + within;
    let mut buffer = [0; 512];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        stream.set_read_timeout(Some(left)).unwrap();
        match stream.read(&mut buffer) {
            Ok(0) => return true,
            // An answer (a 408 or 503, say) before the close.
            Ok(_) => {}
            Err(error)
                if matches!(
                    error.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return false;
            }
            Err(_) => return true,
        }
    }
}

#[test]
fn silent_and_trickling_clients_are_closed_and_health_checks_still_get_in() {
    let header_timeout = Duration::from_secs(3);
    let server = Server::start(Setup::node(1).limits(Limits {
        max_connections: 24,
        header_timeout,
        idle_timeout: header_timeout,
        ..Limits::default()
    }));
    let opened = Instant::now();
    // 24 clients that trickle a request head take every slot; 20 that send nothing take
    // the 16 kept for health checks, and 4 wait in the listener's backlog.
    let mut trickling: Vec<_> = (0..24)
        .map(|_| partial_request(&server, "GET /v1/ids HTTP/1.1\r\nHost: atomflake\r\n"))
        .collect();
    let mut silent: Vec<_> = (0..20).map(|_| partial_request(&server, "")).collect();
    let trickler = {
        let mut streams: Vec<_> = trickling
            .iter()
            .map(|stream| stream.try_clone().unwrap())
            .collect();
        std::thread::spawn(move || {
            use std::io::Write;
            for _ in 0..40 {
                std::thread::sleep(Duration::from_millis(200));
                for stream in &mut streams {
                    let _ = stream.write_all(b"X");
                }
            }
        })
    };
    // A health check behind them all gets in once the health checks' slots turn over
    // (2 s each), well before the trickling clients' header timeout.
    let (status, body) = http_get(&server.address, "/healthz", HANG_GUARD).unwrap();
    assert_eq!((status, body.as_str()), (200, "serving\n"));
    let health_took = opened.elapsed();
    // An ID request on a connection taken past the cap is refused, naming the cap.
    let (status, body) = http_get(&server.address, "/v1/ids", HANG_GUARD).unwrap();
    assert_eq!(
        (status, body.as_str()),
        (
            503,
            "{\"error\":\"the server has its most connections open (24): this one answers health checks alone\"}"
        )
    );
    // Every one of them is closed by the server: the trickling ones at the header timeout,
    // the silent ones at theirs; those left in the backlog are let in once the first ones
    // close, and closed a header timeout later. So all within two header timeouts, and two
    // more for a loaded machine's late timers.
    let closed_by = 4 * header_timeout;
    for stream in trickling.iter_mut().chain(&mut silent) {
        let within = closed_by.saturating_sub(opened.elapsed());
        assert!(
            closed_within(stream, within),
            "a connection still open after {:?}",
            opened.elapsed()
        );
    }
    trickler.join().unwrap();
    // The slots are free again: IDs over a fresh connection.
    let (status, body) = http_get(&server.address, "/v1/ids?count=2", HANG_GUARD).unwrap();
    assert_eq!(status, 200, "{body}");
    assert!(
        metric(
            &server.address,
            "atomflake_connections_closed_total{reason=\"header_timeout\"}"
        ) >= 24
    );
    assert!(metric(&server.address, "atomflake_health_only_connections_total") >= 17);
    println!("health check answered after {health_took:?} with every slot taken");
}

#[test]
fn a_keep_alive_connection_idle_past_the_idle_timeout_is_closed() {
    use std::io::{Read, Write};
    let idle_timeout = Duration::from_secs(2);
    let server = Server::start(Setup::node(1).limits(Limits {
        idle_timeout,
        ..Limits::default()
    }));
    let mut stream = std::net::TcpStream::connect(&server.address).unwrap();
    let request = "GET /v1/ids?count=1 HTTP/1.1\r\nHost: atomflake\r\n\r\n";
    stream.write_all(request.as_bytes()).unwrap();
    stream.set_read_timeout(Some(HANG_GUARD)).unwrap();
    let mut answer = [0; 512];
    let read = stream.read(&mut answer).unwrap();
    assert!(
        answer[..read].starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&answer[..read])
    );
    let answered = Instant::now();
    // Still open within the idle timeout: a second request on it is answered.
    std::thread::sleep(Duration::from_millis(500));
    stream.write_all(request.as_bytes()).unwrap();
    let read = stream.read(&mut answer).unwrap();
    assert!(answer[..read].starts_with(b"HTTP/1.1 200"));
    // Closed at the idle timeout after the second answer; twice more for late timers.
    assert!(closed_within(&mut stream, 3 * idle_timeout));
    let idle = answered.elapsed();
    assert!(idle >= idle_timeout, "closed after {idle:?}");
    assert_eq!(
        metric(
            &server.address,
            "atomflake_connections_closed_total{reason=\"idle_timeout\"}"
        ),
        1
    );
}

/// A probe of `path` on a keep-alive connection: when it was sent and answered (ms since
/// 1970), its status and body.
struct Probe {
    sent_ms: u64,
    answered_ms: u64,
    status: u16,
    body: String,
}

/// Sends health probes (`/readyz` and `/healthz` in turn) over one keep-alive connection
/// to `address` until `stop` is set, and returns them; `started` is sent once the first
/// one is answered.
fn probe_until(
    address: &str,
    stop: &std::sync::atomic::AtomicBool,
    started: &mpsc::Sender<()>,
) -> Vec<Probe> {
    use std::io::{Read, Write};
    let stream = std::net::TcpStream::connect(address).unwrap();
    stream.set_nodelay(true).unwrap();
    let mut writer = stream.try_clone().unwrap();
    let mut reader = BufReader::new(stream);
    let mut probes = Vec::new();
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        let path = if probes.len() % 2 == 0 {
            "/readyz"
        } else {
            "/healthz"
        };
        let sent_ms = now_ms();
        write!(writer, "GET {path} HTTP/1.1\r\nHost: {address}\r\n\r\n").unwrap();
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        let status = line.split_whitespace().nth(1).and_then(|code| code.parse().ok());
        let status = status.unwrap_or_else(|| panic!("not a status line: {line:?}"));
        let mut length = None;
        loop {
            line.clear();
            reader.read_line(&mut line).unwrap();
            if line == "\r\n" {
                break;
            }
            if let Some((name, value)) = line.split_once(':')
                && name.eq_ignore_ascii_case("content-length")
            {
                length = value.trim().parse::<usize>().ok();
            }
        }
        let length = length.unwrap_or_else(|| panic!("{path}: no content-length"));
        let mut body = vec![0; length];
        reader.read_exact(&mut body).unwrap();
        probes.push(Probe {
            sent_ms,
            answered_ms: now_ms(),
            status,
            body: String::from_utf8(body).unwrap(),
        });
        if probes.len() == 1 {
            let _ = started.send(());
        }
    }
    probes
}

/// Health checks need no token and take no ID: a flood of them, unauthenticated, beside a
/// client with a token minting one ID a request, takes none of its IDs. Only that client
/// mints, so each tick's IDs are sequences 0, 1, 2, ... with none missing; a probe that
/// took an ID would leave a hole (or a tick not starting at 0). Sonyflake: 256 IDs a
/// 10 ms tick, the layout where a probe's ID costs most. The probes answered while the
/// minting ran (sent at or after the first ID's tick, answered before the last one's
/// ended) were all ready, and there were some.
#[test]
fn health_checks_take_no_id_from_the_clients_that_mint() {
    let test = "health_checks_take_no_id_from_the_clients_that_mint";
    let token = "minting-client-token-0123456789";
    let state = tempdir("health-probes");
    let tokens = state.join("tokens");
    std::fs::write(&tokens, format!("{token}\n")).unwrap();
    let server = Server::start(Setup::node(7).layout(Layout::SONYFLAKE).tokens(&tokens, false));
    // Two probing connections; the flood is under way before the minting starts.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (started, probing) = mpsc::channel();
    let probers: Vec<_> = (0..2)
        .map(|_| {
            let (address, stop, started) = (server.address.clone(), Arc::clone(&stop), started.clone());
            std::thread::spawn(move || probe_until(&address, &stop, &started))
        })
        .collect();
    for _ in 0..2 {
        probing.recv().unwrap();
    }
    let mints = vec![server.url("/v1/ids?count=1"); 3_000];
    let bearer = format!("Authorization: Bearer {token}");
    let Some(minter) = curl_sequence(&mints, &[&bearer]) else {
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        skip(test, "no curl");
        return;
    };
    let output = minter.wait_with_output().unwrap();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let answered: Vec<Probe> = probers
        .into_iter()
        .flat_map(|prober| prober.join().unwrap())
        .collect();
    let bodies = String::from_utf8(output.stdout).unwrap();
    let lines: Vec<&str> = bodies.lines().collect();
    let mut ids = Vec::new();
    for answer in lines.chunks(2) {
        assert_eq!(answer.get(1), Some(&"200"), "{answer:?}");
        ids.extend(ids_of(answer[0]));
    }
    assert_eq!(ids.len(), 3_000);
    let mut ticks = std::collections::BTreeMap::<u64, Vec<u64>>::new();
    for &id in &ids {
        let parts = Layout::SONYFLAKE.decode(Id::new(id));
        assert_eq!(parts.node, 7);
        ticks.entry(parts.unix_ms).or_default().push(parts.sequence);
    }
    for (tick, sequences) in &ticks {
        let expected: Vec<u64> = (0..sequences.len() as u64).collect();
        assert_eq!(
            sequences, &expected,
            "the IDs of the tick at {tick} ms: sequences taken by someone else"
        );
    }
    // The minting window, by the IDs' own times: from the first ID's tick to the end of
    // the last one's (a Sonyflake tick is 10 ms).
    let first_tick = *ticks.keys().next().unwrap();
    let window = first_tick..ticks.keys().next_back().unwrap() + 10;
    let during: Vec<&Probe> = answered
        .iter()
        .filter(|probe| window.contains(&probe.sent_ms) && window.contains(&probe.answered_ms))
        .collect();
    let unready: Vec<(u16, &str)> = answered
        .iter()
        .filter(|probe| (probe.status, probe.body.as_str()) != (200, "serving\n"))
        .map(|probe| (probe.status, probe.body.as_str()))
        .collect();
    assert!(unready.is_empty(), "probes not answered ready: {unready:?}");
    assert!(
        !during.is_empty(),
        "no probe was answered while the minting ran ({} ms from {first_tick}); {} probes in all",
        window.end - window.start,
        answered.len()
    );
    println!(
        "{} IDs in {} ticks over {} ms beside {} probes answered ready within that time ({} in all), none \
         taken",
        ids.len(),
        ticks.len(),
        window.end - window.start,
        during.len(),
        answered.len()
    );
}

/// `GetIds(count)` with `grpc-timeout: timeout`, as [`grpc_status`] says it ended.
fn get_ids_with_grpc_timeout(
    test: &str,
    server: &Server,
    count: u32,
    timeout: &str,
) -> Option<(String, String, Duration)> {
    grpc_status(test, grpc(server, "GetIds", count.into(), Some(timeout)))
}

#[test]
fn a_grpc_call_past_its_grpc_timeout_is_ended_by_the_server() {
    let test = "a_grpc_call_past_its_grpc_timeout_is_ended_by_the_server";
    // A million Sonyflake IDs take 39 s on one node (256 a 10 ms tick).
    let server = Server::start(Setup::node(3).layout(Layout::SONYFLAKE).limits(Limits {
        max_count: 1 << 20,
        ..Limits::default()
    }));
    let Some((status, message, took)) = get_ids_with_grpc_timeout(test, &server, 1_000_000, "300m") else {
        return;
    };
    // DEADLINE_EXCEEDED, from the server: curl keeps no deadline.
    assert_eq!(
        (status.as_str(), message.as_str()),
        ("4", "the call's deadline (grpc-timeout) passed before its answer")
    );
    // Ended by the server, not by the answer's end: half the time the whole answer takes.
    let whole = Duration::from_millis(1_000_000 / 256 * 10);
    assert!(took < whole / 2, "{took:?}");
    assert_eq!(
        metric(
            &server.address,
            "atomflake_requests_total{api=\"grpc\",outcome=\"deadline_exceeded\"}"
        ),
        1
    );
    let (status, message, _) = get_ids_with_grpc_timeout(test, &server, 1, "soon").unwrap();
    assert_eq!(
        (status.as_str(), message.as_str()),
        (
            "3",
            "grpc-timeout \"soon\" is invalid: allowed 1 to 8 digits and a unit of H, M, S, m, u or n"
        )
    );
    // Within its deadline, a call is answered.
    let (status, _, _) = get_ids_with_grpc_timeout(test, &server, 100, "10S").unwrap();
    assert_eq!(status, "0");
}

#[test]
fn a_stream_past_the_servers_most_is_refused_until_one_ends() {
    let test = "a_stream_past_the_servers_most_is_refused_until_one_ends";
    let server = Server::start(Setup::node(3).limits(Limits {
        max_streams: 1,
        ..Limits::default()
    }));
    // One stream that would take 17 minutes holds the only place.
    let Ok(mut first) = grpc(&server, "StreamIds", 1 << 32, None)
        .stdout(Stdio::null())
        .spawn()
    else {
        skip(test, "no curl");
        return;
    };
    let deadline = Instant::now() + HANG_GUARD;
    while metric(&server.address, "atomflake_ids_served_total{api=\"grpc\"}") == 0 {
        assert!(Instant::now() < deadline, "the first stream never started");
        std::thread::sleep(Duration::from_millis(50));
    }
    let (status, message, _) = grpc_status(test, grpc(&server, "StreamIds", 10, None)).unwrap();
    assert_eq!(
        (status.as_str(), message.as_str()),
        (
            "8",
            "the server has its most streams under way (1): try again once one ends"
        )
    );
    // The first client goes away: its stream stops, and the place is free again.
    let _ = first.kill();
    let _ = first.wait();
    let deadline = Instant::now() + HANG_GUARD;
    loop {
        let (status, message, _) = grpc_status(test, grpc(&server, "StreamIds", 10, None)).unwrap();
        if status == "0" {
            break;
        }
        assert!(Instant::now() < deadline, "still refused: {status} {message}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A `StreamIds` whose client (grpcio) stops reading without cancelling holds its place
/// among the server's streams for the stall timeout at most: then the stream ends, and
/// another is admitted. The client, reading again, gets the IDs sent before, then
/// `DEADLINE_EXCEEDED`.
#[test]
fn a_stream_whose_client_stops_reading_ends_at_the_stall_timeout_and_frees_its_place() {
    let test = "a_stream_whose_client_stops_reading_ends_at_the_stall_timeout_and_frees_its_place";
    let Some(client) = PythonClient::new(test, &venv(), "serve_stall.py") else {
        return;
    };
    let stall = Duration::from_secs(3);
    let server = Server::start(Setup::node(3).limits(Limits {
        max_streams: 1,
        stall_timeout: stall,
        ..Limits::default()
    }));
    let stubs = tempdir("stubs-stall");
    let (mut reader, mut resume, mut said) =
        spawn_piped(&mut client.command(&server.address, &stubs, &(1u64 << 32).to_string()));
    assert_eq!(said.next().unwrap().unwrap(), "streaming");
    // Its stream holds the only place: for the stall timeout (3 s) at least, as it
    // cannot be waited out before the buffers fill.
    let (status, message, _) = grpc_status(test, grpc(&server, "StreamIds", 10, None)).unwrap();
    assert_eq!(
        (status.as_str(), message.as_str()),
        (
            "8",
            "the server has its most streams under way (1): try again once one ends"
        )
    );
    // Reading nothing, it loses the place: a new stream is served. The stream's IDs are
    // counted as each message is handed on; once the client's window and the buffers are
    // full, the next send waits, and the stall timeout runs from there. So the place is
    // free within the stall timeout of the count's last change, give or take what this
    // loop cannot see: one turn of it (a metrics read, a stream asked for, a pause).
    // The server's own timer and the tasks that end the stream run late on a machine the
    // test shares (CI's, beside other tests and loads): half a second of that is allowed,
    // far below what a stream that kept its place would show.
    let ids_counted = || metric(&server.address, "atomflake_ids_served_total{api=\"grpc\"}");
    let (pause, late) = (Duration::from_millis(100), Duration::from_millis(500));
    let (mut count, mut changed) = (ids_counted(), Instant::now());
    let mut longest_turn = Duration::ZERO;
    let freed = loop {
        let turn = Instant::now();
        let now_counted = ids_counted();
        if now_counted != count {
            (count, changed) = (now_counted, turn);
        }
        let (status, message, _) = grpc_status(test, grpc(&server, "StreamIds", 10, None)).unwrap();
        if status == "0" {
            longest_turn = longest_turn.max(turn.elapsed());
            break turn.elapsed() + turn.duration_since(changed);
        }
        assert_eq!(
            (status.as_str(), message.as_str()),
            (
                "8",
                "the server has its most streams under way (1): try again once one ends"
            )
        );
        std::thread::sleep(pause);
        longest_turn = longest_turn.max(turn.elapsed());
        assert!(
            changed.elapsed() < stall + 2 * longest_turn + pause + late,
            "the stream not read still holds its place {:?} after its last IDs were counted (stall \
             timeout {stall:?}, longest turn of this loop {longest_turn:?})",
            changed.elapsed()
        );
    };
    // The count's last change was seen within one turn after it happened, and the place
    // freed is seen within one turn after it is.
    assert!(
        freed <= stall + 2 * longest_turn + late,
        "freed {freed:?} after the last IDs were counted: past the stall timeout {stall:?}, two turns \
         of this loop ({longest_turn:?} each) and {late:?} late"
    );
    println!(
        "a new stream served {freed:?} after the first one's last IDs were counted (stall timeout {stall:?}, \
         longest turn {longest_turn:?})"
    );
    std::io::Write::write_all(&mut resume, b"go\n").unwrap();
    let ended = said.next().unwrap().unwrap();
    let _ = reader.wait();
    let received: u64 = ended
        .strip_prefix("ended DEADLINE_EXCEEDED after ")
        .and_then(|rest| rest.split(':').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{ended}"));
    assert!(
        ended.ends_with(
            ": this stream's client read nothing for 3s: the stream ended after the IDs it sent, freeing its place"
        ),
        "{ended}"
    );
    assert!(received > 0, "{ended}");
    assert_eq!(
        metric(
            &server.address,
            "atomflake_requests_total{api=\"grpc\",outcome=\"deadline_exceeded\"}"
        ),
        1
    );
    let _ = std::fs::remove_dir_all(stubs);
}

#[test]
fn a_browser_page_of_an_allowed_origin_may_call_the_http_api() {
    let test = "a_browser_page_of_an_allowed_origin_may_call_the_http_api";
    let server = Server::start(Setup {
        cors_origins: vec!["https://app.example.com".to_owned()],
        ..Setup::node(1)
    });
    let headers_of = |args: &[&str]| -> Option<String> {
        let output = Command::new("curl")
            .args(["-s", "--max-time", "10", "-D", "-", "-o", "/dev/null"])
            .args(args)
            .arg(server.url("/v1/ids?count=2"))
            .output()
            .ok()?;
        Some(String::from_utf8_lossy(&output.stdout).to_ascii_lowercase())
    };
    let preflight = ["-X", "OPTIONS", "-H", "access-control-request-method: GET", "-H"];
    let Some(allowed) = headers_of(&[&preflight[..], &["origin: https://app.example.com"]].concat()) else {
        skip(test, "no curl");
        return;
    };
    assert!(allowed.starts_with("http/1.1 204"), "{allowed}");
    assert!(
        allowed.contains("access-control-allow-origin: https://app.example.com\r\n"),
        "{allowed}"
    );
    assert!(
        allowed.contains("access-control-allow-methods: get, post\r\n"),
        "{allowed}"
    );
    let get = headers_of(&["-H", "origin: https://app.example.com"]).unwrap();
    assert!(get.starts_with("http/1.1 200"), "{get}");
    assert!(
        get.contains("access-control-allow-origin: https://app.example.com\r\n"),
        "{get}"
    );
    // Another origin's page is not let read the answer, nor is a preflight answered.
    let other = headers_of(&["-H", "origin: https://other.example.com"]).unwrap();
    assert!(
        other.starts_with("http/1.1 200") && !other.contains("access-control-allow-origin"),
        "{other}"
    );
    let other = headers_of(&[&preflight[..], &["origin: https://other.example.com"]].concat()).unwrap();
    assert!(!other.contains("access-control-allow-origin"), "{other}");
}

#[test]
fn a_connection_is_held_to_its_id_rate_over_http_and_in_a_stream() {
    let test = "a_connection_is_held_to_its_id_rate_over_http_and_in_a_stream";
    let server = Server::start(Setup::node(2).limits(Limits {
        ids_per_second: Some(5000),
        ..Limits::default()
    }));
    // Two requests of 4,096 IDs on one connection (curl keeps it): the second is over the
    // 5,000 a second.
    let url = server.url("/v1/ids?count=4096");
    let Ok(output) = Command::new("curl")
        .args(["-s", "--max-time", "10", "-w", "\n%{http_code}\n"])
        .args([&url, &url])
        .output()
    else {
        skip(test, "no curl");
        return;
    };
    let answers = String::from_utf8(output.stdout).unwrap();
    let lines: Vec<&str> = answers.lines().collect();
    assert_eq!(lines.len(), 4, "{answers}");
    assert_eq!(lines[1], "200");
    assert_eq!(ids_of(lines[0]).len(), 4096);
    assert_eq!(
        (lines[3], lines[2]),
        (
            "429",
            "{\"error\":\"over this connection's ID rate: allowed 5000 IDs per second\"}"
        )
    );
    // A stream of 20,000 IDs is slowed to it: a burst of 5,000, then 15,000 over 3 s.
    let (status, message, took) = grpc_status(test, grpc(&server, "StreamIds", 20_000, None)).unwrap();
    assert_eq!((status.as_str(), message.as_str()), ("0", ""));
    assert!(took >= Duration::from_millis(2_500), "20,000 IDs in {took:?}");
    assert_eq!(
        metric(&server.address, "atomflake_ids_served_total{api=\"grpc\"}"),
        20_000
    );
}

/// One `--tls-cert` port serves HTTP/2 and HTTP/1.1 by ALPN to curl and HTTPS and gRPC to
/// Python's `requests` and `grpcio`, each verifying the server against its CA; a client
/// that trusts another CA, or speaks plain HTTP, gets nothing.
#[test]
fn over_tls_curl_requests_and_grpcio_get_ids_by_alpn_and_a_wrong_ca_is_refused() {
    let test = "over_tls_curl_requests_and_grpcio_get_ids_by_alpn_and_a_wrong_ca_is_refused";
    let Some(pki) = tls_pki(test) else {
        return;
    };
    let token = "python-client-token-0123456789";
    let tokens = pki.path("tokens");
    std::fs::write(&tokens, format!("{token}\n")).unwrap();
    let server = Server::start(Setup::node(9).tls(&pki, None).tokens(&tokens, false));
    let ca = pki.path("ca.pem").display().to_string();
    let bearer = format!("Authorization: Bearer {token}");
    let before = now_ms() - CLOCK_LAG_MS;
    let mut ids = Vec::new();
    for (version, expected) in [("--http2", "200 2"), ("--http1.1", "200 1.1")] {
        let (code, status, body) = curl_https(
            &server.address,
            "/v1/ids?count=3",
            &[version, "--cacert", &ca, "-H", &bearer],
        );
        assert_eq!((code, status.as_str()), (0, expected), "{body}");
        ids.extend(ids_of(&body));
    }
    let (code, _, body) = curl_https(
        &server.address,
        "/readyz",
        &["--cacert", &pki.path("other-ca.pem").display().to_string()],
    );
    assert_eq!(
        code, 60,
        "curl: the server's certificate cannot be verified: {body}"
    );
    let plain = Command::new("curl")
        .args(["-sS", "--max-time", "10", &server.url("/readyz")])
        .output()
        .unwrap();
    assert!(!plain.status.success(), "plain HTTP on the TLS port: {plain:?}");

    if let Some(client) = PythonClient::new(test, &venv(), "serve_tls_client.py") {
        let stubs = tempdir("stubs-tls");
        let mut command = client.command(&server.address, &stubs, &ca);
        command.arg(pki.path("other-ca.pem")).arg(token);
        let python = PythonClient::ids(command, "serve_tls_client.py");
        assert_eq!(python.len(), 5 + 7);
        ids.extend(python);
        let _ = std::fs::remove_dir_all(stubs);
    }
    let distinct: HashSet<u64> = ids.iter().copied().collect();
    assert_eq!(distinct.len(), ids.len(), "an ID twice: {ids:?}");
    assert_decode(&ids, Layout::TWITTER, 9, before, now_ms());
    let logs = server.logs.clone();
    assert_eq!(server.stop(), Drained::Finished);
    let logs = logs.text();
    assert!(!logs.contains(token), "the token is logged: {logs}");
}

/// With `--tls-client-ca`, a client without a certificate, with one another CA signed,
/// or with an expired one is refused in the handshake; one the CA signed is served. A new
/// CA in the file is taken for the connections after.
#[test]
fn client_certificates_of_the_ca_alone_are_served_and_expired_ones_are_refused() {
    let test = "client_certificates_of_the_ca_alone_are_served_and_expired_ones_are_refused";
    let Some(pki) = tls_pki(test) else {
        return;
    };
    let ca = pki.path("ca.pem").display().to_string();
    let client_ca = pki.path("client-ca.pem");
    std::fs::copy(pki.path("ca.pem"), &client_ca).unwrap();
    let server = Server::start(Setup::node(3).tls(&pki, Some(client_ca.clone())));
    let with = |name: &str| {
        let (cert, key) = (pki.path(&format!("{name}.crt")), pki.path(&format!("{name}.key")));
        curl_https(
            &server.address,
            "/v1/ids?count=2",
            &[
                "--cacert",
                &ca,
                "--cert",
                cert.to_str().unwrap(),
                "--key",
                key.to_str().unwrap(),
            ],
        )
    };
    let (code, status, body) = with("client");
    assert_eq!((code, status.as_str()), (0, "200 2"), "{body}");
    assert_eq!(ids_of(&body).len(), 2);
    for refused in ["stranger", "expired"] {
        let (code, _, body) = with(refused);
        assert_ne!(code, 0, "{refused}: {body}");
    }
    let (code, _, body) = curl_https(&server.address, "/v1/ids?count=2", &["--cacert", &ca]);
    assert_ne!(code, 0, "no client certificate: {body}");
    let client_cert = pki.path("client.crt").display().to_string();
    let client_key = pki.path("client.key").display().to_string();
    let (_, _, metrics) = curl_https(
        &server.address,
        "/metrics",
        &["--cacert", &ca, "--cert", &client_cert, "--key", &client_key],
    );
    assert!(
        metrics.contains("atomflake_tls_handshake_failures_total 3"),
        "{metrics}"
    );

    // The other CA put in place by rename: its client is served, and the first CA's not.
    replace(&client_ca, std::fs::read(pki.path("other-ca.pem")).unwrap(), None);
    wait_until(
        "the new client CA is not taken",
        Duration::from_millis(100),
        || with("stranger").0 == 0,
        String::new,
    );
    assert_ne!(with("client").0, 0, "the old client CA is still trusted");
    assert_eq!(server.stop(), Drained::Finished);
}

/// A client whose CA is taken out of `--tls-client-ca` stops minting on the connection it
/// holds open: the reload closes that connection, and the next call on the same grpcio
/// channel fails (its new handshake is refused). A client of the CA still trusted keeps its
/// connection and mints on.
#[test]
fn a_client_ca_taken_out_of_trust_closes_its_clients_open_connections() {
    let test = "a_client_ca_taken_out_of_trust_closes_its_clients_open_connections";
    let Some(pki) = tls_pki(test) else {
        return;
    };
    let Some(client) = PythonClient::new(test, &venv(), "serve_mtls_client.py") else {
        return;
    };
    // Both CAs trusted at first.
    let client_ca = pki.path("client-ca.pem");
    let both = [pki.path("ca.pem"), pki.path("other-ca.pem")].map(|ca| std::fs::read_to_string(ca).unwrap());
    std::fs::write(&client_ca, both.concat()).unwrap();
    let server = Server::start(Setup::node(6).tls(&pki, Some(client_ca.clone())));
    let stubs = tempdir("stubs-mtls");
    let mut clients = client.command(&server.address, &stubs, pki.path("ca.pem").to_str().unwrap());
    for name in ["client.crt", "client.key", "stranger.crt", "stranger.key"] {
        clients.arg(pki.path(name));
    }
    let (mut clients, mut go, mut said) = spawn_piped(&mut clients);
    assert_eq!(said.next().unwrap().unwrap(), "minted 12");

    // The first CA taken out (the file replaced by rename), and the reload seen.
    replace(&client_ca, std::fs::read(pki.path("other-ca.pem")).unwrap(), None);
    let seen = Instant::now();
    while !server.logs.text().contains("TLS certificate reloaded") {
        assert!(seen.elapsed() < HANG_GUARD, "no reload of the client CA");
        std::thread::sleep(Duration::from_millis(20));
    }
    std::io::Write::write_all(&mut go, b"go\n").unwrap();
    let first = said.next().unwrap().unwrap();
    let second = said.next().unwrap().unwrap();
    let _ = clients.wait();
    assert_eq!(
        (first.as_str(), second.as_str()),
        ("first: closed UNAVAILABLE", "second: open ok")
    );
    let (code, _, metrics) = curl_https(
        &server.address,
        "/metrics",
        &[
            "--cacert",
            pki.path("ca.pem").to_str().unwrap(),
            "--cert",
            pki.path("stranger.crt").to_str().unwrap(),
            "--key",
            pki.path("stranger.key").to_str().unwrap(),
        ],
    );
    assert_eq!(code, 0, "{metrics}");
    assert!(
        metrics
            .lines()
            .any(|line| line == "atomflake_connections_closed_total{reason=\"client_untrusted\"} 1"),
        "{metrics}"
    );
    assert_eq!(server.stop(), Drained::Finished);
    let _ = std::fs::remove_dir_all(stubs);
}

/// The `ids` of a `GET` that answers 200 with JSON, each as JSON gives it.
fn json_ids(server: &Server, path: &str) -> Vec<serde_json::Value> {
    let (status, body) = curl(&server.url(path)).unwrap();
    assert_eq!(status, 200, "{body}");
    let mut answer: serde_json::Value = serde_json::from_str(&body).unwrap();
    match answer["ids"].take() {
        serde_json::Value::Array(ids) => ids,
        other => panic!("{path} answered ids {other}"),
    }
}

/// curl's GET of `path` with `token` as a bearer token, if any: the status, and the
/// headers and body.
fn curl_with_token(server: &Server, path: &str, token: Option<&str>) -> (u16, String) {
    let mut command = Command::new("curl");
    command.args(["-sS", "--max-time", "10", "-D", "-", "-w", "\n%{http_code}"]);
    if let Some(token) = token {
        command.args(["-H", &format!("Authorization: Bearer {token}")]);
    }
    let output = command.arg(server.url(path)).output().expect("curl runs");
    let answer = String::from_utf8(output.stdout).unwrap();
    let (rest, status) = answer.rsplit_once('\n').unwrap();
    (status.parse::<u16>().unwrap(), rest.to_owned())
}

/// With tokens, the ID endpoints over HTTP and gRPC ask for one of them; health checks
/// and (unless the tokens guard it) `/metrics` do not; a reload (what SIGHUP asks of the
/// command: `cli/tests/serve.rs`), and a change of the file, read it again; no token shows
/// in the log or the metrics.
#[test]
fn tokens_guard_the_id_endpoints_reload_when_asked_or_changed_and_are_never_shown() {
    let test = "tokens_guard_the_id_endpoints_reload_when_asked_or_changed_and_are_never_shown";
    let (first, second, third) = (
        "first-token-0123456789",
        "second-token-0123456789",
        "third-token-0123456789",
    );
    let state = tempdir("tokens");
    let file = state.join("tokens");
    std::fs::write(&file, format!("# the ops team\n{first}\n{second}\n")).unwrap();
    let server = Server::start(Setup::node(4).tokens(&file, false));
    let get = |path: &str, token: Option<&str>| curl_with_token(&server, path, token);
    for token in [first, second] {
        assert_eq!(get("/v1/ids?count=1", Some(token)).0, 200, "{token}");
    }
    for token in [None, Some("first-token-012345678"), Some(third)] {
        let (status, answer) = get("/v1/ids?count=1", token);
        assert_eq!(status, 401, "{token:?}: {answer}");
        assert!(answer.contains("www-authenticate: Bearer"), "{answer}");
        assert!(
            answer.ends_with(
                r#"{"error":"a bearer token is required: Authorization: Bearer TOKEN, one of the server's --token-file"}"#
            ),
            "{answer}"
        );
    }
    for path in ["/healthz", "/livez", "/readyz", "/metrics"] {
        assert_eq!(get(path, None).0, 200, "{path}");
    }
    let Some((status, message, _)) = grpc_status(test, grpc(&server, "GetIds", 1, None)) else {
        return;
    };
    assert_eq!(
        (status.as_str(), message.as_str()),
        (
            "16",
            "a bearer token is required: Authorization: Bearer TOKEN, one of the server's --token-file"
        )
    );
    let mut call = grpc(&server, "GetIds", 1, None);
    call.args(["-H", &format!("authorization: Bearer {second}")]);
    assert_eq!(grpc_status(test, call).unwrap().0, "0");

    // Asked to reload, with the file's time stamp kept so that only the asking can tell.
    replace_keeping_stamp(&file, format!("{third}\n"));
    std::thread::sleep(Duration::from_millis(2_500));
    assert_eq!(
        get("/v1/ids?count=1", Some(third)).0,
        401,
        "reloaded without being asked"
    );
    // Each request refused while waiting for a reload is counted below.
    let mut refused = 4;
    let mut wait_for = |token: &str| {
        let taken = || {
            let taken = get("/v1/ids?count=1", Some(token)).0 == 200;
            refused += usize::from(!taken);
            taken
        };
        wait_until(
            &format!("{token} is not taken"),
            Duration::from_millis(50),
            taken,
            String::new,
        );
    };
    // The server's reload trigger.
    server.reload.send(()).unwrap();
    wait_for(third);
    // A change of the file is enough.
    let fourth = "fourth-token-0123456789";
    replace(&file, format!("{fourth}\n"), None);
    wait_for(fourth);
    let refused = refused + 1;
    assert_eq!(get("/v1/ids?count=1", Some(third)).0, 401);
    let (_, metrics) = get("/metrics", None);
    assert!(
        metrics.contains(&format!(
            r#"atomflake_requests_total{{api="http",outcome="unauthenticated"}} {refused}"#
        )) && metrics.contains(r#"atomflake_requests_total{api="grpc",outcome="unauthenticated"} 1"#),
        "{metrics}"
    );
    let logs = server.logs.clone();
    assert_eq!(server.stop(), Drained::Finished);
    let logs = logs.text();
    for token in [first, second, third, fourth] {
        assert!(
            !logs.contains(token) && !metrics.contains(token),
            "{token} shown: {logs}"
        );
    }
    // The trigger's reload and the watch's.
    assert!(logs.contains("tokens reloaded (asked by the test): 1"), "{logs}");
    assert!(logs.contains("tokens reloaded (its file changed): 1"), "{logs}");
}

/// With tokens that guard `/metrics`, it asks for a token too; health checks stay open.
#[test]
fn metrics_token_guards_metrics_and_leaves_health_open() {
    let token = "metrics-token-0123456789";
    let state = tempdir("metrics-token");
    let file = state.join("tokens");
    std::fs::write(&file, format!("{token}\n")).unwrap();
    let guarded = Server::start(Setup::node(4).tokens(&file, true));
    let get = |path: &str, token: Option<&str>| {
        let mut command = Command::new("curl");
        command.args(["-s", "--max-time", "10", "-o", "/dev/null", "-w", "%{http_code}"]);
        if let Some(token) = token {
            command.args(["-H", &format!("Authorization: Bearer {token}")]);
        }
        let output = command.arg(guarded.url(path)).output().expect("curl runs");
        String::from_utf8(output.stdout).unwrap()
    };
    assert_eq!(
        (
            get("/metrics", None),
            get("/metrics", Some(token)),
            get("/readyz", None)
        ),
        ("401".to_owned(), "200".to_owned(), "200".to_owned())
    );
}
