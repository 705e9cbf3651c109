//! The loom shim: every atomic, `Arc` and wait hint the crate uses comes from here.
//!
//! Under `--cfg loom` these are loom's models, so the loom models in `loom-tests/` check
//! the real generator code, not a copy of it. Otherwise they are the standard ones.
//! Nothing else in the crate may name `core::sync::atomic` or `std::thread`'s yield.

#[cfg(loom)]
pub(crate) use loom::sync::Arc;
#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicU64, Ordering};

#[cfg(not(loom))]
pub(crate) use core::sync::atomic::{AtomicU64, Ordering};
#[cfg(not(loom))]
pub(crate) use std::sync::Arc;

/// Atomics for process-wide state shared with OS threads (the coarse clock's upkeep thread,
/// a high-water mark's keeper, the sharded generators' thread numbers, a child of a fork's
/// handler): always the
/// standard ones, since they live outside any loom model.
pub(crate) use core::sync::atomic::{
    AtomicBool as ProcessAtomicBool, AtomicPtr as ProcessAtomicPtr, AtomicU64 as ProcessAtomicU64,
    AtomicUsize as ProcessAtomicUsize,
};

/// A 64-bit atomic and its fences, for code that runs both on process-wide statics (with
/// [`ProcessAtomicU64`]) and inside loom models (with loom's atomic): the clock's timeline.
pub(crate) trait Atomic64: Send + Sync {
    /// A new atomic holding `value`.
    fn new(value: u64) -> Self;
    /// `load` with `order`.
    fn load(&self, order: Ordering) -> u64;
    /// `store` with `order`.
    fn store(&self, value: u64, order: Ordering);
    /// A fence of the same world as the atomic (loom's under a loom model).
    fn fence(order: Ordering);
}

impl Atomic64 for ProcessAtomicU64 {
    fn new(value: u64) -> Self {
        ProcessAtomicU64::new(value)
    }

    #[inline]
    fn load(&self, order: Ordering) -> u64 {
        self.load(order)
    }

    #[inline]
    fn store(&self, value: u64, order: Ordering) {
        self.store(value, order);
    }

    #[inline]
    fn fence(order: Ordering) {
        core::sync::atomic::fence(order);
    }
}

#[cfg(loom)]
impl Atomic64 for AtomicU64 {
    fn new(value: u64) -> Self {
        AtomicU64::new(value)
    }

    fn load(&self, order: Ordering) -> u64 {
        self.load(order)
    }

    fn store(&self, value: u64, order: Ordering) {
        self.store(value, order);
    }

    fn fence(order: Ordering) {
        loom::sync::atomic::fence(order);
    }
}

// The wait hints: `spin_loop` tells the processor (or loom's scheduler) that this thread is
// busy-waiting; `yield_now` offers the rest of this thread's time slice to other threads
// (under loom it lets another model thread run, which is what makes waiting models
// terminate).
#[cfg(loom)]
pub(crate) use loom::{hint::spin_loop, thread::yield_now};
#[cfg(not(loom))]
pub(crate) use {core::hint::spin_loop, std::thread::yield_now};
