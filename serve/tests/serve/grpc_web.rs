//! gRPC-Web on the gRPC port: a real gRPC-Web client (connect-web's transport, run by
//! Node.js, with code that protoc-gen-es generates from `proto/`) calls `GetIds`, `Decode`,
//! `StreamIds` and `GetLayout`, over plain HTTP and over TLS with a token; curl sends the
//! base64 form (`application/grpc-web-text`) and a browser's preflight.

use super::{CLOCK_LAG_MS, Server, Setup, assert_decode, tempdir};
use atomflake::Layout;
use atomflake_test_servers::clients::tls_pki;
use atomflake_test_servers::{HANG_GUARD, now_ms, skip};
use base64::Engine as _;
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The client's directory: `serve/tests/grpc-web` with its npm packages installed (`npm
/// ci`, again only when the lock file changed) and its code generated, once per run of the
/// test binary; `None` after a skip.
fn client(test: &str) -> Option<PathBuf> {
    static CLIENT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let made = CLIENT.get_or_init(|| {
        let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/grpc-web");
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("grpc-web-client");
        std::fs::create_dir_all(&dir).unwrap();
        for file in ["package.json", "client.mjs"] {
            std::fs::copy(source.join(file), dir.join(file)).unwrap();
        }
        let lock = std::fs::read(source.join("package-lock.json")).unwrap();
        let installed = dir.join("node_modules/.package-lock.json.installed");
        if std::fs::read(&installed).ok().as_deref() != Some(&lock[..]) {
            std::fs::write(dir.join("package-lock.json"), &lock).unwrap();
            let npm = Command::new("npm")
                .args(["ci", "--no-audit", "--no-fund", "--silent"])
                .current_dir(&dir)
                .output()
                .map_err(|error| format!("no npm ({error})"))?;
            if !npm.status.success() {
                return Err(format!("npm ci failed: {}", String::from_utf8_lossy(&npm.stderr)));
            }
            std::fs::write(&installed, &lock).unwrap();
        }
        let proto = Path::new(env!("CARGO_MANIFEST_DIR")).join("../proto");
        let generate = std::fs::read_to_string(source.join("buf.gen.yaml"))
            .unwrap()
            .replace("../../../proto", &proto.display().to_string());
        std::fs::write(dir.join("buf.gen.yaml"), generate).unwrap();
        let buf = Command::new(dir.join("node_modules/.bin/buf"))
            .arg("generate")
            .env(
                "PATH",
                format!(
                    "{}:{}",
                    dir.join("node_modules/.bin").display(),
                    std::env::var("PATH").unwrap()
                ),
            )
            .current_dir(&dir)
            .output()
            .unwrap();
        assert!(
            buf.status.success(),
            "buf generate: {}",
            String::from_utf8_lossy(&buf.stderr)
        );
        Ok(dir)
    });
    match made {
        Ok(dir) => Some(dir.clone()),
        Err(why) => {
            skip(test, why);
            None
        }
    }
}

/// `client.mjs` against `base_url` (with `token`, and trusting `ca`): its JSON.
fn run_client(dir: &Path, base_url: &str, token: Option<&str>, ca: Option<&Path>) -> serde_json::Value {
    let mut command = Command::new("timeout");
    command
        .arg(HANG_GUARD.as_secs().to_string())
        .args(["node", "client.mjs", base_url])
        .args(token)
        .current_dir(dir);
    if let Some(ca) = ca {
        command.env("NODE_EXTRA_CA_CERTS", ca);
    }
    let output = command.output().expect("node runs");
    assert!(output.status.success(), "client: {output:?}");
    serde_json::from_slice(&output.stdout).unwrap_or_else(|error| panic!("{error}: {output:?}"))
}

/// curl, to write an answer's headers alone to its output.
fn curl_head() -> Command {
    let mut curl = Command::new("curl");
    curl.args(["-sS", "--max-time", &HANG_GUARD.as_secs().to_string()])
        .args(["-D", "-", "-o", "/dev/null"]);
    curl
}

/// The IDs of a JSON array of decimal strings.
fn ids(value: &serde_json::Value) -> Vec<u64> {
    value
        .as_array()
        .unwrap()
        .iter()
        .map(|id| id.as_str().unwrap().parse().unwrap())
        .collect()
}

