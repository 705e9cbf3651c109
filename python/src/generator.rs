//! `Generator` and `lease()`. A generator is the Rust `Generator` (one `AtomicU64`, fork-safe,
//! with an optional high-water file or lease as its mark store) behind a read-write lock
//! that only `close()` takes for writing: closing drops it, which stores the mark that
//! covers exactly what it minted and releases its lease.
//!
//! In a child of a `fork()` the lock may be held for good: by a thread of the parent's that
//! was minting (the GIL is released while a call waits) or closing at the fork, which the
//! child does not have. So in the process the generator was not built in, no call waits for
//! the lock: a mint that cannot take it at once is refused as the Rust generator refuses it
//! there (`ForkedError`), and `close()` leaves the parent's generator alone.

use crate::args;
use crate::errors::{Refusal, build_error, lease_error};
use crate::layout::PyLayout;
use atomflake::{Builder, Generator, Id, Layout, MintError, MonotonicClock};
use atomflake_lease::{LeaseOptions, Registry};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBytes, PyList};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{PoisonError, RwLock, RwLockReadGuard, TryLockError};
use std::time::Duration;

/// The most IDs one `next_ids` call returns: 512 MiB as an `array('Q')`.
pub(crate) const MAX_BATCH: u64 = 1 << 26;

/// The longest `patience`.
const MAX_PATIENCE: Duration = Duration::from_secs(3600);

/// A Snowflake ID generator on one node: thread-safe, fork-safe, strictly increasing IDs.
#[pyclass(frozen, module = "atomflake", name = "Generator")]
pub(crate) struct PyGenerator {
    inner: RwLock<Option<Generator<MonotonicClock>>>,
    /// The process the generator was built in.
    born: u32,
    /// Set by `close()` in a child of a fork, which leaves `inner` as it is.
    closed_in_child: AtomicBool,
    layout: Layout,
    node: u64,
    /// How long a mint waits for each tick's IDs at most: a spent tick, a mark being stored,
    /// a lease being renewed.
    patience: Duration,
}

/// A layout given as a preset's name or a `Layout`.
fn layout_of(layout: &Bound<'_, PyAny>) -> PyResult<Layout> {
    if let Ok(name) = layout.extract::<String>() {
        return PyLayout::preset_layout(&name);
    }
    Ok(layout.cast::<PyLayout>()?.get().0)
}

/// The node argument, checked against `layout`.
fn node_of(layout: Layout, node: &Bound<'_, PyAny>) -> PyResult<u64> {
    args::unsigned(
        node,
        "node",
        layout.max_node(),
        &format!("the layout allows 0..={}", layout.max_node()),
    )
}

impl PyGenerator {
    fn built(
        builder: Builder<MonotonicClock>,
        layout: Layout,
        node: u64,
        patience: Duration,
        py: Python<'_>,
    ) -> PyResult<PyGenerator> {
        let generator = py
            .detach(|| builder.build(node))
            .map_err(|error| build_error(&error))?;
        Ok(PyGenerator {
            inner: RwLock::new(Some(generator)),
            born: std::process::id(),
            closed_in_child: AtomicBool::new(false),
            layout,
            node,
            patience,
        })
    }

