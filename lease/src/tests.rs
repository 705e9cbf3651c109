//! The kernel against an engine kept in memory: claims, refusals, fenced stores and the
//! release, as every engine gets them.

use super::*;
use crate::lease::unix_now_ms;
use atomflake::Layout;
use atomflake::mark::{MarkStore, Tenure};
use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// An engine error: the memory "server" is unreachable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Down;

impl fmt::Display for Down {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the memory engine is down")
    }
}

impl std::error::Error for Down {}

impl EngineError for Down {
    const ENGINE: &'static str = "memory";
    fn is_transient(&self) -> bool {
        true
    }
}

/// One node's row: its live claim's token, and its mark.
#[derive(Debug, Default, Clone, Copy)]
struct Row {
    token: Option<i64>,
    mark: u64,
}

/// The memory "server": rows by node, the last token drawn, whether it answers.
#[derive(Debug, Default)]
pub(crate) struct Server {
    rows: BTreeMap<u64, Row>,
    tokens: i64,
    down: bool,
}

#[derive(Debug)]
pub(crate) struct Memory(Arc<Mutex<Server>>);

/// Where the memory engine's "server" is: a lease URL `memory://NAME` names one, made on
/// first use.
#[derive(Debug, Default)]
pub(crate) struct Shared(Arc<Mutex<Server>>);

impl std::ops::Deref for Shared {
    type Target = Mutex<Server>;
    fn deref(&self) -> &Mutex<Server> {
        &self.0
    }
}

impl std::str::FromStr for Shared {
    type Err = std::io::Error;
    fn from_str(url: &str) -> Result<Shared, std::io::Error> {
        static SERVERS: Mutex<BTreeMap<String, Arc<Mutex<Server>>>> = Mutex::new(BTreeMap::new());
        let name = url.split_once("://").map_or("", |(_, name)| name);
        if name.is_empty() {
            return Err(std::io::Error::other(
                "a memory URL names a server after memory://",
            ));
        }
        let mut servers = SERVERS.lock().unwrap();
        Ok(Shared(Arc::clone(servers.entry(name.to_owned()).or_default())))
    }
}

impl Engine for Memory {
    type Config = Shared;
    type Error = Down;
    type Fence = ();

    fn connect(config: &Self::Config, _: &LeaseOptions, _: Instant) -> Result<Memory, Down> {
        if config.lock().unwrap().down {
            return Err(Down);
        }
        Ok(Memory(Arc::clone(&config.0)))
    }

    fn claim(&mut self, request: &ClaimRequest<'_>) -> Result<Attempt<()>, Down> {
        let mut server = self.0.lock().unwrap();
        let live = server
            .rows
            .iter()
            .filter(|(_, row)| row.token.is_some())
            .map(|(&node, _)| node)
            .collect();
        let marks = server.rows.iter().map(|(&node, row)| (node, row.mark)).collect();
        let (chosen, passed_over) = match choose(request, &live, &marks) {
            Ok(chosen) => chosen,
            Err(shortfall) => return Ok(Attempt::Short(shortfall)),
        };
        let mut claims = Vec::new();
        let mut mark = 0;
        for node in chosen {
            server.tokens += 1;
            let token = server.tokens;
            let row = server.rows.entry(node).or_default();
            row.token = Some(token);
            mark = mark.max(row.mark);
            claims.push(Claim {
                node,
                generation: token,
                fence: (),
            });
        }
        Ok(Attempt::Claimed(Claimed {
            claims,
            mark,
            passed_over,
        }))
    }

    fn store(&mut self, claims: &mut [Claim<()>], mark: u64, _: Instant) -> Written<Down> {
        self.write(claims, mark, false)
    }

    fn release(&mut self, claims: &mut [Claim<()>], release: Release, _: Instant) -> Written<Down> {
        self.write(claims, release.mark(), true)
    }

    fn list(config: &Self::Config, _: &str) -> Result<Vec<LeaseRow>, Down> {
        let server = config.lock().unwrap();
        let marks = server.rows.iter().map(|(&node, row)| (node, row.mark));
        let claims = server
            .rows
            .iter()
            .filter_map(|(&node, row)| Some((node, "memory".to_owned(), row.token?)));
        Ok(LeaseRow::merge(marks, claims))
    }
}

impl Memory {
    fn write(&self, claims: &[Claim<()>], mark: u64, end: bool) -> Written<Down> {
        let mut server = self.0.lock().unwrap();
        if server.down {
            return Err(WriteError::Engine(Down));
        }
        for (i, claim) in claims.iter().enumerate() {
            let row = server.rows.get_mut(&claim.node).unwrap();
            if row.token != Some(claim.generation) {
                return Err(WriteError::Lost { claim: i });
            }
            row.mark = mark;
            if end {
                row.token = None;
            }
        }
        Ok(())
    }
}

