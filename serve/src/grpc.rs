//! The gRPC API (`atomflake.v1.Ids`, `proto/atomflake/v1/ids.proto`), with the standard
//! health service and reflection.

use crate::limits::Limits;
use crate::metrics::{Api, Outcome};
use crate::proto::ids_server::{Ids, IdsServer};
use crate::proto::{
    DecodeRequest, DecodeResponse, GetIdsRequest, GetIdsResponse, GetLayoutRequest, GetLayoutResponse,
    Layout, Run, StreamIdsRequest, StreamIdsResponse,
};
use crate::rate::IdBudget;
use crate::service::{Refusal, Service};
use atomflake::Id;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_stream::{Stream, StreamExt as _};
use tonic::codec::{CompressionEncoding, SingleMessageCompressionOverride};
use tonic::{Request, Response, Status};

/// The encoded descriptors of `ids.proto`, for reflection.
const DESCRIPTORS: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/ids.bin"));

/// The most runs one `StreamIdsResponse` holds: 64 Twitter ticks' worth of IDs.
const RUNS_PER_MESSAGE: usize = 64;

/// The largest request message of every gRPC service served (`Ids`, health,
/// reflection): larger ones are refused before they are read (`OUT_OF_RANGE`, tonic's
/// code for a message over its limit).
pub(crate) const MAX_REQUEST_BYTES: usize = 1024;

/// How often health is brought up to date with the service's state.
const HEALTH_EVERY: Duration = Duration::from_millis(250);

/// `atomflake.v1.Ids`, `grpc.health.v1.Health` and reflection, as an axum router; the
/// health service follows `service`'s state until the returned task is dropped.
pub(crate) fn router(service: &Arc<Service>) -> (axum::Router, tokio::task::JoinHandle<()>) {
    let (reporter, health) = tonic_health::server::health_reporter();
    let watched = Arc::clone(service);
    let health_task = tokio::spawn(async move {
        let mut last = None;
        loop {
            let serving = watched.health().is_ok();
            if last != Some(serving) {
                let status = if serving {
                    tonic_health::ServingStatus::Serving
                } else {
                    tonic_health::ServingStatus::NotServing
                };
                reporter.set_service_status("", status).await;
                reporter
                    .set_service_status(<IdsServer<GrpcIds> as tonic::server::NamedService>::NAME, status)
                    .await;
                last = Some(serving);
            }
            tokio::time::sleep(HEALTH_EVERY).await;
        }
    });
    // Both versions: grpcurl and grpcio's reflection client ask v1alpha.
    let reflection = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(DESCRIPTORS)
        .build_v1()
        .expect("the descriptors compiled from ids.proto are valid");
    let reflection_v1alpha = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(DESCRIPTORS)
        .build_v1alpha()
        .expect("the descriptors compiled from ids.proto are valid");
    // Every request message is small: a count, an ID, a service or symbol name.
    // Compression both ways, negotiated per call: requests in gzip or zstd are read, and an
    // answer is compressed in one the client accepts (`grpc-accept-encoding`) from
    // COMPRESS_FROM_BYTES on.
    let ids = IdsServer::new(GrpcIds(Arc::clone(service)))
        .max_decoding_message_size(MAX_REQUEST_BYTES)
        .accept_compressed(CompressionEncoding::Gzip)
        .accept_compressed(CompressionEncoding::Zstd)
        .send_compressed(CompressionEncoding::Gzip)
        .send_compressed(CompressionEncoding::Zstd);
    let routes = tonic::service::Routes::new(ids)
        .add_service(health.max_decoding_message_size(MAX_REQUEST_BYTES))
        .add_service(reflection.max_decoding_message_size(MAX_REQUEST_BYTES))
        .add_service(reflection_v1alpha.max_decoding_message_size(MAX_REQUEST_BYTES));
    // gRPC-Web requests (`application/grpc-web`, `application/grpc-web-text`) are answered
    // as gRPC ones, translated both ways; plain gRPC passes through untouched.
    (
        routes.into_axum_router().layer(tonic_web::GrpcWebLayer::new()),
        health_task,
    )
}

/// The smallest answer sent compressed to a client that accepts it: 128 IDs of `GetIds`,
/// 47 of Twitter's IDs of today (19 digits) in `GET /v1/ids`' JSON. A smaller one is sent
/// as it is: an encoder costs 10 to 15 µs before its first byte, more than the few hundred
/// bytes it saves are worth (`benches/benches/compression.rs`).
pub(crate) const COMPRESS_FROM_BYTES: usize = 1024;

