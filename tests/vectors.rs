//! Published IDs with their documented fields, decoded exactly.
//!
//! Copied from the project's shared vector file (`vectors/public.json`), each with the
//! source that published it, so that this test needs nothing outside the repository.

use atomflake::{Id, Layout, Parts};

struct Vector {
    source: &'static str,
    layout: Layout,
    id: u64,
    unix_ms: u64,
    node: u64,
    sequence: u64,
}

const VECTORS: &[Vector] = &[
    Vector {
        // 2016-04-30T11:18:25.796Z, worker 1, process 0 (node = worker << 5 | process).
        source: "Discord developer docs, API reference, Snowflakes section",
        layout: Layout::DISCORD,
        id: 175_928_847_299_117_063,
        unix_ms: 1_462_015_105_796,
        node: 32,
        sequence: 7,
    },
    Vector {
        // 2018-10-10T20:19:24.211Z, created_at "Wed Oct 10 20:19:24 +0000 2018".
        source: "X (Twitter) developer docs, Tweet object example",
        layout: Layout::TWITTER,
        id: 1_050_118_621_198_921_728,
        unix_ms: 1_539_202_764_211,
        node: 347,
        sequence: 0,
    },
];

impl Vector {
    fn parts(&self) -> Parts {
        Parts {
            unix_ms: self.unix_ms,
            node: self.node,
            sequence: self.sequence,
        }
    }
}

#[test]
fn published_ids_decode_to_their_documented_fields() {
    for v in VECTORS {
        let expected = v.parts();
        assert_eq!(v.layout.decode(Id::new(v.id)), expected, "{}", v.source);
        assert_eq!(v.layout.try_decode(Id::new(v.id)), Ok(expected), "{}", v.source);
    }
}

#[test]
fn published_ids_encode_from_their_documented_fields() {
    for v in VECTORS {
        assert_eq!(v.layout.encode(v.parts()), Ok(Id::new(v.id)), "{}", v.source);
    }
}

#[test]
fn published_ids_round_trip_through_text_and_bigint() {
    for v in VECTORS {
        let id: Id = v.id.to_string().parse().unwrap();
        assert_eq!(id.get(), v.id, "{}", v.source);
        assert_eq!(id.to_i64().map(i64::cast_unsigned), Ok(v.id), "{}", v.source);
    }
}

#[test]
fn discord_node_splits_into_worker_and_process() {
    let parts = Layout::DISCORD.decode(Id::new(175_928_847_299_117_063));
    assert_eq!((parts.node >> 5, parts.node & 0b1_1111), (1, 0));
}
