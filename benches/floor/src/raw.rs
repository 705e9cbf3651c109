//! The lower floor: fixed answers written straight to the socket, with no HTTP library.
//!
//! The same runtime and `TCP_NODELAY` as the hyper floor ([`super::serve`]), and the same
//! answer bytes, but nothing parsed that an answer does not need:
//!
//! - **HTTP/1.1:** every request head (up to its blank line) gets the hyper floor's JSON
//!   answer, headers included. Requests are taken to have no body, as `GET`s do.
//! - **HTTP/2 (gRPC):** frames are split by their 9-byte headers and never decoded further:
//!   no HPACK (the answers' headers are literals that need no table), no flow control of
//!   its own sends (h2load's windows are 2^30 - 1 bytes), no priorities. A request stream's
//!   end (`END_STREAM` on its `HEADERS` or `DATA`) gets `HEADERS`, a 15-byte `DATA` (one
//!   ID, as `GetIdsResponse` sends it) and the trailers `grpc-status: 0`. `SETTINGS` and
//!   `PING` are acknowledged, and received `DATA` is given back to the client's window.
//!
//! It is a floor, not a server: what any HTTP server on this machine pays at the least for
//! the reads, the writes and the loopback between it and the client. A real server parses
//! and validates what this one skips.

use std::net::SocketAddr;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// HTTP/2's client connection preface.
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// The hyper floor's HTTP/1.1 answer, byte for byte but for the date.
const HTTP1_ANSWER: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 31\r\n\
date: Thu, 26 Nov 2026 00:00:00 GMT\r\n\r\n{\"ids\":[\"1999999999999999999\"]}";

// HTTP/2 frame types and flags (RFC 9113, section 6).
const DATA: u8 = 0x0;
const HEADERS: u8 = 0x1;
const SETTINGS: u8 = 0x4;
const PING: u8 = 0x6;
const GOAWAY: u8 = 0x7;
const WINDOW_UPDATE: u8 = 0x8;
const END_STREAM: u8 = 0x1;
const ACK: u8 = 0x1;
const END_HEADERS: u8 = 0x4;

/// The answer's headers in HPACK (RFC 7541): `:status: 200` (static index 8), then
/// `content-type` (static name index 31) with the literal value `application/grpc`, not
/// indexed.
const ANSWER_HEADERS: &[u8] = b"\x88\x0f\x10\x10application/grpc";
/// The trailers: the literal name `grpc-status` with the value `0`, not indexed.
const ANSWER_TRAILERS: &[u8] = b"\x00\x0bgrpc-status\x010";
/// One ID as a gRPC message: the 5-byte frame header (uncompressed, 10 bytes), then
/// field 1 (packed, 8 bytes) holding the ID.
const ANSWER_MESSAGE: [u8; 15] = {
    let mut message = [0, 0, 0, 0, 10, 0x0a, 8, 0, 0, 0, 0, 0, 0, 0, 0];
    let id = super::ID.to_le_bytes();
    let mut i = 0;
    while i < id.len() {
        message[7 + i] = id[i];
        i += 1;
    }
    message
};

/// Received `DATA` bytes given back to the client's connection window once this many
/// have come in.
const WINDOW_BATCH: u32 = 1 << 14;

/// Serves on `address` until the process is killed, printing `listening on ADDR` on
/// stdout once bound.
///
/// # Errors
///
/// The runtime or the bind failing.
pub fn serve(address: SocketAddr) -> std::io::Result<()> {
    super::listen(address, |stream| async move {
        // A client going away ends its connection; nothing to report.
        let _ = connection(stream).await;
    })
}

/// A connection's bytes: what has come in and not been taken, and the answers to write.
struct Wire {
    stream: TcpStream,
    input: Vec<u8>,
    output: Vec<u8>,
}

impl Wire {
    /// Drops the first `consumed` bytes of the input, writes the answers, and reads more:
    /// false once the client has closed the connection.
    async fn exchange(&mut self, consumed: usize) -> std::io::Result<bool> {
        self.input.drain(..consumed);
        if !self.output.is_empty() {
            self.stream.write_all(&self.output).await?;
            self.output.clear();
        }
        Ok(self.stream.read_buf(&mut self.input).await? != 0)
    }
}

async fn connection(stream: TcpStream) -> std::io::Result<()> {
    let mut wire = Wire {
        stream,
        input: Vec::with_capacity(16 * 1024),
        output: Vec::with_capacity(4 * 1024),
    };
    // The first bytes tell HTTP/2's preface from an HTTP/1.1 request line.
    while wire.input.len() < PREFACE.len() {
        if !wire.exchange(0).await? {
            return Ok(());
        }
        let input = &wire.input;
        if !PREFACE.starts_with(&input[..input.len().min(PREFACE.len())]) {
            return http1(wire).await;
        }
    }
    wire.input.drain(..PREFACE.len());
    http2(wire).await
}

async fn http1(mut wire: Wire) -> std::io::Result<()> {
    loop {
        let mut consumed = 0;
        while let Some(end) = find(&wire.input[consumed..], b"\r\n\r\n") {
            consumed += end + 4;
            wire.output.extend_from_slice(HTTP1_ANSWER);
        }
        if !wire.exchange(consumed).await? {
            return Ok(());
        }
    }
}

async fn http2(mut wire: Wire) -> std::io::Result<()> {
    frame(&mut wire.output, SETTINGS, 0, 0, &[]);
    let mut unacknowledged: u32 = 0;
    loop {
        let mut consumed = 0;
        while let Some(header) = wire.input.get(consumed..consumed + 9) {
            let length = u32::from_be_bytes([0, header[0], header[1], header[2]]);
            let (kind, flags) = (header[3], header[4]);
            let stream_id = u32::from_be_bytes([header[5], header[6], header[7], header[8]]) & 0x7fff_ffff;
            let end = consumed + 9 + length as usize;
            let Some(payload) = wire.input.get(consumed + 9..end) else {
                break;
            };
            let output = &mut wire.output;
            match kind {
                HEADERS | DATA if flags & END_STREAM != 0 => answer(output, stream_id),
                SETTINGS if flags & ACK == 0 => frame(output, SETTINGS, ACK, 0, &[]),
                PING if flags & ACK == 0 => frame(output, PING, ACK, 0, payload),
                GOAWAY => return Ok(()),
                _ => {}
            }
            if kind == DATA {
                unacknowledged += length;
                if unacknowledged >= WINDOW_BATCH {
                    frame(output, WINDOW_UPDATE, 0, 0, &unacknowledged.to_be_bytes());
                    unacknowledged = 0;
                }
            }
            consumed = end;
        }
        if !wire.exchange(consumed).await? {
            return Ok(());
        }
    }
}

/// The answer to the request on `stream_id`: headers, one ID, trailers.
fn answer(output: &mut Vec<u8>, stream_id: u32) {
    frame(output, HEADERS, END_HEADERS, stream_id, ANSWER_HEADERS);
    frame(output, DATA, 0, stream_id, &ANSWER_MESSAGE);
    frame(
        output,
        HEADERS,
        END_HEADERS | END_STREAM,
        stream_id,
        ANSWER_TRAILERS,
    );
}

fn frame(output: &mut Vec<u8>, kind: u8, flags: u8, stream_id: u32, payload: &[u8]) {
    // A 24-bit length: the low three bytes.
    let length = payload.len().to_be_bytes();
    output.extend_from_slice(&length[length.len() - 3..]);
    output.extend_from_slice(&[kind, flags]);
    output.extend_from_slice(&stream_id.to_be_bytes());
    output.extend_from_slice(payload);
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|window| window == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_http1_answer_is_the_hyper_floors_with_its_length() {
        let text = std::str::from_utf8(HTTP1_ANSWER).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert_eq!(body, format!("{{\"ids\":[\"{}\"]}}", super::super::ID));
        assert!(
            head.contains(&format!("content-length: {}\r\n", body.len())),
            "{head}"
        );
    }

    #[test]
    fn the_grpc_message_holds_the_id() {
        assert_eq!(ANSWER_MESSAGE[..7], [0, 0, 0, 0, 10, 0x0a, 8]);
        assert_eq!(ANSWER_MESSAGE[7..], super::super::ID.to_le_bytes());
    }
}
