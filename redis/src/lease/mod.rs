//! Node-ID leases kept in Redis.
//!
//! What every lease does is told in [`atomflake_lease`]; [`Lease`] here is its lease on the
//! [`Redis`] engine. Each namespace has three hashes, under one hash tag:
//! `atomflake:lease:{NS}:claims` (node → the claim: its token, generation, expiry and
//! holder; kept after a release, as PostgreSQL keeps its rows), `…:marks` (node → its
//! high-water mark, never deleted) and `…:meta` (the longest lease time of the namespace);
//! and the server has `atomflake:lease:epoch` (the server's process and replication
//! history as last seen, and when).
//!
//! # The engine's part
//!
//! Claims, stores and releases are each one Lua script (`EVALSHA`), atomic on the server.
//!
//! - **Claim.** All or none of the lowest free nodes, their marks read in the same step;
//!   the claim's token is 128 random bits that this lease drew, which no other claim ever
//!   had, whatever the server forgets. A claim whose answer was lost is found again by its
//!   token.
//! - **Store.** Every node's mark is raised (never lowered) to the mark plus the loss
//!   window of `appendfsync everysec` (2 s), and the claim renewed if its token is still
//!   the node's; if not, the claim is lost.
//! - **Release.** The mark, exact or stored, and the claim ended, on the token.
//!
//! # When Redis forgets
//!
//! Redis acknowledges a write before it is on disk, and before its replicas have it. Each
//! script reads the server's `run_id` and `master_replid` (a restart changes the first, a
//! promotion the second) and records since when the server may have forgotten: its start
//! (from its uptime), or the first script after a promotion. Until the namespace's longest
//! lease time and 11 s have passed since then, **claims wait** (a claim sits out up to
//! a minute of it, past its own timeout; a longer wait is [`RedisError::Restarted`]): every
//! holder from before the restart or failover either renews on the new server (its store
//! puts its mark back, and its claim if the claim was lost is found lost: it stops) or stops
//! at its own deadline, a lease time after its last acknowledged store at most; and a
//! successor whose clock is up to 10 s behind a holder's mints past the holder's IDs even
//! where the server forgot the holder's mark. With `?replicas=N`, each write also waits for
//! `N` replicas (`WAIT`).
//!
//! The wait is measured by the server's clock, as expiry is: a step of that clock forward
//! within a lease time of a restart shortens it by the step. A node's generation counts
//! the claims the server remembers, and can repeat after lost writes; the token fences.

mod error;

pub use atomflake_lease::{
    CLAIM_TIMEOUT, LeaseOptions, LeaseRow, MAX_NAMESPACE_LEN, MAX_TTL, MIN_TTL, PassedOver,
};
pub use error::{LeaseError, RedisError};

use crate::RedisUrl;
use atomflake_lease::{
    Attempt, CallFailed, Claim, ClaimRequest, Claimed, Engine, Release, Shortfall, WriteError, Written,
};
use redis::{Connection, Script, Value};
use std::sync::LazyLock;
use std::time::{Duration, Instant};

/// An [`atomflake_lease::Lease`] on Redis.
pub type Lease = atomflake_lease::Lease<Redis>;

/// This engine's entry in an [`atomflake_lease::Registry`]: `redis://` and, over TLS,
/// `rediss://`.
pub const DRIVER: atomflake_lease::Driver = atomflake_lease::Driver::of::<Redis>();

impl atomflake_lease::UrlEngine for Redis {
    const SCHEMES: &'static [&'static str] = &["redis", "rediss"];
}

/// What a store adds to its mark: the writes that `appendfsync everysec` can lose on a
/// crash are at most about a second old (two, on a slow disk), so a mark that survives a
/// loss still covers what was minted under the marks that were lost.
const LOSS_WINDOW_MS: u64 = 2_000;

/// What a restart's wait adds to the namespace's longest lease time.
///
/// A holder stops minting 0.8 lease times after its last acknowledged store began, by its
/// own clock: within a lease time of the restart by the server's while the clocks' rates
/// differ by less than a quarter (the kernel's own assumption); a second more for that.
///
/// And a holder's IDs carry its own clock's time, which may be ahead of its successor's.
/// Where a server kept the holder's mark, the successor starts past it; where it forgot the
/// mark, only time covers them: the successor mints no earlier than this wait after the
/// holder stopped, so its clock may be behind the holder's by as much as a generator ever
/// waits for its clock to pass a mark
/// ([`MAX_RESTART_WAIT`](atomflake::Builder::MAX_RESTART_WAIT), 10 s).
const RESTART_MARGIN_MS: u64 = 1_000 + 10_000;
const _: () =
    assert!(atomflake::Builder::<atomflake::MonotonicClock>::MAX_RESTART_WAIT.as_millis() == 10_000);

