//! Minting over a state word that the caller keeps, with the time passed in: for hosts that
//! keep a generator's state outside the generator types, such as PostgreSQL's shared
//! memory (atomflake's extension, `extension/` in the repository).
//!
//! A [`WordMinter`] runs the generators' own transition and CAS loop over a caller's
//! [`AtomicU64`]: the same rules hold for every word it advances (IDs never repeat and
//! never decrease, a clock that moves back continues the last tick, a spent tick is
//! reported, never skipped). What a generator does itself is left to the caller, which
//! knows its host:
//!
//! - **reading the clock**: pass the Unix time in ms to every [`mint`](WordMinter::mint);
//! - **waiting for a spent tick**: [`Refusal::Spent`] says until when;
//! - **the high-water mark**: pass the mark last stored durably; a slot at or past it is
//!   refused with [`Refusal::Uncovered`], which names the mark to store before minting on.
//!   After a restart, start every word at [`start`](WordMinter::start) of the stored mark.
//!   [`read_mark`] and [`write_mark`] keep it in a file of the high-water file's format
//!   ([`Builder::high_water_file`](crate::Builder::high_water_file)), written durably.
//!
//! Any number of threads or processes may mint over one word at once. The word holds the
//! next free slot of the layout's span (the state word, see the crate's design docs); the
//! caller only creates it, with [`start`](WordMinter::start), and never writes it. So,
//! unlike the generators, a `WordMinter` does not check the process it mints in: processes
//! forked from the one that built it share its words on purpose.
//!
//! # Examples
//!
//! ```
//! use atomflake::raw::{Refusal, WordMinter};
//! use atomflake::Layout;
//! use std::sync::atomic::AtomicU64;
//!
//! let minter = WordMinter::new(Layout::TWITTER, 7)?;
//! let mut mark = 0; // no mark stored yet
//! let word = AtomicU64::new(minter.start(mark));
//! let now = 1_700_000_000_000;
//! let id = loop {
//!     match minter.mint(&word, now, mark) {
//!         Ok(id) => break id,
//!         // Store the new mark durably (a file, synced), then mint again.
//!         Err(Refusal::Uncovered { mark_ms }) => mark = mark_ms,
//!         Err(Refusal::Spent { until_ms }) => unreachable!("wait until {until_ms}"),
//!         Err(Refusal::Failed(error)) => return Err(error.into()),
//!     }
//! };
//! assert_eq!(Layout::TWITTER.decode(id).unix_ms, now);
//! assert_eq!(mark, now + 1_500);
//! # Ok::<(), atomflake::Error>(())
//! ```

use crate::format::id::Id;
use crate::format::layout::Layout;
use crate::generator::state::SlotPacker;
use crate::mark;
use crate::mark::HighWaterError;
use crate::{BuildError, MintError};

use crate::generator::minter::{self as mint, Minter};
use crate::generator::wait::Wait;
use std::path::Path;
use std::sync::atomic::AtomicU64;

/// Mints IDs of one layout and node over state words the caller keeps.
#[derive(Debug)]
pub struct WordMinter {
    minter: Minter,
    packer: SlotPacker,
    node: u64,
}

/// Why [`WordMinter::mint`] minted nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// The tick of the time given is spent (every sequence value of the word's current
    /// tick is used, and the clock has not passed it): no ID before `until_ms`. Transient.
    Spent {
        /// The Unix ms from which a mint can succeed.
        until_ms: u64,
    },
    /// The next ID's tick starts at or after the mark given: store `mark_ms` durably,
    /// then mint again with it. Transient.
    Uncovered {
        /// The mark to store: a window and a half (1.5 s) past the later of the time given
        /// and the next ID's tick, so that one store serves many mints.
        mark_ms: u64,
    },
    /// Nothing can be minted: the time is outside the layout's span
    /// ([`MintError::ClockOutOfSpan`]), or every slot of the span is used
    /// ([`MintError::SpanSpent`]). Permanent for that time.
    Failed(MintError),
}

impl WordMinter {
    /// A minter for `node` of `layout`.
    ///
    /// # Errors
    ///
    /// [`BuildError::NodeOutOfRange`] when `node` does not fit the layout's node field.
    ///
    /// ```
    /// use atomflake::raw::WordMinter;
    /// use atomflake::{BuildError, Layout};
    ///
    /// assert_eq!(
    ///     WordMinter::new(Layout::TWITTER, 1024).unwrap_err(),
    ///     BuildError::NodeOutOfRange { node: 1024, max: 1023 },
    /// );
    /// ```
    pub fn new(layout: Layout, node: u64) -> Result<WordMinter, BuildError> {
        Ok(WordMinter {
            packer: SlotPacker::new(&layout, node)?,
            minter: Minter::new(layout, 0, Wait::Spin),
            node,
        })
    }

