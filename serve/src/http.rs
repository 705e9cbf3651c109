//! The HTTP/JSON API: `GET /v1/ids`, `GET /v1/ids/{id}`, `GET /v1/layout`, `GET /healthz`,
//! `GET /readyz`, `GET /livez`, `GET /metrics` and `GET /v1/openapi.json`. An answer of
//! [`COMPRESS_FROM_BYTES`] or more goes out in the gzip, zstd or brotli that the client
//! accepts (`Accept-Encoding`), a smaller one as it is.

use crate::grpc::COMPRESS_FROM_BYTES;
use crate::metrics::{Api, Outcome};
use crate::rate::IdBudget;
use crate::service::{Refusal, Service};
use atomflake::{Id, Layout};
use axum::extract::{Path, Query, State as With};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Extension, Router};
use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Instant;
use tower_http::compression::CompressionLayer;
use tower_http::compression::predicate::SizeAbove;

/// The HTTP routes, on `service`.
pub(crate) fn router(service: Arc<Service>) -> Router {
    Router::new()
        .route("/v1/ids", get(ids))
        .route("/v1/ids/{id}", get(decode))
        .route("/v1/layout", get(layout))
        .route("/healthz", get(health))
        .route("/readyz", get(health))
        .route("/livez", get(liveness))
        .route("/metrics", get(metrics))
        .route("/v1/openapi.json", get(openapi))
        .with_state(service)
        .layer(CompressionLayer::new().compress_when(SizeAbove::new(COMPRESS_FROM)))
}

/// [`COMPRESS_FROM_BYTES`], as tower-http counts it.
const COMPRESS_FROM: u16 = 1024;
const _: () = assert!(COMPRESS_FROM as usize == COMPRESS_FROM_BYTES);

/// Whether `header` (such as `Accept-Encoding`) names one of `codings`, with a weight
/// above 0 (`gzip;q=0` refuses gzip).
pub(crate) fn accepts_any(headers: &HeaderMap, header: &str, codings: &[&str]) -> bool {
    headers
        .get_all(header)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .any(|item| {
            let mut parts = item.split(';').map(str::trim);
            let coding = parts.next().unwrap_or_default();
            let refused = parts.any(|parameter| {
                parameter
                    .strip_prefix("q=")
                    .and_then(|weight| weight.parse::<f32>().ok())
                    .is_some_and(|weight| weight <= 0.0)
            });
            !refused && codings.iter().any(|wanted| coding.eq_ignore_ascii_case(wanted))
        })
}

/// `GET /v1/ids?count=N`: `{"ids": ["<decimal>", ...]}`, IDs as strings (JavaScript's
/// numbers hold 53 bits); with `as=number`, `{"ids": [<decimal>, ...]}` for a layout whose
/// every ID a JavaScript number holds exactly; with `as=uuid`, UUIDs of version 7.
async fn ids(
    With(service): With<Arc<Service>>,
    budget: Option<Extension<IdBudget>>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let asked = asked_of(
        &query,
        u64::from(service.limits().max_count),
        service.layout(),
        service.mask().is_some(),
    );
    let (status, body) = ids_answer(&service, asked, budget.as_ref().map(|budget| &budget.0)).await;
    json(status, body)
}

/// How `GET /v1/ids` writes its IDs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Written {
    /// Decimal strings (`as=string`, the default): any layout.
    Strings,
    /// JSON numbers (`as=number`): layouts whose IDs are at most 2^53 - 1.
    Numbers,
    /// UUIDs of version 7 (`as=uuid`), as strings: layouts whose times end by 2^48 ms.
    Uuids,
    /// Base62 text (`as=base62`), 11 characters each.
    Base62,
    /// Masked IDs in decimal strings (`as=masked`): a service with a mask.
    Masked,
}

