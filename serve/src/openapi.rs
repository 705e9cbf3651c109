//! `GET /v1/openapi.json`: the OpenAPI 3.1 document of the HTTP API, with `Id` described by
//! its own schema (`atomflake`'s `utoipa` feature): a string of decimal digits.

use crate::limits::Limits;
use atomflake::Id;
use serde_json::{Value, json};

/// The document, for a server held to `limits`.
pub(crate) fn document(limits: Limits) -> Value {
    let text = |description: &str| json!({"description": description, "content": {"text/plain": {"schema": {"type": "string"}}}});
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "atomflake serve",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "Snowflake IDs for any language. Every ID is unique across the servers of one ID space \
                            (one layout, each node held by one server at a time); one node's IDs increase in the \
                            order they are minted. IDs are strings: JavaScript's numbers hold 53 bits.",
        },
        "paths": {
            "/v1/ids": ids_path(limits),
            "/v1/ids/{id}": {"get": {
                "operationId": "decodeId",
                "summary": "An ID's time, node and sequence in the server's layout.",
                "parameters": [{
                    "name": "id",
                    "in": "path",
                    "required": true,
                    "description": "An ID: decimal, base32 (13 characters, Crockford's), base62 (as=base62's) or its UUID of version 7 (as=uuid's).",
                    "schema": {"oneOf": [
                        {"$ref": "#/components/schemas/Id"},
                        {"type": "string", "pattern": "^[0-9A-Za-z]{11}$"},
                        {"type": "string", "format": "uuid"},
                    ]},
                }, {
                    "name": "as",
                    "in": "query",
                    "required": false,
                    "description": "masked: the ID is a masked one (as=masked's), unmasked before it is decoded; \
                                    only on a server started with --mask-key-file.",
                    "schema": {"type": "string", "enum": ["masked"]},
                }],
                "responses": {
                    "200": {
                        "description": "The ID's fields.",
                        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Decoded"}}},
                    },
                    "400": error("Not an ID of the server's layout."),
                },
            }},
            "/v1/layout": {"get": {
                "operationId": "getLayout",
                "summary": "The layout IDs are minted in, and the nodes the server holds.",
                "responses": {"200": {
                    "description": "A field is (id >> shift) & ((1 << bits) - 1); an ID's time is \
                                    epoch_unix_ms + timestamp * tick_ms.",
                    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Layout"}}},
                }},
            }},
            "/readyz": {"get": {
                "operationId": "readiness",
                "summary": "Whether the server hands out IDs now, within its patience: the readiness check.",
                "responses": {
                    "200": text("Ready: the body is `serving`."),
                    "503": text("Draining, stopped, or unable to mint within the patience: the body says why."),
                },
            }},
            "/healthz": {"get": {
                "operationId": "health",
                "summary": "The same answer as `/readyz`.",
                "responses": {
                    "200": text("Ready: the body is `serving`."),
                    "503": text("Draining, stopped, or unable to mint within the patience: the body says why."),
                },
            }},
            "/livez": {"get": {
                "operationId": "liveness",
                "summary": "Whether the server is alive: it is unless minting has ended for good.",
                "responses": {
                    "200": text("Alive: the body is `alive`."),
                    "503": text("Minting has ended for good (a lost lease): the body says why; restart it."),
                },
            }},
            "/metrics": {"get": {
                "operationId": "metrics",
                "summary": "Counters and latencies in Prometheus' text format.",
                "responses": {"200": text("Prometheus' text exposition format 0.0.4.")},
            }},
        },
        "components": {"schemas": schemas()},
    })
}

/// An answer with an `Error` body.
fn error(description: &str) -> Value {
    json!({
        "description": description,
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
    })
}