    /// The layout this minter mints.
    pub fn layout(&self) -> Layout {
        self.minter.layout()
    }

    /// The node this minter mints for.
    pub fn node(&self) -> u64 {
        self.node
    }

    /// The value a new state word starts at, past every ID of a previous run whose stored
    /// mark was `mark_ms` (0 when none was stored): its first ID's tick starts at or after
    /// the mark.
    ///
    /// ```
    /// use atomflake::raw::WordMinter;
    /// use atomflake::Layout;
    /// use std::sync::atomic::AtomicU64;
    ///
    /// let minter = WordMinter::new(Layout::TWITTER, 7)?;
    /// let mark = 1_700_000_000_000;
    /// let word = AtomicU64::new(minter.start(mark));
    /// // A clock behind the mark continues from it: no ID before the mark.
    /// let id = minter.mint(&word, mark - 5_000, u64::MAX);
    /// assert!(id.is_err(), "the mark's tick waits for the clock");
    /// let id = minter.mint(&word, mark, u64::MAX).unwrap();
    /// assert_eq!(Layout::TWITTER.decode(id).unix_ms, mark);
    /// # Ok::<(), atomflake::Error>(())
    /// ```
    pub fn start(&self, mark_ms: u64) -> u64 {
        self.minter.slots().first_from(mark_ms)
    }

    /// Mints one ID over `word` at the time `unix_ms`, if the next ID's tick starts before
    /// the durably stored mark `mark_ms` (pass `u64::MAX` to mint without a mark). Never
    /// waits: one CAS loop.
    ///
    /// `word` must have been created with [`start`](Self::start) by a minter of the same
    /// layout, and be advanced by such minters only (of any node: the word does not hold
    /// the node, so one word per node).
    ///
    /// # Errors
    ///
    /// A [`Refusal`]: the tick is spent, the mark must move first, or the time is outside
    /// the layout's span.
    #[inline]
    pub fn mint(&self, word: &AtomicU64, unix_ms: u64, mark_ms: u64) -> Result<Id, Refusal> {
        let covered = self.minter.slots().first_from(mark_ms);
        let within = |slot| {
            if slot < covered {
                Ok(())
            } else {
                // The caller stores the mark itself: it may mint again at once after.
                let refusal = crate::MintError::MarkPending {
                    retry_after: std::time::Duration::ZERO,
                };
                Err(mint::Blocked::Uncovered { slot, refusal })
            }
        };
        match self.minter.reserve_within(word, unix_ms, 1, within) {
            Ok((slot, _)) => Ok(self.packer.id(slot)),
            Err(refusal) => Err(self.public(refusal, unix_ms)),
        }
    }

    /// The mark to store ahead of need, after `id` was minted at `unix_ms` under the stored
    /// mark `mark_ms`: `Some` once `id`'s tick starts within half a window (0.5 s) of the
    /// mark, so that one caller moves the mark while the others mint on below it (the
    /// generators' keeper thread does the same). The mark is the one
    /// [`Refusal::Uncovered`] would name.
    ///
    /// ```
    /// use atomflake::raw::WordMinter;
    /// use atomflake::Layout;
    /// use std::sync::atomic::AtomicU64;
    ///
    /// let minter = WordMinter::new(Layout::TWITTER, 7)?;
    /// let word = AtomicU64::new(minter.start(0));
    /// let (now, mark) = (1_700_000_000_000, 1_700_000_000_600);
    /// let id = minter.mint(&word, now, mark).unwrap();
    /// assert_eq!(minter.early_mark(id, now, mark), None);
    /// let id = minter.mint(&word, now + 100, mark).unwrap();
    /// assert_eq!(minter.early_mark(id, now + 100, mark), Some(now + 100 + 1_500));
    /// # Ok::<(), atomflake::Error>(())
    /// ```
    #[inline]
    pub fn early_mark(&self, id: Id, unix_ms: u64, mark_ms: u64) -> Option<u64> {
        let tick_start = self.minter.layout().decode(id).unix_ms;
        (tick_start >= mark_ms.saturating_sub(crate::generator::keeper::WINDOW_MS / 2))
            .then(|| crate::generator::keeper::ahead(unix_ms.max(tick_start)))
    }