const LAYOUT: Layout = Layout::TWITTER;

fn acquire(server: &Shared, options: &LeaseOptions) -> Result<Lease<Memory>, LeaseError<Down>> {
    Lease::acquire(server, &LAYOUT, options)
}

fn small() -> Layout {
    Layout::builder()
        .timestamp_bits(41)
        .node_bits(2)
        .sequence_bits(20)
        .epoch_ms(0)
        .build()
        .unwrap()
}

#[test]
fn bad_options_are_exact_errors_with_text_naming_the_value_and_the_range() {
    let server = Arc::default();
    for namespace in ["", "a/b", "ns with space", &"n".repeat(MAX_NAMESPACE_LEN + 1)] {
        let error = acquire(&server, &LeaseOptions::new(namespace)).unwrap_err();
        assert_eq!(
            error,
            LeaseError::InvalidNamespace {
                namespace: namespace.to_owned()
            }
        );
        assert!(!error.is_transient());
    }
    assert!(acquire(&server, &LeaseOptions::new("n".repeat(MAX_NAMESPACE_LEN))).is_ok());
    for ttl in [
        Duration::ZERO,
        Duration::from_millis(1_500),
        Duration::from_secs(3601),
    ] {
        let error = acquire(&server, &LeaseOptions::new("ns").ttl(ttl)).unwrap_err();
        assert_eq!(error, LeaseError::TtlOutOfRange { ttl });
    }
    assert_eq!(
        LeaseError::<Down>::TtlOutOfRange {
            ttl: Duration::from_millis(1_500)
        }
        .to_string(),
        "lease time 1.5s is out of range: allowed whole seconds in 1s..=3600s"
    );
    assert_eq!(
        LeaseError::<Down>::InvalidNamespace {
            namespace: "a/b".to_owned()
        }
        .to_string(),
        "invalid lease namespace \"a/b\": allowed 1..=63 bytes of ASCII letters, digits, '-', '_' and '.'"
    );
    let error = acquire(&server, &LeaseOptions::new("ns").node(1024)).unwrap_err();
    assert_eq!(
        error,
        LeaseError::Nodes(NodesError::NodeOutOfRange {
            node: 1024,
            max: 1023
        })
    );
    assert_eq!(
        error.to_string(),
        "node 1024 is out of range: the layout allows 0..=1023"
    );
    assert_eq!(
        acquire(&server, &LeaseOptions::new("ns").node(3).nodes(2)).unwrap_err(),
        LeaseError::Nodes(NodesError::CountOutOfRange { count: 2, max: 1 })
    );
}

#[test]
fn claims_take_the_lowest_free_nodes_and_refusals_say_why() {
    let server = Arc::default();
    let layout = small();
    let options = LeaseOptions::new("ns").holder("test");
    let first = Lease::<Memory>::acquire(&server, &layout, &options).unwrap();
    assert_eq!((first.node(), first.generation(), first.holder()), (0, 1, "test"));
    let pair = Lease::<Memory>::acquire(&server, &layout, &options.clone().nodes(2)).unwrap();
    assert_eq!(pair.nodes(), [1, 2]);
    assert_eq!(
        Lease::<Memory>::acquire(&server, &layout, &options.clone().nodes(2)).unwrap_err(),
        LeaseError::TooFewFreeNodes {
            namespace: "ns".to_owned(),
            count: 2,
            free: 1
        }
    );
    let taken = Lease::<Memory>::acquire(&server, &layout, &options.clone().node(1)).unwrap_err();
    assert_eq!(
        taken.to_string(),
        "node 1 of memory lease namespace \"ns\" is held by a live lease"
    );
    let _last = Lease::<Memory>::acquire(&server, &layout, &options).unwrap();
    let none = Lease::<Memory>::acquire(&server, &layout, &options).unwrap_err();
    assert_eq!(
        none,
        LeaseError::NoFreeNode {
            namespace: "ns".to_owned(),
            max: 3
        }
    );
    assert!(none.is_transient());
    // Released: free again, with the mark it left.
    drop(pair);
    let rows = list::<Memory>(&server, "ns").unwrap();
    assert_eq!(
        rows.iter().map(|row| (row.node, row.live)).collect::<Vec<_>>(),
        [(0, true), (1, false), (2, false), (3, true)]
    );
    assert_eq!(
        list::<Memory>(&server, "a b").unwrap_err(),
        LeaseError::InvalidNamespace {
            namespace: "a b".to_owned()
        }
    );
    let again = Lease::<Memory>::acquire(&server, &layout, &options).unwrap();
    assert_eq!(again.node(), 1);
}