    /// The generator, read-locked: at once where no `close()` holds or waits for the lock.
    #[inline]
    fn reading(&self) -> Result<RwLockReadGuard<'_, Option<Generator<MonotonicClock>>>, Refusal> {
        match self.inner.try_read() {
            Ok(generator) => Ok(generator),
            Err(TryLockError::Poisoned(poisoned)) => Ok(poisoned.into_inner()),
            Err(TryLockError::WouldBlock) => self.reading_slowly(),
        }
    }

    /// The generator, read-locked after waiting for a `close()` under way; in a child of a
    /// fork, where the holder may be a thread the child does not have, the refusal instead.
    #[cold]
    fn reading_slowly(&self) -> Result<RwLockReadGuard<'_, Option<Generator<MonotonicClock>>>, Refusal> {
        self.in_the_parent()?;
        Ok(self.inner.read().unwrap_or_else(PoisonError::into_inner))
    }

    /// `Ok` in the process the generator was built in, else the Rust generator's refusal.
    fn in_the_parent(&self) -> Result<(), Refusal> {
        let here = std::process::id();
        if here == self.born {
            return Ok(());
        }
        Err(Refusal::Mint(MintError::Forked {
            parent: self.born,
            child: here,
        }))
    }

    /// The generator, read-locked if that takes no wait, for the asyncio methods, whose
    /// event loop must never wait: one that a `close()` holds or waits for is refused as a
    /// closed one (it is being closed).
    #[inline]
    fn reading_now(&self) -> Result<RwLockReadGuard<'_, Option<Generator<MonotonicClock>>>, Refusal> {
        match self.inner.try_read() {
            Ok(generator) => Ok(generator),
            Err(TryLockError::Poisoned(poisoned)) => Ok(poisoned.into_inner()),
            Err(TryLockError::WouldBlock) => {
                self.in_the_parent()?;
                Err(Refusal::Closed)
            }
        }
    }

    /// The coroutine function `name` of `atomflake._asyncio`, called with this generator,
    /// `args` and the patience in seconds.
    fn coroutine<'py>(
        slf: &Bound<'py, Self>,
        function: &'static PyOnceLock<Py<PyAny>>,
        name: &str,
        args: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let py = slf.py();
        let function = function.import(py, "atomflake._asyncio", name)?;
        let patience = slf.get().patience.as_secs_f64();
        match args {
            Some(n) => function.call1((slf, n, patience)),
            None => function.call1((slf, patience)),
        }
    }

    /// One attempt, never waiting.
    #[inline]
    fn try_mint(&self) -> Result<u64, Refusal> {
        let generator = self.reading()?;
        match generator.as_ref() {
            Some(generator) => generator.try_next_id().map(Id::get).map_err(Refusal::Mint),
            None => Err(Refusal::Closed),
        }
    }

    /// Up to `max` IDs of one tick, handed to `put` in order, waiting for them at most the
    /// patience; how many. The read lock is held through the wait: `close()` waits for a
    /// mint under way.
    fn run(&self, max: u64, put: impl FnMut(u64)) -> Result<u64, Refusal> {
        let generator = self.reading()?;
        let run = match generator.as_ref() {
            Some(generator) => generator
                .next_run_timeout(max, self.patience)
                .map_err(Refusal::Mint)?,
            None => return Err(Refusal::Closed),
        };
        let count = run.len();
        run.into_iter().map(Id::get).for_each(put);
        Ok(count)
    }

    /// `n` IDs handed to `put` in order, a tick's run at a time, each waited for at most the
    /// patience; called without the GIL.
    fn mint_many(&self, n: u64, mut put: impl FnMut(u64)) -> Result<(), Refusal> {
        let mut minted = 0;
        while minted < n {
            minted += self.run(n - minted, &mut put)?;
        }
        Ok(())
    }

    /// `n` checked against [`MAX_BATCH`].
    fn batch(n: &Bound<'_, PyAny>) -> PyResult<u64> {
        args::unsigned(
            n,
            "n",
            MAX_BATCH,
            &format!("one call returns 0..={MAX_BATCH} ids"),
        )
    }
}

#[pymethods]
impl PyGenerator {
    /// A generator of `layout` (a preset's name or a `Layout`) on `node`. With
    /// `high_water`, a file that keeps the mark of minted time, so that a restart with the
    /// clock behind never repeats an ID; `borrow_ahead` (seconds, whole ticks) lets a burst
    /// mint into later ticks instead of waiting; `patience` (seconds) is how long a mint
    /// waits for each tick's IDs (a spent tick, a mark being stored) before raising
    /// `MintError`.
    #[new]
    #[pyo3(signature = (layout = None, node = None, *, high_water = None, borrow_ahead = 0.0, patience = 10.0))]
    fn new(
        py: Python<'_>,
        layout: Option<&Bound<'_, PyAny>>,
        node: Option<&Bound<'_, PyAny>>,
        high_water: Option<PathBuf>,
        borrow_ahead: f64,
        patience: f64,
    ) -> PyResult<Self> {
        let layout = layout.map_or(Ok(Layout::TWITTER), layout_of)?;
        let Some(node) = node else {
            return Err(PyValueError::new_err(format!(
                "a generator needs its node: 0..={} for this layout (or atomflake.lease() for a leased one)",
                layout.max_node()
            )));
        };
        let node = node_of(layout, node)?;
        let mut builder = Builder::new(layout).borrow_ahead(args::seconds(
            borrow_ahead,
            "borrow_ahead",
            Builder::<MonotonicClock>::MAX_LEAD,
        )?);
        if let Some(path) = high_water {
            builder = builder.high_water_file(path);
        }
        PyGenerator::built(
            builder,
            layout,
            node,
            args::seconds(patience, "patience", MAX_PATIENCE)?,
            py,
        )
    }

