//! Loom models of the [`Timeline`]: re-anchoring racing with reads. Run by
//! `loom-tests/run.sh` (`cargo test -p atomflake --lib` under `--cfg loom`).

use super::*;
use loom::sync::Arc;
use loom::sync::atomic::{AtomicU64, Ordering::SeqCst};
use loom::thread;

/// A counter of one count per 10 µs.
fn ten_us() -> u64 {
    u64::try_from(fixed_from_ns(10_000)).unwrap()
}

/// Invariant: a reader racing three checks of the discipline (the wall clock behind,
/// then ahead twice: a slew, then two jumps), each published whenever the writer gets
/// to it, and a counter ticking past the checks and past the first piece's horizon,
/// only ever sees whole published segments, and its readings never go back.
#[test]
fn reanchoring_racing_with_reads_never_tears_or_goes_back() {
    loom::model(|| {
        // A horizon of 1 count: the ticker passes it.
        let discipline = Discipline::with_horizon(ten_us(), 1);
        let first = discipline.anchor(0, fixed_from_ns(1_700_000_000_000_000_000));
        let timeline = Arc::new(Timeline::<AtomicU64>::new(first));
        let raw = Arc::new(AtomicU64::new(0));

        let writer = {
            let (timeline, raw) = (Arc::clone(&timeline), Arc::clone(&raw));
            thread::spawn(move || {
                let mut steering = Steering::new(discipline, first);
                let mut published = vec![first];
                // The wall clock 1 s behind the clock (slew), then 1 s ahead (jump), twice.
                for ahead in [false, true, true] {
                    let now = raw.load(SeqCst);
                    let clock = steering.current.fixed_at(now);
                    let second = fixed_from_ns(1_000_000_000);
                    let wall = if ahead { clock + second } else { clock - second };
                    // As the discipline thread.
                    steering.check(&*timeline, now, wall, None);
                    if steering.current != *published.last().unwrap() {
                        published.push(steering.current);
                    }
                }
                published
            })
        };
        let ticker = {
            let raw = Arc::clone(&raw);
            thread::spawn(move || {
                for _ in 0..2 {
                    raw.fetch_add(1, SeqCst);
                }
            })
        };
        let reads: Vec<(Segment, u64)> = (0..2).map(|_| timeline.read(|| raw.load(SeqCst))).collect();
        let published = writer.join().unwrap();
        ticker.join().unwrap();
        for (segment, _) in &reads {
            assert!(
                published.contains(segment),
                "torn read {segment:?} of {published:?}"
            );
        }
        let [(s0, r0), (s1, r1)] = reads[..] else {
            unreachable!()
        };
        assert!(
            s0.fixed_at(r0) <= s1.fixed_at(r1),
            "went back: {s0:?} at {r0}, then {s1:?} at {r1}"
        );
    });
}