/// The longest wait for the claim gate that a claim sits out; a longer one (a namespace
/// whose lease time is longer than a minute) is an error that says how long.
const LONGEST_GATE_WAIT: Duration = Duration::from_secs(61);

/// What a `WAIT` leaves for its answer to arrive before the call's deadline (half the time
/// left, when that is less).
const WAIT_ANSWER_TIME: Duration = Duration::from_secs(1);

/// The largest mark a Lua number holds exactly (2^53 - 1).
const MAX_LUA_EXACT: u64 = (1 << 53) - 1;

fn script(body: &str) -> Script {
    Script::new(&format!("{}\n{body}", include_str!("../../scripts/prelude.lua")))
}

static CLAIM: LazyLock<Script> = LazyLock::new(|| script(include_str!("../../scripts/claim.lua")));
static STORE: LazyLock<Script> = LazyLock::new(|| script(include_str!("../../scripts/store.lua")));
static RELEASE: LazyLock<Script> = LazyLock::new(|| script(include_str!("../../scripts/release.lua")));

/// The keys of a namespace, as the scripts take them: claims, marks, meta, the epoch.
fn keys(namespace: &str) -> [String; 4] {
    let key = |part: &str| format!("atomflake:lease:{{{namespace}}}:{part}");
    [
        key("claims"),
        key("marks"),
        key("meta"),
        "atomflake:lease:epoch".to_owned(),
    ]
}

/// The Redis lease engine: a connection, and the token of every claim of its [`Lease`].
pub struct Redis {
    url: RedisUrl,
    client: redis::Client,
    /// Dropped after a failed call, made again by the next.
    connection: Option<Connection>,
    keys: [String; 4],
    /// 32 hex digits drawn at random: the fence of every claim of this lease.
    token: String,
    ttl: Duration,
}

impl std::fmt::Debug for Redis {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Redis")
            .field("url", &self.url)
            .field("token", &self.token)
            .finish_non_exhaustive()
    }
}

/// The client of `url`, TLS files read.
fn client(url: &RedisUrl) -> Result<redis::Client, RedisError> {
    let refused = |cause: String| RedisError::Refused(CallFailed::new("connect", cause));
    let Some(files) = &url.tls else {
        return redis::Client::open(url.client_url()).map_err(RedisError::call("connect"));
    };
    let read = |path: &std::path::Path| {
        std::fs::read(path).map_err(|error| refused(format!("cannot read {}: {error}", path.display())))
    };
    let certificates = redis::TlsCertificates {
        client_tls: match &files.client {
            Some((cert, key)) => Some(redis::ClientTlsConfig {
                client_cert: read(cert)?,
                client_key: read(key)?,
            }),
            None => None,
        },
        root_cert: files.ca.as_deref().map(read).transpose()?,
    };
    redis::Client::build_with_tls(url.client_url(), certificates).map_err(RedisError::call("connect"))
}

/// What is left until `deadline`, at least a millisecond (a socket timeout of zero is
/// refused).
fn left(deadline: Instant) -> Duration {
    deadline
        .saturating_duration_since(Instant::now())
        .max(Duration::from_millis(1))
}

impl Redis {
    /// The connection, made again if the last call failed, its timeouts set to `deadline`.
    fn connection(&mut self, action: &'static str, deadline: Instant) -> Result<&mut Connection, RedisError> {
        if self.connection.is_none() {
            let connection = self
                .client
                .get_connection_with_timeout(left(deadline))
                .map_err(RedisError::call(action))?;
            self.connection = Some(connection);
        }
        let connection = self.connection.as_mut().expect("made above");
        connection
            .set_read_timeout(Some(left(deadline)))
            .and_then(|()| connection.set_write_timeout(Some(left(deadline))))
            .map_err(RedisError::call(action))?;
        Ok(connection)
    }