/// Whether a call's client accepts answers in gzip or zstd (`grpc-accept-encoding`).
pub(crate) fn accepts_compression(headers: &axum::http::HeaderMap) -> bool {
    crate::http::accepts_any(headers, "grpc-accept-encoding", &["gzip", "zstd"])
}

/// `message` as a unary answer, compressed (when the client accepts it) only from
/// [`COMPRESS_FROM_BYTES`] on.
fn unary<T: prost::Message>(message: T) -> Response<T> {
    let small = message.encoded_len() < COMPRESS_FROM_BYTES;
    let mut response = Response::new(message);
    if small {
        response
            .extensions_mut()
            .insert(SingleMessageCompressionOverride::Disable);
    }
    response
}

/// The `Ids` service on a [`Service`].
#[derive(Debug)]
pub(crate) struct GrpcIds(Arc<Service>);

fn status(refusal: &Refusal) -> (Outcome, Status) {
    match refusal {
        Refusal::Invalid(message) => (Outcome::Invalid, Status::invalid_argument(message)),
        Refusal::Unavailable(message) => (Outcome::Unavailable, Status::unavailable(message)),
        Refusal::Limited(message) => (Outcome::Limited, Status::resource_exhausted(message)),
    }
}

impl GrpcIds {
    /// Counts a unary call's outcome and turns a refusal into its status.
    fn answer<T>(&self, start: Instant, result: Result<(T, u64), Refusal>) -> Result<Response<T>, Status> {
        answer(&self.0, start, result).map(Response::new)
    }
}

/// `GetIds` for `count` IDs (within the connection's ID `budget`, when it has one),
/// counted.
pub(crate) async fn get_ids(
    service: &Service,
    count: u32,
    budget: Option<&IdBudget>,
) -> Result<GetIdsResponse, Status> {
    let start = Instant::now();
    let max = u64::from(service.limits().max_count);
    let result = match Service::check_count(u64::from(count), max) {
        Ok(count) => service.next_ids(count, budget).await,
        Err(refusal) => Err(refusal),
    };
    answer(
        service,
        start,
        result.map(|ids| {
            let served = ids.len() as u64;
            (GetIdsResponse { ids }, served)
        }),
    )
}

/// Counts a unary call's outcome and turns a refusal into its status.
fn answer<T>(service: &Service, start: Instant, result: Result<(T, u64), Refusal>) -> Result<T, Status> {
    let metrics = &service.metrics;
    match result {
        Ok((message, ids)) => {
            metrics.count(Api::Grpc, Outcome::Ok, ids, start.elapsed());
            Ok(message)
        }
        Err(refusal) => {
            let (outcome, status) = status(&refusal);
            metrics.count(Api::Grpc, outcome, 0, start.elapsed());
            Err(status)
        }
    }
}

type RunStream = Pin<Box<dyn Stream<Item = Result<StreamIdsResponse, Status>> + Send>>;

/// Mints `count` IDs for one `StreamIds` (within the connection's ID `budget`, when it has
/// one) and sends them as runs to `sender`, until they are all sent, the client goes away
/// (a gap, never a repeat), minting is refused, or the client takes no message for the
/// stall timeout. A stream that ends with an error puts its status in `ending`, to follow
/// the messages sent. Returns how it ended.
async fn stream_runs(
    service: &Service,
    count: u64,
    budget: Option<&IdBudget>,
    sender: &tokio::sync::mpsc::Sender<Result<StreamIdsResponse, Status>>,
    ending: tokio::sync::oneshot::Sender<Status>,
) -> Outcome {
    let stall = service.limits().stall_timeout;
    let mut left = count;
    // A run holds at most one tick of one node.
    let per_tick = 1u64 << service.layout().sequence_bits();
    // A client that went away (a cancel) stops the minting within one run.
    while left > 0 && !sender.is_closed() {
        let mut runs = Vec::with_capacity(RUNS_PER_MESSAGE);
        let mut in_message = 0;
        let mut refusal = None;
        while left > 0 && runs.len() < RUNS_PER_MESSAGE && !sender.is_closed() {
            let mut most = left.min(per_tick);
            if let Some(budget) = budget {
                // Slowed to the connection's ID rate.
                most = budget.take_up_to(most).await;
            }
            let minted = service.next_run(most).await;
            if let Some(budget) = budget {
                // What the run did not hold is not charged.
                let ran = minted.as_ref().map_or(0, atomflake::Run::len);
                budget.give_back(most - ran);
            }
            match minted {
                Ok(run) => {
                    left -= run.len();
                    in_message += run.len();
                    runs.push(Run {
                        first: run.first().get(),
                        count: u32::try_from(run.len())
                            .expect("a run holds at most the u32::MAX IDs asked for"),
                        step: run.step(),
                    });
                }
                Err(error) => {
                    refusal = Some(error);
                    break;
                }
            }
        }
        // IDs reserved are sent even when minting stops midway: they are unique. A send
        // waits only while the client reads nothing (its flow-control window spent, the
        // buffer full): for the stall timeout at most.
        if !runs.is_empty() {
            match tokio::time::timeout(stall, sender.send(Ok(StreamIdsResponse { runs }))).await {
                Ok(Ok(())) => service.metrics.count_ids(Api::Grpc, in_message),
                // The client went away: what it did not receive is a gap.
                Ok(Err(_)) => break,
                Err(_) => {
                    let _ = ending.send(Status::deadline_exceeded(format!(
                        "this stream's client read nothing for {stall:?}: the stream ended after the \
                         IDs it sent, freeing its place"
                    )));
                    return Outcome::DeadlineExceeded;
                }
            }
        }
        if let Some(refusal) = refusal {
            let (outcome, status) = status(&refusal);
            let _ = ending.send(status);
            return outcome;
        }
    }
    Outcome::Ok
}

