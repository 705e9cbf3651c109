//! Where a generator's state word lives, with its window: an atomic for the shared
//! generators ([`AtomicWord`]), cells for [`LocalGenerator`](crate::LocalGenerator)
//! ([`LocalWord`]), so that every generator type runs the same CAS loop
//! ([`minter`](super::minter), whose "Atomic orderings" the orderings here follow).

use crate::sync::{AtomicU64, Ordering, ProcessAtomicU64};
use std::cell::Cell;

/// Where a generator's state word lives: an atomic for the shared generators, a `Cell`
/// for [`LocalGenerator`](crate::LocalGenerator), so both run the same CAS loop.
pub(crate) trait Word {
    /// The current state.
    fn load(&self) -> u64;

    /// Replaces `current` with `new`; fails with the state found when it was not `current`.
    fn advance(&self, current: u64, new: u64) -> Result<(), u64>;
}

/// A generator's state word with its **window**: the tick in which the fast path mints
/// with no arithmetic on the time (see [`Minter::reserve_fast`](super::minter::Minter::reserve_fast)).
pub(crate) trait Windowed: Word {
    /// The window last opened.
    fn window(&self) -> Window;

    /// Opens `window`, after a mint in its tick.
    fn open(&self, window: Window);

    /// The address of the window's limit, which a child of a fork sets to 0 (closing the
    /// window: [`atfork`](super::atfork)).
    fn limit_address(&self) -> *mut u64;
}

/// The tick a state word's fast path may mint in.
///
/// Opened by the cold path right after it minted a slot of the window's tick, so that
/// while the window is visible the state is past that tick's first slot. While the clock
/// reads a time before the tick's end, the fast path mints the state itself if it is below
/// `limit`. That is the transition's own answer: the state is then a slot of the window's
/// tick that no mint has used (past the tick's first slot, below `limit`, which is at most
/// the next tick's opening), and the clock's tick is that tick or an earlier one (a clock
/// behind continues the state's tick). It is also below every limit the cold path keeps
/// (the mark, the check for a fork, the end of the span), since `limit` is at most the
/// minter's limit when it was opened, and those only grow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Window {
    /// The Unix ms at which the tick after the window's starts.
    pub(crate) end_ms: u64,
    /// The fast path mints only states below this.
    pub(crate) limit: u64,
}

impl Window {
    /// No window: every mint takes the cold path until one is opened.
    pub(crate) const CLOSED: Window = Window { end_ms: 0, limit: 0 };
}

// Relaxed throughout: only the word's own modification order matters (see "Atomic
// orderings" in `minter`). Weak: a spurious failure just goes round the loop again.
impl Word for AtomicU64 {
    #[inline]
    fn load(&self) -> u64 {
        self.load(Ordering::Relaxed)
    }

    #[inline]
    fn advance(&self, current: u64, new: u64) -> Result<(), u64> {
        self.compare_exchange_weak(current, new, Ordering::Relaxed, Ordering::Relaxed)
            .map(drop)
    }
}

/// A shared generator's state word and its window, kept together so that a mint touches
/// one cache line.
///
/// The window's two atomics are the standard ones even under loom, as the minter's limit
/// is: the loom models explore every interleaving of the state word and the clock, and
/// run the window's code with the values it really holds at each point, but do not branch
/// at the window's own loads and stores (with them, one of the nine models ran for longer
/// than the nine together had without the window). What the window's orderings add, a
/// state read past the window's first slot, is argued in "Atomic orderings" in
/// [`minter`](super::minter); uniqueness never rests on it.
#[derive(Debug)]
pub(crate) struct AtomicWord {
    state: AtomicU64,
    end_ms: ProcessAtomicU64,
    limit: ProcessAtomicU64,
}

impl AtomicWord {
    pub(crate) fn new(state: u64) -> AtomicWord {
        AtomicWord {
            state: AtomicU64::new(state),
            end_ms: ProcessAtomicU64::new(Window::CLOSED.end_ms),
            limit: ProcessAtomicU64::new(Window::CLOSED.limit),
        }
    }
}

impl Word for AtomicWord {
    #[inline]
    fn load(&self) -> u64 {
        Word::load(&self.state)
    }

    #[inline]
    fn advance(&self, current: u64, new: u64) -> Result<(), u64> {
        Word::advance(&self.state, current, new)
    }
}

impl Windowed for AtomicWord {
    #[inline]
    fn window(&self) -> Window {
        // Acquire, each paired with `open`'s Release: a thread that sees either value of a
        // window also sees the state its opener's mint left, so the state it loads next is
        // past that window's first slot. The two may come from different windows: each is
        // safe on its own (see `Window`).
        Window {
            end_ms: self.end_ms.load(Ordering::Acquire),
            limit: self.limit.load(Ordering::Acquire),
        }
    }

    #[inline]
    fn open(&self, window: Window) {
        self.limit.store(window.limit, Ordering::Release);
        self.end_ms.store(window.end_ms, Ordering::Release);
    }

    fn limit_address(&self) -> *mut u64 {
        self.limit.as_ptr()
    }
}

/// A [`LocalGenerator`](crate::LocalGenerator)'s state word and window: one thread owns
/// the cells, so nothing can change them between a load and a store.
#[derive(Debug)]
pub(crate) struct LocalWord {
    state: Cell<u64>,
    /// The window's end and limit, in cells of their own so that the limit has an address.
    end_ms: Cell<u64>,
    limit: Cell<u64>,
}

impl LocalWord {
    pub(crate) fn new(state: u64) -> LocalWord {
        LocalWord {
            state: Cell::new(state),
            end_ms: Cell::new(Window::CLOSED.end_ms),
            limit: Cell::new(Window::CLOSED.limit),
        }
    }
}

impl Word for LocalWord {
    #[inline]
    fn load(&self) -> u64 {
        self.state.get()
    }

    #[inline]
    fn advance(&self, _current: u64, new: u64) -> Result<(), u64> {
        self.state.set(new);
        Ok(())
    }
}

impl Windowed for LocalWord {
    #[inline]
    fn window(&self) -> Window {
        Window {
            end_ms: self.end_ms.get(),
            limit: self.limit.get(),
        }
    }

    #[inline]
    fn open(&self, window: Window) {
        self.end_ms.set(window.end_ms);
        self.limit.set(window.limit);
    }

    fn limit_address(&self) -> *mut u64 {
        self.limit.as_ptr()
    }
}