    /// The next ID. Waits, with the GIL released, for at most `patience`: for a spent tick,
    /// a mark being stored or a lease being renewed.
    ///
    /// Raises `MintError` (`ForkedError` in a child of a `fork()`, `ClosedError` after
    /// `close()`) when no ID can be minted.
    fn next_id(&self, py: Python<'_>) -> PyResult<u64> {
        if let Ok(id) = self.try_mint() {
            return Ok(id);
        }
        // Refused: wait, without the GIL, as a batch of one does.
        let mut id = 0;
        py.detach(|| self.mint_many(1, |minted| id = minted))?;
        Ok(id)
    }

    /// The next ID, or `MintError` at once when none can be minted now: for callers that
    /// wait in their own way (`await asyncio.sleep(error.retry_after)`). A spent tick is a
    /// `MintError` with `transient` true and `retry_after` the seconds until the next tick.
    fn try_next_id(&self) -> PyResult<u64> {
        Ok(self.try_mint()?)
    }

    /// `await generator.next_id_async()`: the next ID, from asyncio. A spent tick (or a
    /// mark being stored, a lease being renewed) is waited out with `asyncio.sleep`, for
    /// at most `patience`: the event loop never waits. Nothing is reserved while it
    /// sleeps, so a cancelled call leaves nothing behind. Raises as `next_id()` does.
    fn next_id_async<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        static NEXT_ID: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
        PyGenerator::coroutine(slf, &NEXT_ID, "next_id", None)
    }

    /// `await generator.next_ids_async(n)`: `n` IDs in increasing order, from asyncio, a
    /// tick's run at a time as `next_ids(n)`, each spent tick waited out with
    /// `asyncio.sleep`. A call cancelled part way drops the IDs it had: never minted again,
    /// a gap in the node's IDs.
    fn next_ids_async<'py>(slf: &Bound<'py, Self>, n: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        static NEXT_IDS: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
        PyGenerator::coroutine(slf, &NEXT_IDS, "next_ids", Some(n))
    }

    /// The next ID now, or `MintError`, never waiting (also not for a `close()` under
    /// way): the asyncio methods' step.
    fn _next_id_nowait(&self) -> PyResult<u64> {
        let generator = self.reading_now()?;
        match generator.as_ref() {
            Some(generator) => Ok(generator.try_next_id().map(Id::get).map_err(Refusal::Mint)?),
            None => Err(Refusal::Closed.into()),
        }
    }

    /// Up to `n` IDs of the current tick now (`n` checked as `next_ids` checks it), or
    /// `MintError`, never waiting: the asyncio methods' step.
    fn _next_run_nowait<'py>(&self, py: Python<'py>, n: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyList>> {
        let n = Self::batch(n)?;
        if n == 0 {
            return Ok(PyList::empty(py));
        }
        let generator = self.reading_now()?;
        let run = match generator.as_ref() {
            Some(generator) => generator.try_next_run(n).map_err(Refusal::Mint)?,
            None => return Err(Refusal::Closed.into()),
        };
        drop(generator);
        PyList::new(py, run.into_iter().map(Id::get))
    }

    /// `n` IDs in increasing order as a `list` of `int`, reserved a tick at a time.
    fn next_ids<'py>(&self, py: Python<'py>, n: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyList>> {
        let n = Self::batch(n)?;
        let mut ids = Vec::with_capacity(usize::try_from(n).unwrap_or(0));
        py.detach(|| self.mint_many(n, |id| ids.push(id)))?;
        PyList::new(py, ids)
    }

    /// `n` IDs in increasing order as an `array('Q')`: the fastest way to take many.
    fn next_ids_array<'py>(&self, py: Python<'py>, n: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        let n = Self::batch(n)?;
        // Minted straight into a new bytes object, which no other code can see yet: so the
        // GIL can be released while it is written.
        let length = usize::try_from(n).unwrap_or(usize::MAX).saturating_mul(8);
        let bytes = PyBytes::new_with(py, length, |buffer| {
            let mut slots = buffer.chunks_exact_mut(8);
            py.detach(|| {
                self.mint_many(n, |id| {
                    if let Some(slot) = slots.next() {
                        slot.copy_from_slice(&id.to_ne_bytes());
                    }
                })
            })
            .map_err(PyErr::from)
        })?;
        let array = py.import("array")?.getattr("array")?.call1(("Q",))?;
        array.call_method1("frombytes", (bytes,))?;
        Ok(array)
    }

    /// The node this generator mints on.
    #[getter]
    fn node(&self) -> u64 {
        self.node
    }

    /// The generator's layout.
    #[getter]
    fn layout(&self) -> PyLayout {
        PyLayout(self.layout)
    }

    /// Whether `close()` was called.
    #[getter]
    fn closed(&self) -> bool {
        // Relaxed: a flag of this process's alone, read for its own sake.
        self.closed_in_child.load(Ordering::Relaxed)
            || self.reading().is_ok_and(|generator| generator.is_none())
    }

    /// Stops minting: stores the mark that covers exactly the IDs minted and releases the
    /// lease, if any, so that the node is free at once. Later mints raise `ClosedError`;
    /// a second close does nothing. In a child of a `fork()` the mark and the lease are
    /// the parent's: closing there never waits, and later mints raise `ForkedError`.
    fn close(&self, py: Python<'_>) {
        py.detach(|| {
            if self.in_the_parent().is_err() {
                // Relaxed: see `closed`.
                self.closed_in_child.store(true, Ordering::Relaxed);
                return;
            }
            let generator = self.inner.write().unwrap_or_else(PoisonError::into_inner).take();
            drop(generator);
        });
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, py: Python<'_>, _exc: &Bound<'_, pyo3::types::PyTuple>) -> bool {
        self.close(py);
        false
    }

    fn __repr__(&self) -> String {
        format!(
            "Generator(layout={}, node={}{})",
            PyLayout(self.layout).describe(),
            self.node,
            if self.closed() { ", closed" } else { "" }
        )
    }
}