#[tonic::async_trait]
impl Ids for GrpcIds {
    async fn get_ids(&self, request: Request<GetIdsRequest>) -> Result<Response<GetIdsResponse>, Status> {
        let budget = request.extensions().get::<IdBudget>();
        get_ids(&self.0, request.get_ref().count, budget).await.map(unary)
    }

    type StreamIdsStream = RunStream;

    async fn stream_ids(&self, request: Request<StreamIdsRequest>) -> Result<Response<RunStream>, Status> {
        let start = Instant::now();
        let count = match Service::check_count(request.get_ref().count, Limits::MAX_STREAM_COUNT) {
            Ok(count) => count,
            Err(refusal) => return self.answer(start, Err(refusal)),
        };
        if let Err(refusal) = self.0.admit() {
            return self.answer(start, Err(refusal));
        }
        let permit = match self.0.admit_stream() {
            Ok(permit) => permit,
            Err(message) => {
                self.0
                    .metrics
                    .count(Api::Grpc, Outcome::Limited, 0, start.elapsed());
                return Err(Status::resource_exhausted(message));
            }
        };
        let service = Arc::clone(&self.0);
        let budget = request.extensions().get::<IdBudget>().cloned();
        let (sender, receiver) = tokio::sync::mpsc::channel(4);
        let (ending, ended) = tokio::sync::oneshot::channel();
        tokio::spawn(async move {
            let _permit = permit;
            let outcome = stream_runs(&service, count, budget.as_ref(), &sender, ending).await;
            service.metrics.count(Api::Grpc, outcome, 0, start.elapsed());
        });
        // The messages sent, then the status the stream ended with, if not OK.
        let last = futures_util::stream::once(ended).filter_map(|status| status.ok().map(Err));
        Ok(Response::new(Box::pin(
            tokio_stream::wrappers::ReceiverStream::new(receiver).chain(last),
        )))
    }

    async fn get_layout(&self, _: Request<GetLayoutRequest>) -> Result<Response<GetLayoutResponse>, Status> {
        let layout = self.0.layout();
        Ok(unary(GetLayoutResponse {
            layout: Some(Layout {
                timestamp_bits: layout.timestamp_bits(),
                timestamp_shift: layout.timestamp_shift(),
                node_bits: layout.node_bits(),
                node_shift: layout.node_shift(),
                sequence_bits: layout.sequence_bits(),
                sequence_shift: layout.sequence_shift(),
                epoch_unix_ms: layout.epoch_ms(),
                tick_ms: layout.tick_ms(),
            }),
            nodes: self.0.nodes(),
        }))
    }