/// The answer to `GET /v1/ids` for the count and form `asked` (within the connection's ID
/// `budget`, when it has one), counted: its status and JSON body.
pub(crate) async fn ids_answer(
    service: &Service,
    asked: Result<(u64, Written), Refusal>,
    budget: Option<&IdBudget>,
) -> (StatusCode, String) {
    let start = Instant::now();
    let result = match asked {
        Ok((count, written)) => service.next_ids(count, budget).await.map(|ids| (ids, written)),
        Err(refusal) => Err(refusal),
    };
    let (outcome, served, status, body) = match result {
        Ok((ids, written)) => {
            let mut body = String::with_capacity(10 + ids.len() * 39);
            let mut digits = itoa::Buffer::new();
            let layout = service.layout();
            let quote = if written == Written::Numbers { "" } else { "\"" };
            let mut ids: Vec<Id> = ids.into_iter().map(Id::new).collect();
            if let (Written::Masked, Some(mask)) = (written, service.mask()) {
                mask.mask_all(&mut ids);
            }
            body.push_str("{\"ids\":[");
            for (index, &id) in ids.iter().enumerate() {
                if index > 0 {
                    body.push(',');
                }
                body.push_str(quote);
                match written {
                    // A layout with UUIDs (as asked_of checks) and its IDs: never an error.
                    Written::Uuids => match id.to_uuid(layout) {
                        Ok(uuid) => {
                            let _ = write!(body, "{uuid}");
                        }
                        Err(_) => body.push_str(digits.format(id.get())),
                    },
                    Written::Base62 => {
                        let _ = write!(body, "{}", id.to_base62());
                    }
                    // Masked above, when asked (a service with a mask, as asked_of checks).
                    Written::Strings | Written::Numbers | Written::Masked => {
                        body.push_str(digits.format(id.get()));
                    }
                }
                body.push_str(quote);
            }
            body.push_str("]}");
            (Outcome::Ok, ids.len() as u64, StatusCode::OK, body)
        }
        Err(refusal) => {
            let (outcome, status, body) = refusal_of(&refusal);
            (outcome, 0, status, body)
        }
    };
    service.metrics.count(Api::Http, outcome, served, start.elapsed());
    (status, body)
}

/// The `count` (1 when missing) and `as` (`string` when missing) parameters; any other
/// parameter is refused, and `as=number` for a `layout` whose IDs can pass 2^53 - 1.
fn asked_of(
    query: &HashMap<String, String>,
    max: u64,
    layout: Layout,
    masked: bool,
) -> Result<(u64, Written), Refusal> {
    if let Some(other) = query.keys().find(|key| *key != "count" && *key != "as") {
        return Err(Refusal::Invalid(format!(
            "unknown parameter {other:?}: allowed count and as"
        )));
    }
    let count = count_in(query.get("count").map(String::as_str), max)?;
    let written = match query.get("as").map(String::as_str) {
        None | Some("string") => Written::Strings,
        Some("number") if layout.fits_js_number() => Written::Numbers,
        Some("number") => {
            return Err(Refusal::Invalid(format!(
                "as=number needs a layout whose IDs are at most 2^53 - 1 ({}), which JavaScript's numbers \
                 hold exactly: this server's layout ({layout}) reaches {}; allowed as=string",
                Layout::JS_MAX_SAFE_INTEGER,
                layout.max_id()
            )));
        }
        Some("uuid") if layout.fits_uuid() => Written::Uuids,
        Some("uuid") => {
            return Err(Refusal::Invalid(format!(
                "as=uuid needs a layout whose times end by 2^48 ms, which a UUID of version 7 holds: this \
                 server's layout ({layout}) ends at {} ms; allowed as=string",
                layout.end_unix_ms()
            )));
        }
        Some("base62") => Written::Base62,
        Some("masked") if masked => Written::Masked,
        Some("masked") => {
            return Err(Refusal::Invalid(
                "as=masked needs a server started with --mask-key-file: this one has no key; allowed as=string"
                    .to_owned(),
            ));
        }
        Some(other) => {
            return Err(Refusal::Invalid(format!(
                "as {other:?} is not a form: allowed string, number, uuid, base62 or masked"
            )));
        }
    };
    Ok((count, written))
}

/// `count`'s value, `text` (1 when missing), checked against `1..=max`.
pub(crate) fn count_in(text: Option<&str>, max: u64) -> Result<u64, Refusal> {
    let Some(text) = text else {
        return Ok(1);
    };
    let count = text
        .parse::<u64>()
        .map_err(|_| Refusal::Invalid(format!("count {text:?} is not a whole number: allowed 1..={max}")))?;
    Service::check_count(count, max)
}

/// The fewest characters of a UUID's text (32 hex digits, no hyphens): more than any
/// decimal, base32 or base62 ID has.
const UUID_MIN_LEN: usize = 32;

/// The ID of `text` in `layout`: a UUID of version 7 when it has 32 characters or more,
/// else decimal, base32 or base62 ([`Id::from_any_form`]).
fn parse_id(text: &str, layout: Layout) -> Result<Id, String> {
    if text.len() >= UUID_MIN_LEN {
        Id::parse_uuid(text, layout).map_err(|error| format!("invalid UUID {text:?}: {error}"))
    } else {
        Id::from_any_form(text).map_err(|error| format!("invalid ID {text:?}: {error}"))
    }
}

