//! [`Run`]: IDs reserved together in one tick, held as their first ID, step and count.

use crate::format::id::Id;
use core::iter::FusedIterator;

/// IDs reserved together in one tick by one node: `first`, `first + step`, … ,
/// `len` of them, in increasing order. What
/// [`Generator::try_next_run`](crate::Generator::try_next_run) returns.
///
/// A tick's IDs from one node differ only in the sequence field, so they are an
/// arithmetic run whatever the layout's field order: `step` is 1 when the sequence is the
/// lowest field (Twitter) and `1 << 16` for Sonyflake, whose 16-bit machine ID sits below
/// it. Sending a run instead of its IDs costs three numbers for up to a tick's sequence
/// (4096 IDs for Twitter), and whoever expands it needs no layout.
///
/// # Examples
///
/// ```
/// use atomflake::{Generator, Layout};
///
/// let generator = Generator::new(Layout::TWITTER, 7)?;
/// let run = generator.try_next_run(100)?;
/// assert!((1..=100).contains(&run.len()));
/// let ids: Vec<_> = run.into_iter().collect();
/// assert_eq!((ids[0], ids.last().copied()), (run.first(), run.last()));
/// assert!(ids.windows(2).all(|pair| pair[1].get() - pair[0].get() == run.step()));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Run {
    first: Id,
    len: u64,
    step: u64,
}

impl Run {
    /// The run of `len` IDs from `first`, `step` apart: the caller reserved them, so the
    /// last one fits.
    pub(crate) const fn new(first: Id, len: u64, step: u64) -> Run {
        Run { first, len, step }
    }

    /// The first ID (when [`len`](Self::len) is not 0).
    pub const fn first(&self) -> Id {
        self.first
    }

    /// The last ID; `None` for an empty run.
    pub const fn last(&self) -> Option<Id> {
        match self.len {
            0 => None,
            len => Some(Id::new(self.first.get() + (len - 1) * self.step)),
        }
    }

    /// How many IDs the run holds.
    pub const fn len(&self) -> u64 {
        self.len
    }

    /// Whether the run holds no ID.
    pub const fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The difference between two consecutive IDs.
    pub const fn step(&self) -> u64 {
        self.step
    }

    /// The `index`th ID, from 0; `None` past the end.
    pub const fn get(&self, index: u64) -> Option<Id> {
        if index < self.len {
            Some(Id::new(self.first.get() + index * self.step))
        } else {
            None
        }
    }
}

impl IntoIterator for Run {
    type Item = Id;
    type IntoIter = RunIter;

    fn into_iter(self) -> RunIter {
        RunIter { next: 0, run: self }
    }
}

/// The IDs of a [`Run`], in order.
#[derive(Clone, Debug)]
pub struct RunIter {
    run: Run,
    next: u64,
}

impl Iterator for RunIter {
    type Item = Id;

    #[inline]
    fn next(&mut self) -> Option<Id> {
        let id = self.run.get(self.next)?;
        self.next += 1;
        Some(id)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = usize::try_from(self.run.len - self.next).unwrap_or(usize::MAX);
        (left, Some(left))
    }
}

impl ExactSizeIterator for RunIter {}

impl FusedIterator for RunIter {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Generator, Layout, LocalGenerator, ManualClock, MintError, ShardedGenerator};
    use std::time::Duration;

    #[test]
    fn a_run_holds_the_rest_of_a_tick_and_a_spent_tick_says_when_the_next_starts() {
        // Sonyflake: 10 ms ticks, 256 IDs a tick, the machine ID below the sequence.
        let layout = Layout::SONYFLAKE;
        let start = layout.epoch_ms() + 1_000_000;
        let clock = ManualClock::new(start + 3);
        let generator = Generator::with_clock(layout, 300, clock.clone()).unwrap();
        let first = generator.try_next_run(100).unwrap();
        assert_eq!((first.len(), first.step()), (100, 1 << 16));
        let rest = generator.try_next_run(1_000).unwrap();
        assert_eq!(rest.len(), 156, "a run never crosses into the next tick");
        for id in first.into_iter().chain(rest) {
            let parts = layout.decode(id);
            assert_eq!((parts.node, parts.unix_ms), (300, start));
        }
        assert_eq!(layout.decode(rest.last().unwrap()).sequence, 255, "{rest:?}");
        assert_eq!(
            generator.try_next_run(1),
            Err(MintError::SequenceExhausted {
                tick: (start - layout.epoch_ms()) / 10 + 1,
                retry_after: Duration::from_millis(7)
            })
        );
        clock.advance(7);
        let next = generator.try_next_run(2).unwrap();
        assert_eq!(layout.decode(next.first()).sequence, 0);
        assert_eq!(generator.try_next_run(0).unwrap().len(), 0);
    }

    #[test]
    fn every_generator_type_mints_runs() {
        let clock = ManualClock::new(1_700_000_000_000);
        let local = LocalGenerator::with_clock(Layout::TWITTER, 1, clock.clone()).unwrap();
        let sharded = ShardedGenerator::with_clock(Layout::TWITTER, [2, 3], clock).unwrap();
        assert_eq!(local.try_next_run(5000).unwrap().len(), 4096);
        let run = sharded.try_next_run(10).unwrap();
        assert_eq!(Layout::TWITTER.decode(run.first()).node, sharded.current_node());
        assert_eq!(run.step(), 1);
    }

    #[test]
    fn a_run_expands_to_its_ids_and_an_empty_one_to_none() {
        let sonyflake = Run::new(Id::new(7 << 16 | 5), 3, 1 << 16);
        assert_eq!(
            sonyflake.into_iter().map(Id::get).collect::<Vec<_>>(),
            [7 << 16 | 5, 8 << 16 | 5, 9 << 16 | 5]
        );
        assert_eq!(sonyflake.into_iter().len(), 3);
        assert_eq!(sonyflake.get(3), None);
        let empty = Run::new(Id::new(9), 0, 1);
        assert!(empty.is_empty());
        assert_eq!((empty.last(), empty.into_iter().next()), (None, None));
    }
}