    async fn decode(&self, request: Request<DecodeRequest>) -> Result<Response<DecodeResponse>, Status> {
        let start = Instant::now();
        let layout = self.0.layout();
        let DecodeRequest { id, uuid, masked } = request.get_ref();
        let id = match (*id, uuid.as_str()) {
            (id, "") => Ok(Id::new(id)),
            (0, uuid) => Id::parse_uuid(uuid, layout)
                .map_err(|error| Refusal::Invalid(format!("invalid UUID {uuid:?}: {error}"))),
            (id, uuid) => Err(Refusal::Invalid(format!(
                "both id {id} and uuid {uuid:?}: allowed one of them"
            ))),
        };
        let id = match (id, *masked, self.0.mask()) {
            (Ok(id), true, Some(mask)) => Ok(mask.unmask(id)),
            (Ok(_), true, None) => Err(Refusal::Invalid(
                "masked needs a server started with --mask-key-file: this one has no key".to_owned(),
            )),
            (id, _, _) => id,
        };
        let result = id.and_then(|id| {
            let parts = layout
                .try_decode(id)
                .map_err(|error| Refusal::Invalid(format!("invalid ID {id}: {error}")))?;
            let decoded = DecodeResponse {
                unix_ms: parts.unix_ms,
                node: parts.node,
                sequence: parts.sequence,
                id: id.get(),
            };
            Ok((decoded, 0))
        });
        answer(&self.0, start, result).map(unary)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use atomflake::{Layout, ShardedGenerator};
    use tokio_stream::StreamExt;

    /// One stream on four nodes draws on all four: a tick spent on one node goes on with
    /// the next, so the stream is not held to one node's cap.
    #[test]
    fn one_stream_draws_on_every_node() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let generator = ShardedGenerator::new(Layout::TWITTER, [1, 2, 3, 4]).unwrap();
        let service = Arc::new(Service::new(generator, Limits::default(), None).unwrap());
        let ids = GrpcIds(service);
        let count = 1 << 20;
        let runs: Vec<Run> = runtime.block_on(async {
            let mut stream = ids
                .stream_ids(Request::new(StreamIdsRequest { count }))
                .await
                .unwrap()
                .into_inner();
            let mut runs = Vec::new();
            while let Some(message) = stream.next().await {
                runs.extend(message.unwrap().runs);
            }
            runs
        });
        let layout = Layout::TWITTER;
        let mut nodes = std::collections::BTreeSet::new();
        let mut ticks = std::collections::BTreeMap::<u64, u64>::new();
        let mut minted = std::collections::BTreeSet::new();
        for run in &runs {
            let parts = layout.decode(Id::new(run.first));
            nodes.insert(parts.node);
            *ticks.entry(parts.unix_ms).or_default() += u64::from(run.count);
            minted.extend((0..u64::from(run.count)).map(|i| run.first + i * run.step));
        }
        assert_eq!(minted.len() as u64, count, "every ID once");
        assert_eq!(nodes.into_iter().collect::<Vec<_>>(), [1, 2, 3, 4]);
        let most = ticks.values().max().copied().unwrap_or(0);
        assert_eq!(most, 4 * 4096, "a tick with every node's sequence spent");
    }