    /// Runs `script` with the namespace's keys and `args`, by `deadline`; then, with
    /// `?replicas=N`, waits for `N` replicas to have it.
    fn run(
        &mut self,
        action: &'static str,
        script: &Script,
        args: &[String],
        deadline: Instant,
    ) -> Result<Value, RedisError> {
        let replicas = self.url.replicas;
        let keys = self.keys.clone();
        let result = (|| {
            let connection = self.connection(action, deadline)?;
            let mut invocation = script.prepare_invoke();
            for key in &keys {
                invocation.key(key);
            }
            for arg in args {
                invocation.arg(arg);
            }
            let value: Value = invocation.invoke(connection).map_err(RedisError::call(action))?;
            if replicas > 0 {
                // WAIT answers when its own time is up: it gets less than the socket's
                // timeout, so that a slow replica reads as too few acknowledgements rather
                // than as a lost connection. At least 1 ms: `WAIT N 0` blocks for ever.
                let socket = left(deadline);
                let wait = socket.saturating_sub((socket / 2).min(WAIT_ANSWER_TIME));
                let wait_ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX).max(1);
                let acknowledged: u32 = redis::cmd("WAIT")
                    .arg(replicas)
                    .arg(wait_ms)
                    .query(connection)
                    .map_err(RedisError::call(action))?;
                if acknowledged < replicas {
                    return Err(RedisError::Unreplicated {
                        acknowledged,
                        asked: replicas,
                    });
                }
            }
            Ok(value)
        })();
        if matches!(result, Err(RedisError::Call(_))) {
            self.connection = None;
        }
        result
    }

    /// A fenced write of `mark` on `claims`: a store, or with `release`, a release.
    fn write(
        &mut self,
        claims: &[Claim<()>],
        mark: u64,
        release: Option<bool>,
        deadline: Instant,
    ) -> Written<RedisError> {
        let mark = mark.min(MAX_LUA_EXACT);
        let mut args = vec![self.token.clone()];
        let (action, script) = match release {
            None => {
                args.push(self.ttl.as_millis().to_string());
                args.push(mark.saturating_add(LOSS_WINDOW_MS).min(MAX_LUA_EXACT).to_string());
                ("store the mark", &*STORE)
            }
            Some(exact) => {
                let mark = if exact {
                    mark
                } else {
                    mark.saturating_add(LOSS_WINDOW_MS).min(MAX_LUA_EXACT)
                };
                args.push(mark.to_string());
                args.push(if exact { "1" } else { "0" }.to_owned());
                ("release", &*RELEASE)
            }
        };
        args.extend(claims.iter().map(|claim| claim.node.to_string()));
        let answer = self.run(action, script, &args, deadline)?;
        let lost = integers(&answer).ok_or_else(|| self.corrupt(1, format!("the answer {answer:?}")))?;
        match lost.first() {
            None => Ok(()),
            Some(&index) => Err(WriteError::Lost {
                claim: usize::try_from(index).unwrap_or(usize::MAX),
            }),
        }
    }

    fn corrupt(&self, key: usize, problem: String) -> RedisError {
        RedisError::Corrupt {
            key: self.keys[key].clone(),
            problem,
        }
    }
}

/// What `list` reads in one `MULTI`: the claims, the marks and the server's `TIME`.
type Listed = (Vec<(u64, String)>, Vec<(u64, u64)>, (i64, i64));

/// The integers of an array answer.
fn integers(value: &Value) -> Option<Vec<i64>> {
    match value {
        Value::Array(items) => items.iter().map(integer).collect(),
        _ => None,
    }
}

/// An integer answer, or a bulk string of one.
fn integer(value: &Value) -> Option<i64> {
    match value {
        Value::Int(number) => Some(*number),
        Value::BulkString(bytes) => std::str::from_utf8(bytes).ok()?.parse().ok(),
        Value::SimpleString(text) => text.parse().ok(),
        _ => None,
    }
}

fn text(value: &Value) -> Option<&str> {
    match value {
        Value::BulkString(bytes) => std::str::from_utf8(bytes).ok(),
        Value::SimpleString(text) => Some(text),
        _ => None,
    }
}

fn to_u64(number: i64) -> Option<u64> {
    u64::try_from(number).ok()
}

impl Engine for Redis {
    type Config = RedisUrl;
    type Error = RedisError;
    /// The token is the lease's, one for all its claims: the engine holds it.
    type Fence = ();

    fn connect(url: &RedisUrl, options: &LeaseOptions, deadline: Instant) -> Result<Self, RedisError> {
        let mut engine = Redis {
            url: url.clone(),
            client: client(url)?,
            connection: None,
            keys: keys(&options.namespace),
            token: format!("{:032x}", rand::random::<u128>()),
            ttl: options.ttl,
        };
        engine.connection("connect", deadline)?;
        Ok(engine)
    }

