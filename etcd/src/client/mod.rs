//! A small blocking etcd v3 client: the calls a lease makes (range, transaction, lease
//! grant, keep-alive and revoke), over gRPC (tonic), to any member of a cluster; over TLS
//! for `etcds://`, logged in with a password where the URL names a user.
//!
//! Each call goes to the member that answered last, and on any failure to the next one, until
//! one answers or the call's time is up: a member that is down, partitioned or without a
//! leader costs one attempt. A call given up on is not called back: the member may still
//! apply it, late, after a later call (a frozen leader resumes). So every call a lease
//! makes is one that may be applied twice or late to no harm: reads, keep-alives and
//! revocations; a claim, checked for having taken effect before it is sent again; and mark
//! stores and releases, each compared with the mark's revision it replaces, so that a late
//! one changes nothing.
//!
//! A user logs in (`Auth.Authenticate`) on the first call and sends the token etcd gives it
//! with every call after; when etcd no longer accepts the token (it expired, or the users
//! and roles changed), the call logs in again and is tried again. A refusal that trying
//! again cannot change (a wrong password, a missing permission, a certificate not trusted)
//! ends the call, with what to fix, once every member has refused it: a member's refusal is
//! its own, and the call goes on to the next member first (what this client takes for a
//! refusal of its certificate, a TLS proxy whose own member is down does too). A call
//! whose time runs out while some member did not refuse it is a transient failure.

mod endpoints;
pub(crate) mod proto;
mod tls;

pub use endpoints::{Endpoints, EndpointsError};

use endpoints::User;
use proto::{
    AuthenticateRequest, AuthenticateResponse, LeaseGrantRequest, LeaseGrantResponse, LeaseKeepAliveRequest,
    LeaseKeepAliveResponse, LeaseRevokeRequest, LeaseRevokeResponse, RangeRequest, RangeResponse, TxnRequest,
    TxnResponse,
};
use std::fmt;
use std::time::{Duration, Instant};
use tls::{Connector, Verdict};
use tonic::codegen::http::uri::PathAndQuery;
use tonic::metadata::{AsciiMetadataValue, MetadataValue};
use tonic::transport::{Channel, Endpoint};

/// Why a call failed: the last member's answer, or that none answered in time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CallError {
    /// The member tried last.
    pub endpoint: String,
    /// What it said: a gRPC status code and message.
    pub text: String,
    /// Whether trying again cannot help: credentials, permissions or certificates that
    /// every member, or this client, refused, or TLS files that cannot be used.
    pub refused: bool,
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
    /// Per member, a refusal of this client's certificate its connections met (TLS only).
    verdicts: Vec<Verdict>,
    /// The member that answered last: tried first.
    preferred: usize,
    /// How long one attempt on one member may take.
    attempt: Duration,
    /// The user to log in as, if any.
    user: Option<User>,
    /// The token etcd gave `user`, while it has not refused it.
    token: Option<AsciiMetadataValue>,
    /// The prefix of the keys a lease reads and writes, for the message of a refusal.
    prefix: String,
}

/// What a failed attempt means for the next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Failure {
    /// Another attempt, on this member or the next, may succeed.
    Transient,
    /// etcd no longer accepts the token: log in again, then try again.
    StaleToken,
    /// No attempt on this member will succeed until someone changes the URL, the files or
    /// etcd's users.
    Refused,
}