/// `id` unmasked when the decode asks `as=masked` (the only parameter it takes), else as
/// given.
fn unmasked(service: &Service, query: &HashMap<String, String>, id: Id) -> Result<Id, String> {
    if let Some(other) = query.keys().find(|key| *key != "as") {
        return Err(format!("unknown parameter {other:?}: allowed as"));
    }
    match (query.get("as").map(String::as_str), service.mask()) {
        (None, _) => Ok(id),
        (Some("masked"), Some(mask)) => Ok(mask.unmask(id)),
        (Some("masked"), None) => {
            Err("as=masked needs a server started with --mask-key-file: this one has no key".to_owned())
        }
        (Some(other), _) => Err(format!(
            "as {other:?} is not a form a decode takes: allowed masked"
        )),
    }
}

/// `GET /v1/ids/{id}`: the ID's time, node and sequence in the served layout; `{id}` is
/// decimal, base32, base62, or a UUID of version 7 of the layout (`as=uuid`'s).
async fn decode(
    With(service): With<Arc<Service>>,
    Path(text): Path<String>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let start = Instant::now();
    let layout = service.layout();
    let parsed = parse_id(&text, layout).and_then(|id| unmasked(&service, &query, id));
    let decoded = parsed.and_then(|id| {
        let parts = layout
            .try_decode(id)
            .map_err(|error| format!("invalid ID {text:?}: {error}"))?;
        let time = layout
            .chrono_utc(id)
            .map_err(|error| format!("invalid ID {text:?}: {error}"))?;
        Ok((id, parts, time))
    });
    let (outcome, response) = match decoded {
        Ok((id, parts, time)) => {
            let body = serde_json::json!({
                "id": id.to_string(),
                "unix_ms": parts.unix_ms,
                "time": time.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string(),
                "node": parts.node,
                "sequence": parts.sequence,
            });
            (Outcome::Ok, json(StatusCode::OK, body.to_string()))
        }
        Err(message) => refused(&Refusal::Invalid(message)),
    };
    service.metrics.count(Api::Http, outcome, 0, start.elapsed());
    response
}

/// `GET /v1/layout`: the layout's fields (bits and shifts), epoch and tick, and the nodes.
async fn layout(With(service): With<Arc<Service>>) -> Response {
    let layout = service.layout();
    let body = serde_json::json!({
        "timestamp_bits": layout.timestamp_bits(),
        "timestamp_shift": layout.timestamp_shift(),
        "node_bits": layout.node_bits(),
        "node_shift": layout.node_shift(),
        "sequence_bits": layout.sequence_bits(),
        "sequence_shift": layout.sequence_shift(),
        "epoch_unix_ms": layout.epoch_ms(),
        "tick_ms": layout.tick_ms(),
        "nodes": service.nodes(),
    });
    json(StatusCode::OK, body.to_string())
}

/// `GET /readyz` and `GET /healthz`: 200 while IDs can be handed out within the
/// patience, else 503 with the reason.
async fn health(With(service): With<Arc<Service>>) -> Response {
    match service.health() {
        Ok(()) => (StatusCode::OK, "serving\n").into_response(),
        Err(reason) => (StatusCode::SERVICE_UNAVAILABLE, format!("{reason}\n")).into_response(),
    }
}

/// `GET /livez`: 200 unless minting has ended for good, else 503 with the reason.
async fn liveness(With(service): With<Arc<Service>>) -> Response {
    match service.liveness() {
        Ok(()) => (StatusCode::OK, "alive\n").into_response(),
        Err(reason) => (StatusCode::SERVICE_UNAVAILABLE, format!("{reason}\n")).into_response(),
    }
}

/// `GET /metrics`: Prometheus' text format.
async fn metrics(With(service): With<Arc<Service>>) -> Response {
    let mut body = crate::prometheus(&service.metrics());
    let _ = writeln!(body);
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")],
        body,
    )
        .into_response()
}

/// `GET /v1/openapi.json`: the OpenAPI document of this API.
async fn openapi(With(service): With<Arc<Service>>) -> Response {
    json(
        StatusCode::OK,
        crate::openapi::document(service.limits()).to_string(),
    )
}

/// A refusal as a JSON body `{"error": "..."}`: 400 for bad input, 503 otherwise.
pub(crate) fn refused(refusal: &Refusal) -> (Outcome, Response) {
    let (outcome, status, body) = refusal_of(refusal);
    (outcome, json(status, body))
}

/// A refusal's outcome, status and JSON body.
fn refusal_of(refusal: &Refusal) -> (Outcome, StatusCode, String) {
    let (outcome, status) = match refusal {
        Refusal::Invalid(_) => (Outcome::Invalid, StatusCode::BAD_REQUEST),
        Refusal::Unavailable(_) => (Outcome::Unavailable, StatusCode::SERVICE_UNAVAILABLE),
        Refusal::Limited(_) => (Outcome::Limited, StatusCode::TOO_MANY_REQUESTS),
    };
    let body = serde_json::json!({ "error": refusal.to_string() });
    (outcome, status, body.to_string())
}

fn json(status: StatusCode, body: String) -> Response {
    (status, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}
