//! Compression, negotiated per call: a gRPC answer of at least a KiB goes out in the gzip
//! or zstd the client accepts (`grpc-accept-encoding`), a smaller one as it is, and a
//! compressed request is read; an HTTP/JSON answer of at least a KiB goes out in the gzip,
//! zstd or brotli of `Accept-Encoding`. Sent by curl (and h2load, many at once), read here
//! with the flate2, zstd and brotli-decompressor crates.

use super::{Server, Setup, tempdir};
use atomflake::{Id, Layout};
use atomflake_test_servers::clients::count_message;
use atomflake_test_servers::{HANG_GUARD, skip};
use std::collections::HashSet;
use std::io::{Read, Write};
use std::path::Path;
use std::process::Command;

/// `GetIdsRequest { count }`, encoded.
fn get_ids_request(count: u32) -> Vec<u8> {
    count_message(u64::from(count))
}

/// `message` in gRPC's frame: the compressed flag, the length, the bytes.
fn framed(compressed: bool, message: &[u8]) -> Vec<u8> {
    let mut frame = vec![u8::from(compressed)];
    frame.extend(u32::try_from(message.len()).unwrap().to_be_bytes());
    frame.extend(message);
    frame
}

/// curl's request to `path` of `server` with `headers` and `args`: the answer's headers
/// (lower case) and its body as sent.
fn curl(server: &Server, scratch: &Path, path: &str, headers: &[&str], args: &[&str]) -> (String, Vec<u8>) {
    let answer = scratch.join("answer.bin");
    let mut command = Command::new("curl");
    command
        .args(["-sS", "--max-time"])
        .arg(HANG_GUARD.as_secs().to_string())
        .args(["-D", "-", "-o"])
        .arg(&answer)
        .args(args);
    for header in headers {
        command.args(["-H", header]);
    }
    let output = command
        .arg(format!("http://{}{path}", server.address))
        .output()
        .expect("curl runs");
    assert!(output.status.success(), "curl: {output:?}");
    (
        String::from_utf8_lossy(&output.stdout).to_lowercase(),
        std::fs::read(&answer).unwrap(),
    )
}

/// A `GetIds` with `body` and `headers`, over curl (HTTP/2).
fn call(server: &Server, scratch: &Path, body: &[u8], headers: &[&str]) -> (String, Vec<u8>) {
    let request = scratch.join("request.bin");
    std::fs::write(&request, body).unwrap();
    let data = format!("@{}", request.display());
    let grpc = ["content-type: application/grpc", "te: trailers"];
    let args = ["--http2-prior-knowledge", "--data-binary", &data];
    curl(
        server,
        scratch,
        "/atomflake.v1.Ids/GetIds",
        &[&grpc[..], headers].concat(),
        &args,
    )
}

/// The IDs of a `GetIdsResponse` (field 1, packed fixed64).
fn ids_of(message: &[u8]) -> Vec<u64> {
    assert_eq!(message[0], 0x0a, "field 1, length-delimited");
    let (mut length, mut at) = (0_usize, 1);
    while message[at] & 0x80 != 0 {
        length |= usize::from(message[at] & 0x7f) << (7 * (at - 1));
        at += 1;
    }
    length |= usize::from(message[at]) << (7 * (at - 1));
    let packed = &message[at + 1..];
    assert_eq!(packed.len(), length);
    packed
        .chunks(8)
        .map(|bytes| u64::from_le_bytes(bytes.try_into().unwrap()))
        .collect()
}

/// The message of a one-message answer, decompressed as its flag and `grpc-encoding` say.
fn message_of(headers: &str, body: &[u8]) -> (Option<&'static str>, Vec<u8>) {
    let length = u32::from_be_bytes(body[1..5].try_into().unwrap()) as usize;
    let message = &body[5..5 + length];
    let encoding = ["gzip", "zstd"]
        .into_iter()
        .find(|encoding| headers.contains(&format!("grpc-encoding: {encoding}")));
    match (body[0], encoding) {
        (0, _) => (None, message.to_vec()),
        (1, Some("gzip")) => {
            let mut plain = Vec::new();
            flate2::read::GzDecoder::new(message)
                .read_to_end(&mut plain)
                .unwrap();
            (encoding, plain)
        }
        (1, Some("zstd")) => (encoding, zstd::decode_all(message).unwrap()),
        (flag, encoding) => panic!("flag {flag} with grpc-encoding {encoding:?}: {headers}"),
    }
}