/// The lease engines of `lease()`, found by the URL's scheme.
static LEASES: Registry = Registry::new(&[
    atomflake_postgres::lease::DRIVER,
    atomflake_etcd::lease::DRIVER,
    atomflake_redis::lease::DRIVER,
    atomflake_zookeeper::lease::DRIVER,
]);

/// Leases nodes from PostgreSQL, etcd, Redis or ZooKeeper, chosen by `url` (`etcd://` or
/// `etcds://` for etcd, `redis://` or `rediss://` for Redis, `zk://` for ZooKeeper, else a PostgreSQL URL or `key=value`
/// settings), and returns a generator on the leased node. Use it as a context manager:
/// leaving it stores the exact mark and releases the node.
#[pyfunction]
#[pyo3(signature = (url, *, namespace = "atomflake", ttl = 10.0, layout = None, node = None, borrow_ahead = 0.0, patience = None))]
#[allow(clippy::too_many_arguments, reason = "Python keyword arguments")]
pub(crate) fn lease(
    py: Python<'_>,
    url: &str,
    namespace: &str,
    ttl: f64,
    layout: Option<&Bound<'_, PyAny>>,
    node: Option<&Bound<'_, PyAny>>,
    borrow_ahead: f64,
    patience: Option<f64>,
) -> PyResult<PyGenerator> {
    let layout = layout.map_or(Ok(Layout::TWITTER), layout_of)?;
    let ttl = args::seconds(ttl, "ttl", atomflake_lease::MAX_TTL)?;
    let mut options = LeaseOptions::new(namespace).ttl(ttl);
    if let Some(node) = node {
        options = options.node(node_of(layout, node)?);
    }
    let lead = args::seconds(borrow_ahead, "borrow_ahead", Builder::<MonotonicClock>::MAX_LEAD)?;
    let patience = patience.map_or(Ok(ttl), |seconds| {
        args::seconds(seconds, "patience", MAX_PATIENCE)
    })?;
    let lease = py
        .detach(|| LEASES.acquire(url, &layout, &options))
        .map_err(|error| lease_error(&error))?;
    let node = lease.node();
    PyGenerator::built(
        Builder::new(layout).borrow_ahead(lead).mark_store(lease),
        layout,
        node,
        patience,
        py,
    )
}