/// `GET /v1/ids`: its parameters and answers.
fn ids_path(limits: Limits) -> Value {
    json!({"get": {
        "operationId": "getIds",
        "summary": "New IDs, in increasing order.",
        "parameters": [{
            "name": "count",
            "in": "query",
            "required": false,
            "description": "How many IDs (1 when left out).",
            "schema": {"type": "integer", "minimum": 1, "maximum": limits.max_count, "default": 1},
        }, {
            "name": "as",
            "in": "query",
            "required": false,
            "description": "IDs as decimal strings (any layout); as JSON numbers: only for a layout \
                            whose IDs are at most 2^53 - 1, which JavaScript's numbers hold exactly; or as \
                            UUIDs of version 7, which sort as the IDs and decode back to them: for a layout \
                            whose times end by 2^48 ms (every preset's); as 11 characters of base62 that sort \
                            as the IDs; or masked by the server's key (--mask-key-file), decimal strings that \
                            show neither time, node nor volume.",
            "schema": {"type": "string", "enum": ["string", "number", "uuid", "base62", "masked"], "default": "string"},
        }],
        "responses": {
            "200": {
                "description": "The IDs.",
                "content": {"application/json": {"schema": {"oneOf": [
                    {"$ref": "#/components/schemas/Ids"},
                    {"$ref": "#/components/schemas/IdNumbers"},
                    {"$ref": "#/components/schemas/Uuids"},
                    {"$ref": "#/components/schemas/Base62s"},
                ]}}},
            },
            "400": error("A count out of range, a parameter other than count and as, as=number \
                          for a layout whose IDs can pass 2^53 - 1, as=uuid for one whose times \
                          pass 2^48 ms, or as=masked on a server with no key."),
            "429": error("Over this connection's request rate; retry after a second."),
            "503": error("The server is draining, or cannot mint (its lease is lost or overdue)."),
        },
    }})
}

/// The schemas of the bodies, `Id` among them.
fn schemas() -> Value {
    let id = serde_json::to_value(<Id as utoipa::PartialSchema>::schema()).expect("a schema is plain JSON");
    json!({
        "Id": id,
        "Ids": {
            "type": "object",
            "required": ["ids"],
            "additionalProperties": false,
            "properties": {"ids": {"type": "array", "items": {"$ref": "#/components/schemas/Id"}}},
        },
        "IdNumbers": {
            "type": "object",
            "required": ["ids"],
            "additionalProperties": false,
            "properties": {"ids": {"type": "array", "items": {
                "type": "integer", "minimum": 0, "maximum": atomflake::Layout::JS_MAX_SAFE_INTEGER,
            }}},
        },
        "Uuids": {
            "type": "object",
            "required": ["ids"],
            "additionalProperties": false,
            "properties": {"ids": {"type": "array", "items": {"type": "string", "format": "uuid"}}},
        },
        "Base62s": {
            "type": "object",
            "required": ["ids"],
            "additionalProperties": false,
            "properties": {"ids": {"type": "array", "items": {"type": "string", "pattern": "^[0-9A-Za-z]{11}$"}}},
        },
        "Error": {
            "type": "object",
            "required": ["error"],
            "additionalProperties": false,
            "properties": {"error": {"type": "string", "description": "What was wrong, with the allowed range."}},
        },
        "Decoded": {
            "type": "object",
            "required": ["id", "unix_ms", "time", "node", "sequence"],
            "additionalProperties": false,
            "properties": {
                "id": {"$ref": "#/components/schemas/Id"},
                "unix_ms": {"type": "integer", "minimum": 0, "description": "The start of the ID's tick, Unix ms."},
                "time": {"type": "string", "format": "date-time", "description": "The same time, RFC 3339 UTC."},
                "node": {"type": "integer", "minimum": 0},
                "sequence": {"type": "integer", "minimum": 0},
            },
        },
        "Layout": {
            "type": "object",
            "required": [
                "timestamp_bits", "timestamp_shift", "node_bits", "node_shift",
                "sequence_bits", "sequence_shift", "epoch_unix_ms", "tick_ms", "nodes",
            ],
            "additionalProperties": false,
            "properties": {
                "timestamp_bits": {"type": "integer", "minimum": 0},
                "timestamp_shift": {"type": "integer", "minimum": 0},
                "node_bits": {"type": "integer", "minimum": 0},
                "node_shift": {"type": "integer", "minimum": 0},
                "sequence_bits": {"type": "integer", "minimum": 0},
                "sequence_shift": {"type": "integer", "minimum": 0},
                "epoch_unix_ms": {"type": "integer", "minimum": 0},
                "tick_ms": {"type": "integer", "minimum": 1},
                "nodes": {"type": "array", "items": {"type": "integer", "minimum": 0}},
            },
        },
    })
}