#[test]
fn grpc_answers_of_a_kib_or_more_go_compressed_as_the_client_accepts() {
    let server = Server::start(Setup::node(5));
    let scratch = tempdir("grpc-compression");
    let mut seen = HashSet::new();
    for (accepts, count, sent_in) in [
        (Some("gzip"), 4096, Some("gzip")),
        (Some("zstd"), 4096, Some("zstd")),
        (Some("identity, deflate, gzip"), 4096, Some("gzip")),
        (Some("gzip"), 128, Some("gzip")),
        // Below a KiB, and to a client that takes nothing compressed: as it is.
        (Some("gzip"), 127, None),
        (Some("zstd"), 1, None),
        (None, 4096, None),
        (Some("deflate"), 4096, None),
    ] {
        let header = accepts.map(|accepts| format!("grpc-accept-encoding: {accepts}"));
        let headers: Vec<&str> = header.iter().map(String::as_str).collect();
        let (answer_headers, body) = call(
            &server,
            &scratch,
            &framed(false, &get_ids_request(count)),
            &headers,
        );
        let (encoding, message) = message_of(&answer_headers, &body);
        assert_eq!(encoding, sent_in, "{accepts:?} {count}: {answer_headers}");
        let ids = ids_of(&message);
        assert_eq!(ids.len(), count as usize, "{accepts:?} {count}");
        for id in ids {
            assert_eq!(Layout::TWITTER.decode(Id::new(id)).node, 5);
            assert!(seen.insert(id), "{id} twice");
        }
    }
    // A compressed request (grpc-encoding) is read, in either encoding.
    let request = get_ids_request(300);
    let mut gzip = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gzip.write_all(&request).unwrap();
    for (encoding, compressed) in [
        ("gzip", gzip.finish().unwrap()),
        ("zstd", zstd::encode_all(&request[..], 3).unwrap()),
    ] {
        let sent = format!("grpc-encoding: {encoding}");
        let (answer_headers, body) = call(&server, &scratch, &framed(true, &compressed), &[&sent]);
        assert!(
            answer_headers.contains("grpc-status: 0") || !body.is_empty(),
            "{answer_headers}"
        );
        let (_, message) = message_of(&answer_headers, &body);
        assert_eq!(ids_of(&message).len(), 300, "{encoding}: {answer_headers}");
    }
}

/// `body` decoded as its `content-encoding` says, and that encoding.
fn decoded(headers: &str, body: &[u8]) -> (Option<&'static str>, Vec<u8>) {
    let encoding = ["gzip", "zstd", "br"]
        .into_iter()
        .find(|encoding| headers.contains(&format!("content-encoding: {encoding}\r\n")));
    let mut plain = Vec::new();
    match encoding {
        None => plain.extend_from_slice(body),
        Some("gzip") => {
            flate2::read::GzDecoder::new(body)
                .read_to_end(&mut plain)
                .unwrap();
        }
        Some("zstd") => plain = zstd::decode_all(body).unwrap(),
        Some(_) => {
            brotli_decompressor::Decompressor::new(body, 4096)
                .read_to_end(&mut plain)
                .unwrap();
        }
    }
    (encoding, plain)
}