    /// The smallest mark that covers every ID minted over a word that now holds `word`,
    /// for a word that minted at least one ID since it started: the Unix ms just after the
    /// start of its last ID's tick. A caller that knows no mint is running (the minters are
    /// gone) may store it, below the mark stored ahead of need, so that the next start does
    /// not wait for the clock to pass that mark.
    ///
    /// ```
    /// use atomflake::raw::WordMinter;
    /// use atomflake::Layout;
    /// use std::sync::atomic::{AtomicU64, Ordering};
    ///
    /// let minter = WordMinter::new(Layout::SONYFLAKE, 3)?;
    /// let word = AtomicU64::new(minter.start(0));
    /// let now = 1_700_000_000_004; // 4 ms into a 10 ms tick
    /// let id = minter.mint(&word, now, u64::MAX).unwrap();
    /// let mark = minter.mark_after(word.load(Ordering::Relaxed));
    /// assert_eq!(mark, Layout::SONYFLAKE.decode(id).unix_ms + 1);
    /// // A word started at that mark mints past the ID.
    /// let next = AtomicU64::new(minter.start(mark));
    /// assert!(minter.mint(&next, now + 10, u64::MAX).unwrap() > id);
    /// # Ok::<(), atomflake::Error>(())
    /// ```
    pub fn mark_after(&self, word: u64) -> u64 {
        self.minter
            .slots()
            .tick_start(word.saturating_sub(1))
            .saturating_add(1)
    }

    #[cold]
    fn public(&self, refusal: mint::Blocked, unix_ms: u64) -> Refusal {
        let layout = self.minter.layout();
        match refusal {
            mint::Blocked::Spent { tick, .. } => Refusal::Spent {
                until_ms: layout.unix_ms_of_tick(tick),
            },
            mint::Blocked::Uncovered { slot, .. } => Refusal::Uncovered {
                mark_ms: crate::generator::keeper::ahead(unix_ms.max(self.minter.slots().tick_start(slot))),
            },
            mint::Blocked::Fatal(error) => Refusal::Failed(error),
        }
    }
}

/// The mark in the high-water file at `path`: `None` when there is no file yet.
///
/// # Errors
///
/// [`HighWaterError::Corrupt`] when the file is not a mark (never ignored);
/// [`HighWaterError::Io`] for a failed file operation.
pub fn read_mark(path: &Path) -> Result<Option<u64>, HighWaterError> {
    mark::read(path)
}