#[test]
fn a_free_node_with_a_mark_far_ahead_is_passed_over_and_alone_it_is_ahead() {
    let server = Shared::default();
    let far = unix_now_ms() + 3_600_000;
    server.lock().unwrap().rows.insert(
        0,
        Row {
            token: None,
            mark: far,
        },
    );
    let lease = acquire(&server, &LeaseOptions::new("ns")).unwrap();
    assert_eq!(lease.node(), 1);
    assert_eq!(lease.passed_over(), [PassedOver::new(0, far)]);
    // Asked for, it is claimed whatever its mark.
    let asked = acquire(&server, &LeaseOptions::new("ns").node(0)).unwrap();
    assert_eq!(asked.high_water_ms(), far);
    drop(asked);
    let layout = Layout::builder()
        .timestamp_bits(41)
        .node_bits(0)
        .sequence_bits(22)
        .epoch_ms(0)
        .build()
        .unwrap();
    let error = Lease::<Memory>::acquire(&server, &layout, &LeaseOptions::new("ns")).unwrap_err();
    let LeaseError::Ahead { node: 0, mark_ms, .. } = error else {
        panic!("{error}");
    };
    assert_eq!(mark_ms, far);
    assert!(error.is_transient());
}

#[test]
fn stores_are_fenced_and_a_lost_claim_is_lost_for_good() {
    let server = Shared::default();
    let mut lease = acquire(&server, &LeaseOptions::new("ns")).unwrap();
    lease.store(1_000).unwrap();
    assert_eq!(server.lock().unwrap().rows[&0].mark, 1_000);
    server.lock().unwrap().down = true;
    let failed = lease.store(2_000).unwrap_err();
    assert!(failed.is_transient());
    assert_eq!(failed.to_string(), "the memory engine is down");
    // Another holder took the node.
    {
        let mut server = server.lock().unwrap();
        server.down = false;
        server.rows.get_mut(&0).unwrap().token = Some(99);
    }
    let lost = lease.store(3_000).unwrap_err();
    assert!(!lost.is_transient());
    assert_eq!(
        lost.downcast_ref::<LeaseError<Down>>(),
        Some(&LeaseError::Lost {
            namespace: "ns".to_owned(),
            node: 0,
            generation: 1
        })
    );
    assert_eq!(
        lost.to_string(),
        "memory lease on node 0 of namespace \"ns\" is lost: memory no longer holds this holder's \
         claim (generation 1); minting has ended"
    );
    assert_eq!(server.lock().unwrap().rows[&0].mark, 1_000);
    assert_eq!(
        lease.describe(),
        "the high-water mark of node 0 in memory lease namespace \"ns\""
    );
    assert_eq!(lease.tenure(), Tenure::lease(LeaseOptions::DEFAULT_TTL));
}

#[test]
fn the_release_writes_the_exact_mark_when_the_generator_finished_else_the_stored_one() {
    let server = Shared::default();
    let mut lease = acquire(&server, &LeaseOptions::new("ns")).unwrap();
    lease.store(5_000).unwrap();
    lease.finish(4_000);
    lease.release().unwrap();
    assert_eq!(server.lock().unwrap().rows[&0].mark, 4_000);
    assert_eq!(server.lock().unwrap().rows[&0].token, None);
    let mut lease = acquire(&server, &LeaseOptions::new("ns")).unwrap();
    assert_eq!(lease.high_water_ms(), 4_000);
    lease.store(6_000).unwrap();
    drop(lease);
    assert_eq!(server.lock().unwrap().rows[&0].mark, 6_000);
    // Never below the mark claimed.
    let mut lease = acquire(&server, &LeaseOptions::new("ns")).unwrap();
    lease.finish(10);
    drop(lease);
    assert_eq!(server.lock().unwrap().rows[&0].mark, 6_000);
}

#[test]
fn an_engine_out_of_reach_is_its_own_transient_error() {
    let server = Shared::default();
    server.lock().unwrap().down = true;
    let error = acquire(&server, &LeaseOptions::new("ns")).unwrap_err();
    assert_eq!(error, LeaseError::Engine(Down));
    assert!(error.is_transient());
    assert_eq!(error.to_string(), "the memory engine is down");
}

impl crate::registry::UrlEngine for Memory {
    const SCHEMES: &'static [&'static str] = &["memory", "memory+tls"];
}