/// What the client printed, checked against a server of Twitter's layout on `node` whose
/// calls ran from `before` to `after`: its IDs, none twice.
fn checked(answer: &serde_json::Value, node: u64, before: u64, after: u64) -> Vec<u64> {
    assert!(answer.get("refused").is_none(), "{answer}");
    let (got, streamed) = (ids(&answer["ids"]), ids(&answer["streamed"]));
    assert_eq!((got.len(), streamed.len()), (5, 1000), "{answer}");
    let all: Vec<u64> = got.iter().chain(&streamed).copied().collect();
    assert!(
        all.windows(2).all(|pair| pair[0] < pair[1]),
        "in the order minted"
    );
    assert_decode(&all, Layout::TWITTER, node, before, after);
    let decoded = &answer["decoded"];
    let parts = Layout::TWITTER.decode(atomflake::Id::new(got[0]));
    assert_eq!(decoded["id"], got[0].to_string());
    assert_eq!(
        (decoded["node"].as_u64(), decoded["unixMs"].as_u64()),
        (Some(node), Some(parts.unix_ms))
    );
    assert_eq!(
        answer["layout"],
        serde_json::json!({ "timestampBits": 41, "nodeBits": 10, "nodes": [node] })
    );
    assert_eq!(
        answer["error"],
        serde_json::json!({ "code": "InvalidArgument", "message": "count 0 is out of range: allowed 1..=4096" })
    );
    all
}

#[test]
fn a_grpc_web_client_gets_decodes_and_streams_ids_on_the_grpc_port() {
    let test = "a_grpc_web_client_gets_decodes_and_streams_ids_on_the_grpc_port";
    let Some(dir) = client(test) else {
        return;
    };
    let origin = "https://app.example.com";
    let server = Server::start(Setup {
        cors_origins: vec![origin.to_owned()],
        ..Setup::node(7)
    });
    let before = now_ms() - CLOCK_LAG_MS;
    let answer = run_client(&dir, &server.url(""), None, None);
    let mut seen: HashSet<u64> = checked(&answer, 7, before, now_ms()).into_iter().collect();

    // The base64 form, as grpc-web's own JavaScript client sends it: GetIds{3}.
    let scratch = tempdir("grpc-web-text");
    let body = scratch.join("request.txt");
    let request = atomflake_test_servers::clients::count_message(3);
    let mut request_frame = vec![0];
    request_frame.extend(u32::try_from(request.len()).unwrap().to_be_bytes());
    request_frame.extend(request);
    std::fs::write(
        &body,
        base64::engine::general_purpose::STANDARD.encode(request_frame),
    )
    .unwrap();
    let output = Command::new("curl")
        .args(["-sS", "--max-time", &HANG_GUARD.as_secs().to_string(), "-D", "-"])
        .args([
            "-H",
            "content-type: application/grpc-web-text",
            "-H",
            "accept: application/grpc-web-text",
        ])
        .args(["-H", "x-grpc-web: 1", "-H", &format!("origin: {origin}")])
        .arg("--data-binary")
        .arg(format!("@{}", body.display()))
        .arg(server.url("/atomflake.v1.Ids/GetIds"))
        .output()
        .expect("curl runs");
    let answer = String::from_utf8(output.stdout).unwrap();
    let (head, base64_text) = answer.split_once("\r\n\r\n").unwrap();
    let head = head.to_ascii_lowercase();
    assert!(
        head.contains("content-type: application/grpc-web-text+proto\r\n"),
        "{head}"
    );
    assert!(
        head.contains(&format!("access-control-allow-origin: {origin}\r\n")),
        "{head}"
    );
    assert!(
        head.contains(
            "access-control-expose-headers: grpc-status, grpc-message, grpc-status-details-bin\r\n"
        ),
        "{head}"
    );
    // Each frame is base64 of its own, padded, so a quantum of 4 characters is decoded at
    // a time.
    let mut frames = Vec::new();
    for quantum in base64_text.as_bytes().chunks(4) {
        frames.extend(base64::engine::general_purpose::STANDARD.decode(quantum).unwrap());
    }
    let length = u32::from_be_bytes(frames[1..5].try_into().unwrap()) as usize;
    assert_eq!(frames[0], 0, "a message first");
    let message = &frames[5..5 + length];
    assert_eq!(&message[..2], &[0x0a, 24], "3 fixed64 IDs: {message:?}");
    for id in message[2..]
        .chunks(8)
        .map(|bytes| u64::from_le_bytes(bytes.try_into().unwrap()))
    {
        assert_eq!(Layout::TWITTER.decode(atomflake::Id::new(id)).node, 7);
        assert!(seen.insert(id), "{id} twice");
    }
    let trailers = &frames[5 + length..];
    assert_eq!(trailers[0], 0x80, "then the trailers");
    assert!(
        String::from_utf8_lossy(&trailers[5..]).contains("grpc-status:0"),
        "{trailers:?}"
    );
}