/// Stores `unix_ms` in the high-water file at `path`, durably: a temporary file beside it
/// (`PATH.tmp`), synced, renamed over it, and the directory synced, so the file holds the
/// old mark or the new one, whole. The caller makes sure that no two writes of one file
/// overlap (a lock), and that the mark never moves back.
///
/// # Errors
///
/// [`HighWaterError::Io`] for a failed file operation; the file then still holds the old
/// mark.
///
/// ```
/// use atomflake::raw::{read_mark, write_mark};
///
/// let path = std::env::temp_dir().join(format!("atomflake-doc-{}.hw", std::process::id()));
/// assert_eq!(read_mark(&path)?, None);
/// write_mark(&path, 1_700_000_001_500)?;
/// assert_eq!(read_mark(&path)?, Some(1_700_000_001_500));
/// # std::fs::remove_file(&path)?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn write_mark(path: &Path, unix_ms: u64) -> Result<(), HighWaterError> {
    mark::write(path, unix_ms)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::RangeError;
    use std::collections::HashSet;
    use std::time::Duration;

    const NOW: u64 = 1_700_000_000_000;

    #[test]
    fn a_word_mints_what_a_generator_mints() {
        let clock = crate::ManualClock::new(NOW);
        let generator = crate::Generator::with_clock(Layout::DISCORD, 35, clock.clone()).unwrap();
        let minter = WordMinter::new(Layout::DISCORD, 35).unwrap();
        let word = AtomicU64::new(minter.start(0));
        // Through a tick's last sequence value, a clock step back and a later tick.
        for now in [NOW, NOW, NOW + 3, NOW + 1, NOW + 1, NOW + 9] {
            clock.set(now);
            for _ in 0..1500 {
                match (minter.mint(&word, now, u64::MAX), generator.try_next_id()) {
                    (Ok(raw), Ok(id)) => assert_eq!(raw, id, "at {now}"),
                    (
                        Err(Refusal::Spent { until_ms }),
                        Err(MintError::SequenceExhausted { retry_after, .. }),
                    ) => {
                        assert_eq!(Duration::from_millis(until_ms - now), retry_after, "at {now}");
                    }
                    other => panic!("at {now}: {other:?}"),
                }
            }
        }
    }

    #[test]
    fn a_spent_tick_says_until_when() {
        let minter = WordMinter::new(Layout::TWITTER, 0).unwrap();
        let word = AtomicU64::new(minter.start(0));
        for _ in 0..4096 {
            assert!(minter.mint(&word, NOW, u64::MAX).is_ok());
        }
        assert_eq!(
            minter.mint(&word, NOW, u64::MAX),
            Err(Refusal::Spent { until_ms: NOW + 1 })
        );
        // A clock 2 s behind continues the spent tick, and waits for it too.
        assert_eq!(
            minter.mint(&word, NOW - 2_000, u64::MAX),
            Err(Refusal::Spent { until_ms: NOW + 1 })
        );
        let id = minter.mint(&word, NOW + 1, u64::MAX).unwrap();
        assert_eq!(Layout::TWITTER.decode(id).unix_ms, NOW + 1);
    }

    #[test]
    fn no_id_reaches_the_mark_given() {
        let minter = WordMinter::new(Layout::SONYFLAKE, 9).unwrap();
        let word = AtomicU64::new(minter.start(NOW));
        // The word starts at the mark: the mark's tick is past a mark at the same time.
        assert_eq!(
            minter.mint(&word, NOW, NOW),
            Err(Refusal::Uncovered { mark_ms: NOW + 1_500 })
        );
        // A clock behind the word's start waits for it.
        assert_eq!(
            minter.mint(&word, NOW - 700, NOW),
            Err(Refusal::Spent { until_ms: NOW })
        );
        let id = minter.mint(&word, NOW, NOW + 1_500).unwrap();
        assert_eq!(Layout::SONYFLAKE.decode(id).unix_ms, NOW);
        // Sonyflake's 10 ms tick: a tick that starts at the mark is past it, one that
        // starts before it is covered.
        assert_eq!(
            minter.mint(&word, NOW + 20, NOW + 20),
            Err(Refusal::Uncovered { mark_ms: NOW + 1_520 })
        );
        assert!(minter.mint(&word, NOW + 20, NOW + 21).is_ok());
    }

    #[test]
    fn times_outside_the_span_fail() {
        let minter = WordMinter::new(Layout::TWITTER, 0).unwrap();
        let word = AtomicU64::new(0);
        assert_eq!(
            minter.mint(&word, 5, u64::MAX),
            Err(Refusal::Failed(MintError::ClockOutOfSpan(
                RangeError::TimeBeforeEpoch {
                    unix_ms: 5,
                    epoch_ms: Layout::TWITTER.epoch_ms()
                }
            )))
        );
        let end = Layout::TWITTER.end_unix_ms();
        assert_eq!(
            minter.mint(&word, end, u64::MAX),
            Err(Refusal::Failed(MintError::ClockOutOfSpan(
                RangeError::TimePastEnd {
                    unix_ms: end,
                    end_ms: end
                }
            )))
        );
    }

    #[test]
    fn threads_sharing_a_word_never_mint_one_id_twice() {
        let minter = WordMinter::new(Layout::TWITTER, 7).unwrap();
        let word = AtomicU64::new(minter.start(0));
        let per_thread: Vec<Vec<Id>> = std::thread::scope(|scope| {
            let threads: Vec<_> = (0..4u64)
                .map(|thread| {
                    let (minter, word) = (&minter, &word);
                    scope.spawn(move || {
                        // Each thread's clock runs on its own, some behind the others.
                        let mut ids = Vec::new();
                        let mut now = NOW + thread;
                        while ids.len() < 20_000 {
                            match minter.mint(word, now, u64::MAX) {
                                Ok(id) => ids.push(id),
                                Err(Refusal::Spent { until_ms }) => now = until_ms,
                                Err(other) => panic!("{other:?}"),
                            }
                        }
                        ids
                    })
                })
                .collect();
            threads.into_iter().map(|t| t.join().unwrap()).collect()
        });
        let mut seen = HashSet::new();
        for ids in &per_thread {
            assert!(ids.windows(2).all(|w| w[0] < w[1]), "one thread's IDs rise");
            for id in ids {
                assert!(seen.insert(*id), "{id} minted twice");
            }
        }
        assert_eq!(seen.len(), 80_000);
    }
}