    /// `Decode` takes an ID or a UUID of version 7 of the layout, masked or not, and answers
    /// the ID with its fields; a UUID of another layout, text that is not one, both, or a
    /// masked ID at a server with no key are refused.
    #[test]
    fn decode_takes_an_id_or_its_uuid_and_refuses_both_or_another_layouts() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let mask = atomflake::Mask::new(*b"a test's key....");
        let generator = ShardedGenerator::new(Layout::TWITTER, [1]).unwrap();
        let service = Service::new(generator, Limits::default(), None).unwrap();
        let masking = GrpcIds(Arc::new(service.with_mask(mask.clone())));
        let ids = GrpcIds(one_node_service(Limits::default()));
        let ask = |ids: &GrpcIds, id: u64, uuid: &str, masked: bool| {
            let request = Request::new(DecodeRequest {
                id,
                uuid: uuid.to_owned(),
                masked,
            });
            runtime
                .block_on(ids.decode(request))
                .map(Response::into_inner)
                .map_err(|status| (status.code(), status.message().to_owned()))
        };
        let decode = |id: u64, uuid: &str| ask(&ids, id, uuid, false);
        let published = DecodeResponse {
            unix_ms: 1_539_202_764_211,
            node: 347,
            sequence: 0,
            id: 1_050_118_621_198_921_728,
        };
        assert_eq!(decode(1_050_118_621_198_921_728, ""), Ok(published));
        assert_eq!(decode(0, "01665fa2-4db3-7fac-8e92-c5527c95b000"), Ok(published));
        let invalid = |message: &str| Err((tonic::Code::InvalidArgument, message.to_owned()));
        assert_eq!(
            decode(0, "0189b1a9-8a5f-7e8c-8e92-c5527c95b000"),
            invalid(
                "invalid UUID \"0189b1a9-8a5f-7e8c-8e92-c5527c95b000\": uuid carries layout fingerprint 931: \
                 this layout's is 1003"
            )
        );
        assert_eq!(
            decode(0, "not-a-uuid"),
            invalid(
                "invalid UUID \"not-a-uuid\": not a UUID (invalid character: found `n` at 0): a UUID is 32 hex \
                 digits, grouped 8-4-4-4-12 by hyphens or not"
            )
        );
        assert_eq!(
            decode(5, "01665fa2-4db3-7fac-8e92-c5527c95b000"),
            invalid("both id 5 and uuid \"01665fa2-4db3-7fac-8e92-c5527c95b000\": allowed one of them")
        );
        let masked = mask.mask(Id::new(1_050_118_621_198_921_728)).get();
        assert_eq!(ask(&masking, masked, "", true), Ok(published));
        assert_ne!(ask(&masking, masked, "", false), Ok(published));
        assert_eq!(
            ask(&ids, masked, "", true),
            invalid("masked needs a server started with --mask-key-file: this one has no key")
        );
    }

    /// A runtime of two worker threads, for a stream's tasks.
    fn two_workers() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap()
    }

    /// A service on a generator of node 1, with `limits`.
    fn one_node_service(limits: Limits) -> Arc<Service> {
        let generator = ShardedGenerator::new(Layout::TWITTER, [1]).unwrap();
        Arc::new(Service::new(generator, limits, None).unwrap())
    }

    /// A stream whose client stops reading ends once it has waited the stall timeout to
    /// send, freeing its place among the server's streams; when the client reads again, it
    /// gets the messages sent before (the buffer's 4), then `DEADLINE_EXCEEDED`.
    #[test]
    fn a_stream_not_read_for_the_stall_timeout_ends_and_frees_its_place() {
        let runtime = two_workers();
        let service = one_node_service(Limits {
            max_streams: 1,
            // The shortest allowed.
            stall_timeout: Limits::MIN_TIMEOUT,
            ..Limits::default()
        });
        let ids = GrpcIds(Arc::clone(&service));
        let (freed, messages, status, end) = runtime.block_on(async {
            let mut stream = ids
                .stream_ids(Request::new(StreamIdsRequest { count: 1 << 32 }))
                .await
                .unwrap()
                .into_inner();
            // One message read, then none for a while.
            stream.next().await.unwrap().unwrap();
            let start = Instant::now();
            let freed = loop {
                if service.admit_stream().is_ok() {
                    break true;
                }
                if start.elapsed() > Duration::from_secs(10) {
                    break false;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            };
            if !freed {
                // Read on, the stream would run its 2^32 IDs.
                return (false, 0, None, false);
            }
            let mut messages = 0;
            let status = loop {
                match tokio::time::timeout(Duration::from_secs(10), stream.next()).await {
                    Ok(Some(Ok(_))) => messages += 1,
                    Ok(Some(Err(status))) => break Some(status),
                    Ok(None) | Err(_) => break None,
                }
            };
            (freed, messages, status, stream.next().await.is_none())
        });
        runtime.shutdown_background();
        assert!(freed, "the stream kept its place");
        assert_eq!(messages, 4);
        let status = status.expect("the stream ended without an error");
        assert_eq!(
            (status.code(), status.message()),
            (
                tonic::Code::DeadlineExceeded,
                "this stream's client read nothing for 1s: the stream ended after the IDs it \
                 sent, freeing its place"
            )
        );
        assert!(end);
    }

    /// A stream whose client is gone before its minting starts ends at once, giving back its
    /// place among the server's streams. (On a runtime left behind, not waited for: a
    /// stream that spins would hold its worker for good.)
    #[test]
    fn a_stream_cancelled_before_it_starts_ends_and_frees_its_place() {
        let runtime = two_workers();
        let service = one_node_service(Limits {
            max_streams: 1,
            ..Limits::default()
        });
        let ids = GrpcIds(Arc::clone(&service));
        let freed = runtime.block_on(async {
            for _ in 0..20 {
                let stream = ids
                    .stream_ids(Request::new(StreamIdsRequest { count: 1 << 32 }))
                    .await
                    .unwrap();
                drop(stream);
                let start = Instant::now();
                while service.admit_stream().is_err() {
                    if start.elapsed() > Duration::from_secs(5) {
                        return false;
                    }
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
            }
            true
        });
        runtime.shutdown_background();
        assert!(freed, "a cancelled stream kept its place");
    }
}
