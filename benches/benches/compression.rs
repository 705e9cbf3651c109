//! What compressing an answer of `atomflake serve` costs, by its size: the JSON of
//! `GET /v1/ids` (Twitter's IDs of today as strings) and the `GetIdsResponse` of gRPC
//! (packed `fixed64`), each compressed whole, as one answer is, at the levels the server
//! uses (gzip 6 and zstd 3 for both, tonic's and tower-http's defaults; brotli 4,
//! tower-http's), beside what writing the JSON costs. The server compresses from 1 KiB
//! (`COMPRESS_FROM_BYTES`): 47 such IDs in JSON, 128 in protobuf.
//!
//! `cargo bench -p atomflake-benches --bench compression`

use atomflake::{Generator, Layout};
use criterion::{Criterion, criterion_group, criterion_main};
use std::hint::black_box;
use std::io::Write as _;

/// `{"ids":["<id>",...]}`, as the server writes it.
fn json(ids: &[u64]) -> Vec<u8> {
    let mut body = Vec::with_capacity(10 + 22 * ids.len());
    body.extend_from_slice(b"{\"ids\":[");
    for (i, id) in ids.iter().enumerate() {
        if i > 0 {
            body.push(b',');
        }
        body.push(b'"');
        body.extend_from_slice(itoa::Buffer::new().format(*id).as_bytes());
        body.push(b'"');
    }
    body.extend_from_slice(b"]}");
    body
}

/// A `GetIdsResponse`: field 1, packed `fixed64`.
fn proto(ids: &[u64]) -> Vec<u8> {
    let mut body = vec![0x0a];
    let mut length = ids.len() * 8;
    while length >= 0x80 {
        body.push(u8::try_from(length & 0x7f).unwrap() | 0x80);
        length >>= 7;
    }
    body.push(u8::try_from(length).unwrap());
    for id in ids {
        body.extend_from_slice(&id.to_le_bytes());
    }
    body
}

fn gzip(body: &[u8]) -> Vec<u8> {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::new(6));
    encoder.write_all(body).unwrap();
    encoder.finish().unwrap()
}

fn zstd(body: &[u8]) -> Vec<u8> {
    zstd::bulk::compress(body, 3).unwrap()
}

fn brotli(body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut encoder = brotli::CompressorWriter::new(&mut out, 4096, 4, 22);
    encoder.write_all(body).unwrap();
    drop(encoder);
    out
}

fn compression(c: &mut Criterion) {
    let generator = Generator::new(Layout::TWITTER, 5).unwrap();
    let minted: Vec<u64> = generator.next_ids(4096).map(atomflake::Id::get).collect();
    let mut group = c.benchmark_group("compression");
    for count in [16, 47, 128, 512, 4096] {
        let ids = &minted[..count];
        let (text, message) = (json(ids), proto(ids));
        eprintln!(
            "{count} IDs: JSON {} bytes (gzip {}, zstd {}, br {}), protobuf {} bytes (gzip {}, zstd {})",
            text.len(),
            gzip(&text).len(),
            zstd(&text).len(),
            brotli(&text).len(),
            message.len(),
            gzip(&message).len(),
            zstd(&message).len(),
        );
        group.bench_function(format!("json {count} ids, written"), |b| {
            b.iter(|| json(black_box(ids)));
        });
        for (name, codec) in [
            ("gzip", gzip as fn(&[u8]) -> Vec<u8>),
            ("zstd", zstd),
            ("br", brotli),
        ] {
            group.bench_function(format!("json {count} ids, {name}"), |b| {
                b.iter(|| codec(black_box(&text)));
            });
        }
        for (name, codec) in [("gzip", gzip as fn(&[u8]) -> Vec<u8>), ("zstd", zstd)] {
            group.bench_function(format!("protobuf {count} ids, {name}"), |b| {
                b.iter(|| codec(black_box(&message)));
            });
        }
    }
    group.finish();
}

criterion_group!(benches, compression);
criterion_main!(benches);