impl Client {
    /// A client of `endpoints`'s cluster whose attempts on one member last at most `attempt`
    /// (connecting included), for keys under `prefix`. Connects on the first call.
    ///
    /// # Errors
    ///
    /// TLS files that cannot be read or used (refused).
    pub(crate) fn new(endpoints: &Endpoints, attempt: Duration, prefix: &str) -> Result<Client, CallError> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a current-thread runtime needs no resources that can run out");
        let tls = endpoints.tls().map(tls::config).transpose();
        let refused = |text: String| CallError {
            endpoint: endpoints.to_string(),
            text,
            refused: true,
        };
        let tls = tls.map_err(refused)?;
        let verdicts: Vec<Verdict> = endpoints.iter().map(|_| Verdict::default()).collect();
        let channels = {
            let _entered = runtime.enter();
            endpoints
                .iter()
                .zip(&verdicts)
                .map(|((host, port), verdict)| {
                    let address = endpoints::join(host, *port);
                    // Over TLS the connector makes the TLS connection itself; tonic's
                    // own TLS features stay off (with them, tonic refuses an https URI
                    // that it does not connect itself).
                    let scheme = if tls.is_some() { "https" } else { "http" };
                    let endpoint = Endpoint::from_shared(format!("{scheme}://{address}"))
                        .expect("a parsed host and port make a URI")
                        .connect_timeout(attempt)
                        .timeout(attempt)
                        .tcp_nodelay(true);
                    Ok(match &tls {
                        Some(config) => endpoint.connect_with_connector_lazy(
                            Connector::new(config.clone(), host, address, verdict.clone())
                                .map_err(|error| refused(format!("cannot connect over TLS: {error}")))?,
                        ),
                        None => endpoint.connect_lazy(),
                    })
                })
                .collect::<Result<_, CallError>>()?
        };
        Ok(Client {
            runtime,
            endpoints: endpoints.clone(),
            channels,
            verdicts,
            preferred: 0,
            attempt,
            user: endpoints.credentials().cloned(),
            token: None,
            prefix: prefix.to_owned(),
        })
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
        self.call(within, move |mut grpc, token| async move {
            let requests = tokio_stream::once(LeaseKeepAliveRequest { id });
            let path = PathAndQuery::from_static("/etcdserverpb.Lease/LeaseKeepAlive");
            let mut answers = grpc
                .streaming(
                    with_token(requests, token),
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
        self.call(within, move |mut grpc, token| {
            let request = request.clone();
            async move {
                let path = PathAndQuery::from_static(path);
                grpc.unary(
                    with_token(request, token),
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
    /// it fits), or every member has refused it for good (its last attempt on each was
    /// refused). With a user, each attempt sends the token, logging in first when there is
    /// none.
    fn call<A, F, Fut>(&mut self, within: Duration, attempt: F) -> Result<A, CallError>
    where
        F: Fn(tonic::client::Grpc<Channel>, Option<AsciiMetadataValue>) -> Fut,
        Fut: Future<Output = Result<A, tonic::Status>>,
    {
        let start = Instant::now();
        let members = self.channels.len();
        // Per member, whether its last attempt in this call was refused.
        let mut refused = vec![false; members];
        let mut tries = 0;
        loop {
            let member = (self.preferred + tries) % members;
            // A verdict speaks of the attempt whose connections met it alone: one recorded
            // before (a connection of an earlier attempt, failing while the client waited on
            // another member) is forgotten, and a member that answers keeps none.
            let _ = self.verdicts[member].take();
            let mut grpc = tonic::client::Grpc::new(self.channels[member].clone());
            let one = self.attempt.min(within.saturating_sub(start.elapsed()));
            let (user, token) = (self.user.as_ref(), self.token.clone());
            let result = self.runtime.block_on(async {
                let answer = async {
                    grpc.ready()
                        .await
                        .map_err(|error| tonic::Status::unavailable(error.to_string()))?;
                    let token = match (token, user) {
                        (None, Some(user)) => Some(authenticate(grpc.clone(), user).await?),
                        (token, _) => token,
                    };
                    Ok((attempt(grpc, token.clone()).await?, token))
                };
                match tokio::time::timeout(one, answer).await {
                    Ok(result) => result,
                    Err(_) => Err(tonic::Status::deadline_exceeded(format!("no answer in {one:?}"))),
                }
            });
            match result {
                Ok((answer, token)) => {
                    let _ = self.verdicts[member].take();
                    self.preferred = member;
                    self.token = token;
                    return Ok(answer);
                }
                Err(status) => {
                    tries += 1;
                    let spent = start.elapsed();
                    let refusal = self.verdicts[member].take();
                    let failure = match refusal {
                        Some(_) => Failure::Refused,
                        None => Failure::of(&status),
                    };
                    if failure == Failure::StaleToken {
                        self.token = None;
                    }
                    refused[member] = failure == Failure::Refused;
                    let every_member_refused = refused.iter().all(|&refused| refused);
                    if every_member_refused
                        || spent >= within
                        || (tries >= members && spent + self.attempt / 4 >= within)
                    {
                        let (host, port) = self.endpoints.iter().nth(member).expect("a member per channel");
                        let mut text = describe(&status);
                        match refusal {
                            Some(refusal) => text.push_str(refusal.what_to_fix()),
                            None if failure == Failure::Refused => text.push_str(&self.what_to_fix(&status)),
                            None => {}
                        }
                        return Err(CallError {
                            endpoint: endpoints::join(host, *port),
                            text,
                            refused: every_member_refused,
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

    /// What to change for a refused call to succeed, as the end of its message.
    fn what_to_fix(&self, status: &tonic::Status) -> String {
        let who = match self.user() {
            Some(user) => format!("user {user:?}"),
            None => "the user of the client certificate (its common name)".to_owned(),
        };
        let prefix = &self.prefix;
        match status.code() {
            tonic::Code::PermissionDenied => format!(
                ": {who} may not read and write the lease's keys: give one of its roles readwrite on \
                 the prefix {prefix} (etcdctl role grant-permission ROLE --prefix=true readwrite {prefix})"
            ),
            tonic::Code::FailedPrecondition => ": etcd has authentication off, so anyone who reaches it \
                 can rewrite the marks: turn it on (etcdctl auth enable), or drop USER:PASSWORD from the URL"
                .to_owned(),
            _ if status.message().contains("user name is empty") => ": etcd requires a user: give \
                 USER:PASSWORD in an etcds:// URL, or a client certificate (cert=, key=) whose common name \
                 is a user"
                .to_owned(),
            _ if status.message().contains("authentication failed") => {
                format!(": check the password of {who}")
            }
            _ => ": check the certificates in the etcds:// URL (cacert= for the members', cert= and key= \
                 for this client's)"
                .to_owned(),
        }
    }

    fn user(&self) -> Option<&str> {
        self.user.as_ref().map(|user| user.name.as_str())
    }
}

impl Failure {
    /// What etcd's answer (or the transport's error) means: etcd's own messages for its
    /// authentication errors (`api/v3rpc/rpctypes/error.go`), rustls's for a certificate.
    fn of(status: &tonic::Status) -> Failure {
        let message = status.message();
        match status.code() {
            tonic::Code::PermissionDenied | tonic::Code::FailedPrecondition
                if message.contains("permission denied")
                    || message.contains("authentication is not enabled") =>
            {
                Failure::Refused
            }
            tonic::Code::Unauthenticated if message.contains("invalid auth token") => Failure::StaleToken,
            tonic::Code::InvalidArgument if message.contains("revision of auth store is old") => {
                Failure::StaleToken
            }
            tonic::Code::InvalidArgument
                if message.contains("authentication failed") || message.contains("user name is empty") =>
            {
                Failure::Refused
            }
            _ => {
                let text = describe(status);
                if text.contains("invalid peer certificate") || text.contains("received fatal alert") {
                    Failure::Refused
                } else {
                    Failure::Transient
                }
            }
        }
    }
}

/// Logs `user` in through `grpc`: the token to send with the calls after.
async fn authenticate(
    mut grpc: tonic::client::Grpc<Channel>,
    user: &User,
) -> Result<AsciiMetadataValue, tonic::Status> {
    let request = AuthenticateRequest {
        name: user.name.clone(),
        password: user.password.clone(),
    };
    let path = PathAndQuery::from_static("/etcdserverpb.Auth/Authenticate");
    grpc.ready()
        .await
        .map_err(|error| tonic::Status::unavailable(error.to_string()))?;
    let answer: AuthenticateResponse = grpc
        .unary(
            tonic::Request::new(request),
            path,
            tonic_prost::ProstCodec::default(),
        )
        .await?
        .into_inner();
    MetadataValue::try_from(answer.token)
        .map_err(|_| tonic::Status::internal("etcd gave a token that is not ASCII"))
}

/// `message` as a request, with `token` as its `token` metadata (etcd's name) if any.
fn with_token<T>(message: T, token: Option<AsciiMetadataValue>) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    if let Some(token) = token {
        request.metadata_mut().insert("token", token);
    }
    request
}

/// A status as one line: its code, and its message with the transport's causes.
fn describe(status: &tonic::Status) -> String {
    let mut text = format!("{:?}: {}", status.code(), status.message());
    append_causes(&mut text, std::error::Error::source(status));
    text
}

/// Appends each cause from `source` on that `text` does not hold yet.
fn append_causes(text: &mut String, mut source: Option<&(dyn std::error::Error + 'static)>) {
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
}
