//! Closes, in a child of a `fork()`, every window through which a generator copied from its
//! parent could mint without checking the process: the crate's only `unsafe` code.
//!
//! A generator checks the process it mints in once per tick (see [`Birth`]): the mints of a
//! tick already checked take the fast path, which compares the state word with its
//! [`Window`]'s limit and reads nothing else. A child copies those windows, the minter's
//! limit and the ticks checked as they stood at the fork, so without more it would mint the
//! rest of the tick of the fork (and of any tick its generators had reached) unchecked,
//! which its parent mints too. So:
//!
//! - every generator registers, when it is built, the addresses of the limits that spare
//!   a mint the check: each state word's window limit, the minter's limit and the
//!   [`Birth`]'s ticks checked. They live in the generator's heap allocation ([`Home`]),
//!   whose address does not change when the generator moves; the generator deregisters
//!   them when it is dropped, before that memory is freed;
//! - a `pthread_atfork` child handler, registered once when the first generator is built,
//!   stores 0 in every limit registered, and stops the default clock's heartbeat (see
//!   [`after_fork_in_child`](crate::clock::after_fork_in_child)), whose copy in the child
//!   stands still in the tick of the fork and would otherwise spare the check there. The
//!   child's first mint on any generator then takes the cold path, checks the process, and
//!   is refused. The child's first clock made or read starts the child's own discipline
//!   thread, whose heartbeat spares the check only for generators built in the child.
//!
//! The fast path reads what it read before; what a generator pays is one load more per
//! mint, of its [`Home`]'s address (`benches/README.md` has the count).
//!
//! # Why `unsafe`
//!
//! Two operations have no safe form: registering the handler (`pthread_atfork`, a C
//! function), and the handler's stores through the registered addresses. The handler runs
//! in the child of a possibly multi-threaded parent, where only the forking thread goes on:
//! a lock another thread held at the fork stays held, and the allocator may be one of them.
//! So it takes no lock, allocates nothing, and only loads the registry (lock-free, never
//! freed: [`OnceLock::get`] and atomic loads) and stores through its pointers.
//!
//! # Atomic orderings
//!
//! A slot is filled with `Release` after the memory it points to is built and emptied
//! with `Release` before that memory is freed, and read with `Acquire`. The child sees
//! the memory of its parent as it stood at one instant, in which each thread's writes
//! appear up to a point of its program order: a slot it sees filled points to memory
//! built and not yet freed. The stores of 0 are plain writes: in the child the handler's
//! thread is the only one, and no mint is under way on it (it is in `fork`).
#![cfg_attr(
    all(unix, not(loom)),
    expect(
        unsafe_code,
        reason = "pthread_atfork, and the child handler's stores through registered addresses"
    )
)]

#[cfg(doc)]
use crate::generator::{fork::Birth, minter::Window};
use crate::sync::{Ordering, ProcessAtomicPtr as AtomicPtr};
use std::ops::Deref;
use std::sync::OnceLock;

/// The registry's chunks: chunk `k` holds `64 << k` slots, made when all the slots before
/// it are taken and never freed. 32 chunks hold more slots than a process can fill.
static CHUNKS: [OnceLock<Box<[AtomicPtr<u64>]>>; 32] = [const { OnceLock::new() }; 32];

/// A generator's state words and core, on the heap: their addresses do not change when the
/// generator moves, so that the child handler can reach their limits (see the module docs).
#[derive(Debug)]
pub(crate) struct Home<T> {
    /// Emptied before `value` is freed (fields drop in order).
    #[expect(dead_code, reason = "held for its drop, which empties the slots")]
    registration: Registration,
    value: Box<T>,
}

impl<T> Home<T> {
    /// `value` on the heap, the addresses `limits` gives for it registered: each a `u64`
    /// (an atomic's or a cell's) inside `value`, set to 0 in a child of a fork.
    pub(crate) fn new(value: T, limits: impl FnOnce(&T) -> Vec<*mut u64>) -> Home<T> {
        let value = Box::new(value);
        let registration = Registration::new(limits(&value));
        Home { registration, value }
    }
}

impl<T> Deref for Home<T> {
    type Target = T;

    #[inline]
    fn deref(&self) -> &T {
        &self.value
    }
}

/// The slots a generator's limits are registered in.
#[derive(Debug)]
struct Registration {
    slots: Vec<&'static AtomicPtr<u64>>,
}

impl Registration {
    /// Registers every address in `limits`: each the address of a `u64` (an atomic's or a
    /// cell's) that stays valid until this registration is dropped.
    fn new(limits: Vec<*mut u64>) -> Registration {
        #[cfg(all(unix, not(loom)))]
        install();
        Registration {
            slots: limits.into_iter().map(claim).collect(),
        }
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        for slot in &self.slots {
            // Release: see "Atomic orderings" above; before the memory is freed.
            slot.store(std::ptr::null_mut(), Ordering::Release);
        }
    }
}

/// A free slot, now holding `limit`.
fn claim(limit: *mut u64) -> &'static AtomicPtr<u64> {
    for (k, chunk) in CHUNKS.iter().enumerate() {
        let slots = chunk.get_or_init(|| (0..64usize << k).map(|_| AtomicPtr::default()).collect());
        for slot in slots {
            // Release: see "Atomic orderings" above. Relaxed on failure: a taken slot is
            // skipped.
            if slot
                .compare_exchange(std::ptr::null_mut(), limit, Ordering::Release, Ordering::Relaxed)
                .is_ok()
            {
                return slot;
            }
        }
    }
    unreachable!("2^38 limits registered at once")
}

/// Registers [`in_a_child`] with `pthread_atfork`, once per process: when the first
/// generator is built, and when the default clock starts its thread.
#[cfg(all(unix, not(loom)))]
pub(crate) fn install() {
    static INSTALLED: std::sync::Once = std::sync::Once::new();
    INSTALLED.call_once(|| {
        // SAFETY: `in_a_child` is an `extern "C" fn()` that stays valid for the process's
        // life, and is fit to run in a child of a multi-threaded process (see the module
        // docs). A failure (ENOMEM) leaves the child to the per-tick check alone.
        let _ = unsafe { libc::pthread_atfork(None, None, Some(in_a_child)) };
    });
}

/// The child handler: closes every registered limit, and stops the default clock's
/// heartbeat. Runs in the child, on the thread that forked, before `fork` returns there.
#[cfg(all(unix, not(loom)))]
extern "C" fn in_a_child() {
    for chunk in &CHUNKS {
        // `get` is one atomic load: a chunk being made at the fork is not there yet, and
        // holds no slot anyone filled.
        let Some(slots) = chunk.get() else { break };
        for slot in slots {
            // Acquire: see "Atomic orderings" above.
            let limit = slot.load(Ordering::Acquire);
            if !limit.is_null() {
                // SAFETY: a filled slot points to a `u64` that its registration keeps valid
                // (see `Registration::new`), and in the child's copy of the parent's memory
                // the registration still held (see "Atomic orderings"). This thread is
                // the child's only one and no mint is under way on it, so nothing else
                // reads or writes the `u64` meanwhile: a plain write is no data race.
                unsafe { limit.write(0) };
            }
        }
    }
    crate::clock::after_fork_in_child();
}
