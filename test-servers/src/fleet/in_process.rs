//! The tests every engine runs with leases in the test's own process: a generator's whole
//! cycle on a lease, and a claim ended behind its holder's back.

use super::history::assert_unique;
use super::layout;
use crate::now_ms;
use atomflake::mark::{MarkStore, StoreErrorKind};
use atomflake::{Builder, Id};
use atomflake_lease::{Engine, EngineError, Lease, LeaseError, LeaseOptions, list};
use std::fmt::Debug;
use std::time::Duration;

/// A generator on a lease of engine `E` at `config` (namespace `cycle`) starts past the
/// node's mark, keeps the mark ahead of its IDs, and on drop stores the exact mark and
/// frees the node; the next claim of the node has a larger generation and starts past
/// every ID of the first.
///
/// # Panics
///
/// When it does not.
pub fn generator_cycle<E: Engine>(config: &E::Config, ttl: Duration)
where
    E::Error: Debug,
{
    let options = LeaseOptions::new("cycle").ttl(ttl).holder("test-holder");
    let lease = Lease::<E>::acquire(config, &layout(), &options).unwrap();
    assert_eq!((lease.node(), lease.high_water_ms()), (0, 0));
    assert_eq!(
        lease.describe(),
        format!(
            "the high-water mark of node 0 in {} lease namespace \"cycle\"",
            <E::Error as EngineError>::ENGINE
        )
    );
    let first_generation = lease.generation();
    let generator = Builder::new(layout()).mark_store(lease).build(0).unwrap();
    let first: Vec<Id> = (0..1_000).map(|_| generator.next_id()).collect();
    let rows = list::<E>(config, "cycle").unwrap();
    assert_eq!(rows.len(), 1);
    let row = &rows[0];
    assert!(
        row.live && row.holder.as_deref() == Some("test-holder"),
        "{row:?}"
    );
    assert_eq!(row.generation, Some(first_generation));
    let last_time = layout().decode(*first.last().unwrap()).unix_ms;
    assert!(
        row.high_water_ms > last_time,
        "mark {} ids at {last_time}",
        row.high_water_ms
    );
    drop(generator);

    let rows = list::<E>(config, "cycle").unwrap();
    assert!(!rows[0].live, "{rows:?}");
    // The exact mark: the end of the last ID's tick, not the mark stored ahead of need.
    let finished = rows[0].high_water_ms;
    assert_eq!(finished, last_time + 1);

    let lease = Lease::<E>::acquire(config, &layout(), &options).unwrap();
    assert_eq!((lease.node(), lease.high_water_ms()), (0, finished));
    assert!(lease.generation() > first_generation);
    let generator = Builder::new(layout()).mark_store(lease).build(0).unwrap();
    let next = generator.next_id();
    assert!(next > *first.last().unwrap());
    assert_unique(
        &first
            .iter()
            .map(|id| id.get())
            .chain([next.get()])
            .collect::<Vec<_>>(),
    );
}

/// A claim of node 0 in namespace `ended` that `end` ends behind its holder's back (as
/// the engine does when the holder's lease runs out, early or on time) and that a successor
/// then takes: the first holder's store and release are [`LeaseError::Lost`], and neither
/// touches the successor's claim or mark.
///
/// # Panics
///
/// When it is otherwise.
pub fn a_claim_ended_behind_its_back<E: Engine>(config: &E::Config, ttl: Duration, end: impl FnOnce())
where
    E::Error: Debug,
{
    let options = LeaseOptions::new("ended").ttl(ttl).node(0);
    let mut lease = Lease::<E>::acquire(config, &layout(), &options).unwrap();
    lease.store(now_ms() + 1_500).unwrap();
    let generation = lease.generation();
    assert_eq!(
        Lease::<E>::acquire(config, &layout(), &options).unwrap_err(),
        LeaseError::NodeTaken {
            namespace: "ended".to_owned(),
            node: 0
        }
    );
    end();
    let successor = Lease::<E>::acquire(config, &layout(), &options).unwrap();
    assert!(successor.generation() > generation);
    let error = lease.store(now_ms() + 5_000).unwrap_err();
    assert_eq!(error.kind(), StoreErrorKind::Lost);
    let lost = LeaseError::Lost {
        namespace: "ended".to_owned(),
        node: 0,
        generation,
    };
    assert_eq!(error.downcast_ref::<LeaseError<E::Error>>(), Some(&lost));
    lease.finish(1);
    assert_eq!(lease.release().unwrap_err(), lost);
    // The successor's claim and mark are untouched by the first holder's attempts.
    let rows = list::<E>(config, "ended").unwrap();
    assert!(
        rows[0].live && rows[0].generation == Some(successor.generation()),
        "{rows:?}"
    );
    assert_eq!(rows[0].high_water_ms, successor.high_water_ms());
}
