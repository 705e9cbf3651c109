//! What a node-ID lease costs: the minting path on a lease against the same generator
//! without one, the time to acquire a lease, and renewals per minute. Starts a throwaway
//! PostgreSQL server, or with `--etcd` a one-member etcd cluster on loopback
//! (`atomflake-test-servers`).
//!
//! `cargo run --release -p atomflake-benches --bin lease [ROUNDS] [--renewals] [--etcd]`
//!
//! - **Minting:** `ROUNDS` (default 7) alternating rounds of 20 M `next_id` calls on one
//!   thread, a `Generator` with no mark against one built on a lease, both on the default
//!   clock; a layout of 39/4/20 (1 M IDs per ms: never at the cap), so the rounds time
//!   the minting path, not the layout. Medians per ID and their ratio.
//! - **Acquire:** 20 acquisitions, each a new connection (as a new process makes), the
//!   table check and the claim, then a release. Median and maximum.
//! - **Renewals** (`--renewals`, two minutes more): the stores of the mark (each one a
//!   renewal) over 60 s, for an idle generator and for one minting all the time, counted
//!   by a wrapper around the lease, and for PostgreSQL also by the server
//!   (`pg_stat_user_tables.n_tup_upd`). On etcd each store is one transaction and one
//!   keep-alive.

use atomflake_test_servers::etcd::Cluster;
use atomflake_test_servers::postgres as pg;

use atomflake::mark::MarkStore;
use atomflake::{Builder, Clock, Generator, Layout};
use atomflake_serve::Watched;
use std::hint::black_box;
use std::time::{Duration, Instant};

/// 39-bit ms timestamps from 2024-01-01 (to 2041), 16 nodes, 1 M IDs per ms.
fn layout() -> Layout {
    Layout::builder()
        .timestamp_bits(39)
        .node_bits(4)
        .sequence_bits(20)
        .epoch_ms(1_704_067_200_000)
        .build()
        .expect("a valid layout")
}

const PER_ROUND: u32 = 20_000_000;

/// ns per ID over one round.
fn round<C: Clock>(generator: &Generator<C>) -> f64 {
    let start = Instant::now();
    for _ in 0..PER_ROUND {
        black_box(generator.next_id().get());
    }
    start.elapsed().as_secs_f64() * 1e9 / f64::from(PER_ROUND)
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// Where the leases are.
enum Engine {
    Postgres {
        server: pg::Server,
        database: Box<atomflake_postgres::Database>,
    },
    Etcd {
        /// Kept running until the bench ends.
        _cluster: Cluster,
        endpoints: atomflake_etcd::Endpoints,
    },
}

impl Engine {
    /// A lease in namespace `bench`, and its node.
    fn acquire(&self) -> (Box<dyn MarkStore>, u64) {
        match self {
            Engine::Postgres { database, .. } => {
                let options = atomflake_postgres::lease::LeaseOptions::new("bench");
                let lease = atomflake_postgres::lease::Lease::acquire(database, &layout(), &options)
                    .expect("a lease");
                let node = lease.node();
                (Box::new(lease), node)
            }
            Engine::Etcd { endpoints, .. } => {
                let options = atomflake_etcd::lease::LeaseOptions::new("bench");
                let lease =
                    atomflake_etcd::lease::Lease::acquire(endpoints, &layout(), &options).expect("a lease");
                let node = lease.node();
                (Box::new(lease), node)
            }
        }
    }

    /// Updates of the lease table so far, as PostgreSQL's statistics count them.
    fn server_updates(&self) -> Option<u64> {
        let Engine::Postgres { server, .. } = self else {
            return None;
        };
        // Statistics are flushed by each backend when it goes idle, at most once a second.
        std::thread::sleep(Duration::from_millis(1_500));
        let count = server
            .psql("SELECT n_tup_upd FROM pg_stat_user_tables WHERE relname = 'atomflake_lease'")
            .trim()
            .parse()
            .expect("a count");
        Some(count)
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let rounds: usize = args.iter().find_map(|arg| arg.parse().ok()).unwrap_or(7);
    let renewals = args.iter().any(|arg| arg == "--renewals");
    let engine = if args.iter().any(|arg| arg == "--etcd") {
        let cluster = Cluster::start("lease-bench", 1).expect("etcd (see test-servers/)");
        let endpoints = cluster.url().parse().expect("the cluster's URL");
        Engine::Etcd {
            _cluster: cluster,
            endpoints,
        }
    } else {
        let server = pg::Server::start("lease-bench").expect("PostgreSQL 15 (see test-servers/)");
        let database = server.conninfo().parse().expect("conninfo");
        Engine::Postgres {
            server,
            database: Box::new(database),
        }
    };

    let mut acquire = Vec::new();
    for _ in 0..20 {
        let start = Instant::now();
        let lease = engine.acquire();
        acquire.push(start.elapsed().as_secs_f64() * 1e3);
        drop(lease);
    }
    let slowest = acquire.iter().copied().fold(0.0, f64::max);
    println!(
        "acquire: median {:.2} ms, max {slowest:.2} ms (20 acquisitions)",
        median(acquire)
    );

    let plain = Builder::new(layout()).build(1).expect("node 1");
    let (store, node) = engine.acquire();
    // The stores are counted as the service counts them.
    let (counted, stores) = Watched::new(store);
    let leased = Builder::new(layout())
        .mark_store(counted)
        .build(node)
        .expect("built on the lease");
    let (mut without, mut with) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        without.push(round(&plain));
        with.push(round(&leased));
    }
    let (without_ns, with_ns) = (median(without.clone()), median(with.clone()));
    println!("mint without a lease: {without:.2?} ns/id, median {without_ns:.2}");
    println!("mint on a lease:      {with:.2?} ns/id, median {with_ns:.2}");
    println!("ratio (lease / none): {:.3}", with_ns / without_ns);

    if renewals {
        let minute = |busy: bool| {
            let (from, server_from) = (stores.stored(), engine.server_updates());
            let until = Instant::now() + Duration::from_secs(60);
            while Instant::now() < until {
                if busy {
                    for _ in 0..1_000 {
                        black_box(leased.next_id().get());
                    }
                } else {
                    std::thread::sleep(Duration::from_millis(100));
                }
            }
            let counted = stores.stored() - from;
            let server = engine
                .server_updates()
                .zip(server_from)
                .map(|(to, from)| to - from);
            (counted, server)
        };
        let (idle, idle_server) = minute(false);
        let (busy, busy_server) = minute(true);
        println!("mark stores (renewals) per minute (ttl 10 s): idle {idle}, minting {busy}");
        if let (Some(idle), Some(busy)) = (idle_server, busy_server) {
            println!("lease row updates per minute, counted by PostgreSQL: idle {idle}, minting {busy}");
        }
    }
}