    fn claim(&mut self, request: &ClaimRequest<'_>) -> Result<Attempt<()>, RedisError> {
        let args = [
            self.token.clone(),
            request.holder.to_owned(),
            request.nodes.start().to_string(),
            request.nodes.end().min(&MAX_LUA_EXACT).to_string(),
            request.count.to_string(),
            request.reach.min(MAX_LUA_EXACT).to_string(),
            request.ttl.as_millis().to_string(),
            RESTART_MARGIN_MS.to_string(),
        ];
        let answer = match self.run("claim", &CLAIM, &args, request.deadline) {
            Ok(answer) => answer,
            // The claim may have landed: the next attempt, with the same token, finds it.
            // (Too few replicas is final: `WAIT` has had all but the last moments.)
            Err(RedisError::Call(_)) if Instant::now() < request.deadline => {
                return Ok(Attempt::Raced);
            }
            Err(error) => return Err(error),
        };
        let bad = |what: &str| self.corrupt(0, format!("{what} in the claim's answer {answer:?}"));
        let Value::Array(items) = &answer else {
            return Err(bad("no array"));
        };
        let number = |index: usize| items.get(index).and_then(integer).and_then(to_u64);
        match items.first().and_then(text) {
            Some("gated") => {
                let wait = Duration::from_millis(number(1).ok_or_else(|| bad("no wait"))?);
                if wait > LONGEST_GATE_WAIT {
                    return Err(RedisError::Restarted { wait });
                }
                // The gate is waited out whatever the claim's deadline, which then counts
                // from its end.
                std::thread::sleep(wait);
                let mut request = request.clone();
                request.deadline += wait;
                self.claim(&request)
            }
            Some("short") => {
                let held = number(1).ok_or_else(|| bad("no count held"))?;
                let ahead = items
                    .get(2)
                    .and_then(integer)
                    .ok_or_else(|| bad("no node ahead"))?;
                let ahead = match to_u64(ahead) {
                    Some(node) => Some(PassedOver::new(
                        node,
                        number(3).ok_or_else(|| bad("no mark ahead"))?,
                    )),
                    None => None,
                };
                Ok(Attempt::Short(Shortfall { held, ahead }))
            }
            Some("claimed") => {
                let mark = number(1).ok_or_else(|| bad("no mark"))?;
                let split = items
                    .iter()
                    .position(|item| text(item) == Some("|"))
                    .ok_or_else(|| bad("no separator"))?;
                let pairs = |from: usize, to: usize| -> Option<Vec<(u64, u64)>> {
                    items[from..to]
                        .chunks(2)
                        .map(|pair| Some((to_u64(integer(pair.first()?)?)?, to_u64(integer(pair.get(1)?)?)?)))
                        .collect()
                };
                let claims = pairs(2, split).ok_or_else(|| bad("a bad claim"))?;
                let passed = pairs(split + 1, items.len()).ok_or_else(|| bad("a bad node passed over"))?;
                Ok(Attempt::Claimed(Claimed {
                    claims: claims
                        .into_iter()
                        .map(|(node, generation)| Claim {
                            node,
                            generation: i64::try_from(generation).unwrap_or(i64::MAX),
                            fence: (),
                        })
                        .collect(),
                    mark,
                    passed_over: passed
                        .into_iter()
                        .map(|(node, mark)| PassedOver::new(node, mark))
                        .collect(),
                }))
            }
            _ => Err(bad("no kind")),
        }
    }

    fn store(&mut self, claims: &mut [Claim<()>], mark: u64, deadline: Instant) -> Written<RedisError> {
        self.write(claims, mark, None, deadline)
    }

    fn release(
        &mut self,
        claims: &mut [Claim<()>],
        release: Release,
        deadline: Instant,
    ) -> Written<RedisError> {
        let exact = matches!(release, Release::Exact(_));
        self.write(claims, release.mark(), Some(exact), deadline)
    }

    fn list(url: &RedisUrl, namespace: &str) -> Result<Vec<LeaseRow>, RedisError> {
        let [claims, marks, ..] = keys(namespace);
        let mut connection = client(url)?
            .get_connection_with_timeout(CLAIM_TIMEOUT)
            .map_err(RedisError::call("list"))?;
        let (claimed, marked, (seconds, micros)): Listed = redis::pipe()
            .atomic()
            .hgetall(&claims)
            .hgetall(&marks)
            .cmd("TIME")
            .query(&mut connection)
            .map_err(RedisError::call("list"))?;
        let now = seconds * 1000 + micros / 1000;
        let mut rows: std::collections::BTreeMap<u64, LeaseRow> = marked
            .into_iter()
            .map(|(node, mark)| (node, LeaseRow::new(node, mark)))
            .collect();
        for (node, entry) in claimed {
            let corrupt = |problem: &str| RedisError::Corrupt {
                key: claims.clone(),
                problem: format!("node {node}: {problem}"),
            };
            let entry: serde_json::Value = serde_json::from_str(&entry).map_err(|_| corrupt("not JSON"))?;
            let field = |name: &str| entry.get(name);
            let holder = field("h")
                .and_then(serde_json::Value::as_str)
                .unwrap_or_default()
                .to_owned();
            let generation = field("g")
                .and_then(serde_json::Value::as_i64)
                .ok_or_else(|| corrupt("no generation"))?;
            let expires: i64 = field("e")
                .and_then(serde_json::Value::as_str)
                .and_then(|expires| expires.parse().ok())
                .ok_or_else(|| corrupt("no expiry"))?;
            let row = rows.remove(&node).unwrap_or_else(|| LeaseRow::new(node, 0));
            rows.insert(node, row.held(holder, generation).expires(expires, expires > now));
        }
        Ok(rows.into_values().collect())
    }

    fn close(&mut self) {
        self.connection = None;
    }
}
