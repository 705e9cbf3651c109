//! A small blocking etcd v3 client: the calls a lease makes (range, transaction, lease
//! grant, keep-alive and revoke), over gRPC (tonic), to any member of a cluster.
//!
//! Each call goes to the member that answered last, and on any failure to the next one, until
//! one answers or the call's time is up: a member that is down, partitioned or without a
//! leader costs one attempt. A call given up on is not called back: the member may still
//! apply it, late, after a later call (a frozen leader resumes). So every call a lease
//! makes is one that may be applied twice or late to no harm: reads, keep-alives and
//! revocations; a claim, checked for having taken effect before it is sent again; and mark
//! stores and releases, each compared with the mark's revision it replaces, so that a late
//! one changes nothing.

mod endpoints;
pub(crate) mod proto;

pub use endpoints::{Endpoints, EndpointsError};

use proto::{
    LeaseGrantRequest, LeaseGrantResponse, LeaseKeepAliveRequest, LeaseKeepAliveResponse, LeaseRevokeRequest,
    LeaseRevokeResponse, RangeRequest, RangeResponse, TxnRequest, TxnResponse,
};
use std::fmt;
use std::time::{Duration, Instant};
use tonic::codegen::http::uri::PathAndQuery;
use tonic::transport::{Channel, Endpoint};

/// Why a call failed: the last member's answer, or that none answered in time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CallError {
    /// The member tried last.
    pub endpoint: String,
    /// What it said: a gRPC status code and message.
    pub text: String,
}

impl fmt::Display for CallError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.endpoint, self.text)
    }
}

/// A connection to one cluster, with a runtime of its own on the calling thread.
pub(crate) struct Client {
    runtime: tokio::runtime::Runtime,
    endpoints: Endpoints,
    /// One lazily connected channel per member, in the order given.
    channels: Vec<Channel>,
    /// The member that answered last: tried first.
    preferred: usize,
    /// How long one attempt on one member may take.
    attempt: Duration,
}

impl Client {
    /// A client of `endpoints`'s cluster whose attempts on one member last at most `attempt`
    /// (connecting included). Connects on the first call.
    pub(crate) fn new(endpoints: &Endpoints, attempt: Duration) -> Client {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a current-thread runtime needs no resources that can run out");
        let channels = {
            let _entered = runtime.enter();
            endpoints
                .iter()
                .map(|(host, port)| {
                    Endpoint::from_shared(format!("http://{}", endpoints::join(host, *port)))
                        .expect("a parsed host and port make a URI")
                        .connect_timeout(attempt)
                        .timeout(attempt)
                        .tcp_nodelay(true)
                        .connect_lazy()
                })
                .collect()
        };
        Client {
            runtime,
            endpoints: endpoints.clone(),
            channels,
            preferred: 0,
            attempt,
        }
    }

    /// `KV.Range`.
    pub(crate) fn range(
        &mut self,
        request: RangeRequest,
        within: Duration,
    ) -> Result<RangeResponse, CallError> {
        self.unary("/etcdserverpb.KV/Range", request, within)
    }

    /// `KV.Txn`.
    pub(crate) fn txn(&mut self, request: TxnRequest, within: Duration) -> Result<TxnResponse, CallError> {
        self.unary("/etcdserverpb.KV/Txn", request, within)
    }

    /// `Lease.LeaseGrant`.
    pub(crate) fn grant(&mut self, ttl_s: i64, within: Duration) -> Result<LeaseGrantResponse, CallError> {
        self.unary(
            "/etcdserverpb.Lease/LeaseGrant",
            LeaseGrantRequest { ttl: ttl_s },
            within,
        )
    }

    /// `Lease.LeaseRevoke`.
    pub(crate) fn revoke(&mut self, id: i64, within: Duration) -> Result<LeaseRevokeResponse, CallError> {
        self.unary(
            "/etcdserverpb.Lease/LeaseRevoke",
            LeaseRevokeRequest { id },
            within,
        )
    }

    /// One renewal of a lease: a `Lease.LeaseKeepAlive` stream that sends one request and
    /// reads one answer.
    pub(crate) fn keep_alive(
        &mut self,
        id: i64,
        within: Duration,
    ) -> Result<LeaseKeepAliveResponse, CallError> {
        self.call(within, move |mut grpc| async move {
            let requests = tokio_stream::once(LeaseKeepAliveRequest { id });
            let path = PathAndQuery::from_static("/etcdserverpb.Lease/LeaseKeepAlive");
            let mut answers = grpc
                .streaming(
                    tonic::Request::new(requests),
                    path,
                    tonic_prost::ProstCodec::default(),
                )
                .await?
                .into_inner();
            answers
                .message()
                .await?
                .ok_or_else(|| tonic::Status::unavailable("the keep-alive stream ended without an answer"))
        })
    }

    fn unary<Q, A>(&mut self, path: &'static str, request: Q, within: Duration) -> Result<A, CallError>
    where
        Q: prost::Message + Clone + Send + 'static,
        A: prost::Message + Default + Send + 'static,
    {
        self.call(within, move |mut grpc| {
            let request = request.clone();
            async move {
                let path = PathAndQuery::from_static(path);
                grpc.unary(
                    tonic::Request::new(request),
                    path,
                    tonic_prost::ProstCodec::default(),
                )
                .await
                .map(tonic::Response::into_inner)
            }
        })
    }

    /// Runs `attempt` on the preferred member, then on each next one in turn, until one
    /// answers or `within` has passed (at least one attempt on each member is made when
    /// it fits).
    fn call<A, F, Fut>(&mut self, within: Duration, attempt: F) -> Result<A, CallError>
    where
        F: Fn(tonic::client::Grpc<Channel>) -> Fut,
        Fut: Future<Output = Result<A, tonic::Status>>,
    {
        let start = Instant::now();
        let members = self.channels.len();
        let mut tries = 0;
        loop {
            let member = (self.preferred + tries) % members;
            let mut grpc = tonic::client::Grpc::new(self.channels[member].clone());
            let one = self.attempt.min(within.saturating_sub(start.elapsed()));
            let result = self.runtime.block_on(async {
                let answer = async {
                    grpc.ready()
                        .await
                        .map_err(|error| tonic::Status::unavailable(error.to_string()))?;
                    attempt(grpc).await
                };
                match tokio::time::timeout(one, answer).await {
                    Ok(result) => result,
                    Err(_) => Err(tonic::Status::deadline_exceeded(format!("no answer in {one:?}"))),
                }
            });
            match result {
                Ok(answer) => {
                    self.preferred = member;
                    return Ok(answer);
                }
                Err(status) => {
                    tries += 1;
                    let spent = start.elapsed();
                    if spent >= within || (tries >= members && spent + self.attempt / 4 >= within) {
                        let (host, port) = self.endpoints.iter().nth(member).expect("a member per channel");
                        return Err(CallError {
                            endpoint: endpoints::join(host, *port),
                            text: describe(&status),
                        });
                    }
                    if tries % members == 0 {
                        // Every member failed once: give the cluster a moment (an
                        // election takes a second or so) before the next round.
                        std::thread::sleep((self.attempt / 8).min(within.saturating_sub(spent)));
                    }
                }
            }
        }
    }
}

/// A status as one line: its code, and its message with the transport's causes.
fn describe(status: &tonic::Status) -> String {
    let mut text = format!("{:?}: {}", status.code(), status.message());
    let mut source = std::error::Error::source(status);
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}