/// A page's preflight for the call that connect-web makes is answered for an allowed
/// origin: `POST` with gRPC-Web's headers.
#[test]
fn a_pages_preflight_for_a_grpc_web_call_allows_its_method_and_headers() {
    let origin = "https://app.example.com";
    let server = Server::start(Setup {
        cors_origins: vec![origin.to_owned()],
        ..Setup::node(7)
    });
    let output = curl_head()
        .args(["-X", "OPTIONS", "-H", &format!("origin: {origin}")])
        .args(["-H", "access-control-request-method: POST"])
        .args([
            "-H",
            "access-control-request-headers: content-type,x-grpc-web,x-user-agent,grpc-timeout",
        ])
        .arg(server.url("/atomflake.v1.Ids/GetIds"))
        .output()
        .expect("curl runs");
    let preflight = String::from_utf8_lossy(&output.stdout).to_ascii_lowercase();
    assert!(preflight.starts_with("http/1.1 204"), "{preflight}");
    assert!(
        preflight.contains("access-control-allow-methods: get, post\r\n"),
        "{preflight}"
    );
    assert!(
        preflight.contains(
            "access-control-allow-headers: authorization, content-type, grpc-timeout, x-grpc-web, x-user-agent, \
             grpc-accept-encoding\r\n"
        ),
        "{preflight}"
    );
}

/// Over TLS with tokens, gRPC-Web works as gRPC does: the client that trusts the CA and
/// sends a token gets its IDs; without the token the call is refused, in gRPC-Web's own
/// form, `UNAUTHENTICATED`.
#[test]
fn a_grpc_web_client_needs_a_token_and_works_over_tls() {
    let test = "a_grpc_web_client_needs_a_token_and_works_over_tls";
    let Some(dir) = client(test) else {
        return;
    };
    let Some(pki) = tls_pki(test) else {
        return;
    };
    let token = "grpc-web-client-token-0123456789";
    let tokens = pki.path("tokens");
    std::fs::write(&tokens, format!("{token}\n")).unwrap();
    let server = Server::start(Setup::node(9).tls(&pki, None).tokens(&tokens, false));
    let (url, ca) = (format!("https://{}", server.address), pki.path("ca.pem"));
    let before = now_ms() - CLOCK_LAG_MS;
    let answer = run_client(&dir, &url, Some(token), Some(&ca));
    checked(&answer, 9, before, now_ms());
    assert_eq!(
        run_client(&dir, &url, None, Some(&ca)),
        serde_json::json!({ "refused": {
            "code": "Unauthenticated",
            "message": "a bearer token is required: Authorization: Bearer TOKEN, one of the server's --token-file",
        } })
    );
    // The refusal is in gRPC-Web's form, as strict clients expect it, in the text form too.
    for (sent, answered) in [
        ("application/grpc-web", "application/grpc-web+proto"),
        ("application/grpc-web-text", "application/grpc-web-text+proto"),
    ] {
        let output = curl_head()
            .arg("--cacert")
            .arg(&ca)
            .args(["-H", &format!("content-type: {sent}"), "--data-binary", ""])
            .arg(format!("{url}/atomflake.v1.Ids/GetIds"))
            .output()
            .expect("curl runs");
        let head = String::from_utf8_lossy(&output.stdout).to_ascii_lowercase();
        assert!(head.contains(&format!("content-type: {answered}\r\n")), "{head}");
        assert!(head.contains("grpc-status: 16\r\n"), "{head}");
    }
}