#[test]
fn http_answers_of_a_kib_or_more_go_compressed_as_the_client_accepts() {
    let server = Server::start(Setup::node(5));
    let scratch = tempdir("http-compression");
    let mut seen = HashSet::new();
    // Twitter's IDs of today have 19 digits: 22 bytes each in the JSON, 9 around them.
    for (accepts, count, sent_in) in [
        (Some("gzip"), 4096, Some("gzip")),
        (Some("zstd"), 4096, Some("zstd")),
        (Some("br"), 4096, Some("br")),
        (Some("gzip;q=0, zstd"), 4096, Some("zstd")),
        (Some("gzip"), 50, Some("gzip")),
        // Below a KiB: 44 are answered beside the router, 46 by it.
        (Some("gzip"), 46, None),
        (Some("gzip, zstd, br"), 44, None),
        (Some("gzip;q=0"), 4096, None),
        (Some("identity"), 4096, None),
        (None, 4096, None),
    ] {
        let header = accepts.map(|accepts| format!("accept-encoding: {accepts}"));
        let headers: Vec<&str> = header.iter().map(String::as_str).collect();
        let path = format!("/v1/ids?count={count}");
        let (answer_headers, body) = curl(&server, &scratch, &path, &headers, &[]);
        assert!(answer_headers.starts_with("http/1.1 200"), "{answer_headers}");
        let (encoding, json) = decoded(&answer_headers, &body);
        assert_eq!(encoding, sent_in, "{accepts:?} {count}: {answer_headers}");
        if encoding.is_some() {
            assert!(body.len() < json.len(), "{accepts:?} {count}: no smaller");
            assert!(
                answer_headers.contains("vary: accept-encoding\r\n"),
                "{answer_headers}"
            );
        }
        let json: serde_json::Value = serde_json::from_slice(&json).unwrap();
        let ids: Vec<u64> = json["ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|id| id.as_str().unwrap().parse().unwrap())
            .collect();
        assert_eq!(ids.len(), count, "{accepts:?} {count}");
        for id in ids {
            assert_eq!(Layout::TWITTER.decode(Id::new(id)).node, 5);
            assert!(seen.insert(id), "{id} twice");
        }
    }
}

/// h2load's count of requests that succeeded, and of the bytes of DATA frames it received.
fn h2load_counts(report: &str) -> (u64, u64) {
    let line = |start: &str| {
        report
            .lines()
            .find(|line| line.starts_with(start))
            .unwrap_or_else(|| panic!("no {start} in {report}"))
    };
    // `requests: 200 total, 200 started, 200 done, 200 succeeded, ...`
    let (done, _) = line("requests:").split_once(" succeeded").unwrap();
    let succeeded = done.rsplit(' ').next().unwrap().parse().unwrap();
    // `traffic: ... total, ... headers (...), 1.19MB (1249600) data`
    let (_, data) = line("traffic:").rsplit_once('(').unwrap();
    let data = data.strip_suffix(") data").unwrap().parse().unwrap();
    (succeeded, data)
}

/// 200 compressed `GetIds{4096}`, 8 at a time on each of 2 connections from h2load, each
/// answered in the encoding it accepts: the DATA bytes per call are those of the compressed
/// message (6 KiB in gzip, 4 KiB in zstd), not the 32 KiB of the plain one, and no call
/// ends in an error (an error is a trailers-only answer, with no DATA).
#[test]
fn h2load_calls_in_gzip_and_zstd_are_read_and_answered_compressed() {
    let test = "h2load_calls_in_gzip_and_zstd_are_read_and_answered_compressed";
    if Command::new("h2load").arg("--version").output().is_err() {
        skip(test, "no h2load (Debian's nghttp2-client)");
        return;
    }
    let server = Server::start(Setup::node(5));
    let scratch = tempdir("h2load-compression");
    let request = get_ids_request(4096);
    let mut gzip = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gzip.write_all(&request).unwrap();
    let calls = 200;
    for (encoding, body, per_call) in [
        ("gzip", framed(true, &gzip.finish().unwrap()), 2_000..10_000),
        (
            "zstd",
            framed(true, &zstd::encode_all(&request[..], 3).unwrap()),
            2_000..10_000,
        ),
        ("identity", framed(false, &request), 32_777..32_778),
    ] {
        let file = scratch.join(format!("{encoding}.bin"));
        std::fs::write(&file, body).unwrap();
        let output = Command::new("h2load")
            .args(["-n", &calls.to_string(), "-c", "2", "-m", "8", "-T"])
            .arg(HANG_GUARD.as_secs().to_string())
            .args(["-H", "content-type: application/grpc", "-H", "te: trailers"])
            .args(["-H", &format!("grpc-encoding: {encoding}")])
            .args(["-H", &format!("grpc-accept-encoding: {encoding}")])
            .arg("-d")
            .arg(&file)
            .arg(format!("http://{}/atomflake.v1.Ids/GetIds", server.address))
            .output()
            .expect("h2load runs");
        let report = String::from_utf8_lossy(&output.stdout);
        let (succeeded, data) = h2load_counts(&report);
        assert_eq!(succeeded, calls, "{encoding}: {report}");
        assert!(
            per_call.contains(&(data / calls)),
            "{encoding}: {} bytes a call",
            data / calls
        );
    }
}
