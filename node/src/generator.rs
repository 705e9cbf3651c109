//! Generators, their handles, and `lease()`.
//!
//! Every generator on one node of one layout is one Rust generator per process: a worker
//! thread that asks for a node this process already mints on gets that generator, shared,
//! so the workers of one process never mint an ID twice and need one node between them.
//! Each handle (a [`Handle`], one per `new Generator`) holds it through an `Arc`,
//! and the registry holds one more. A generator with a mark store (a high-water file, a
//! lease) is dropped when its last handle closes (or is collected): that stores the mark
//! that covers exactly what it minted, unlocks the file, releases the lease; the next
//! generator on its node starts past that mark. One without a mark store has nothing that
//! would tell its successor where it stopped (a new one would mint its last tick's IDs
//! again), so the registry keeps it for the life of the process, and a later `new
//! Generator` on its node goes on from it. Every `Arc` of the registry is made and dropped
//! with the registry locked, so that a generator on a node is built only once the one
//! before it on that node is dropped.

use crate::args;
use crate::errors::{Refusal, build_error, lease_error, range};
use crate::layout::{NativeLayout, number};
use crate::raw::{HandleArg, HandleBox};
use atomflake::{Builder, Generator, Id, Layout, MintError, MonotonicClock};
use atomflake_lease::{LeaseOptions, Registry};
use napi::bindgen_prelude::{AsyncTask, BigUint64Array};
use napi::{Env, Task};
use napi_derive::napi;
use std::cell::RefCell;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, LazyLock, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

/// The most IDs one `nextIds` call returns: 512 MiB as a `BigUint64Array`.
const MAX_BATCH: u64 = 1 << 26;

/// The longest patience of the async calls.
const MAX_PATIENCE: Duration = Duration::from_secs(3600);

/// A generator of this process, as every handle on it shares it.
pub struct Shared {
    generator: Generator<MonotonicClock>,
    layout: Layout,
    node: u64,
    /// Its high-water file, if it has one.
    high_water: Option<PathBuf>,
    /// Whether its node is leased.
    leased: bool,
    /// How far it may mint ahead of its clock.
    lead: Duration,
}

/// The generators of this process, by layout and node.
type Generators = HashMap<(Layout, u64), Arc<Shared>>;

/// The registry, locked.
fn generators() -> MutexGuard<'static, Generators> {
    static GENERATORS: LazyLock<Mutex<Generators>> = LazyLock::new(Mutex::default);
    GENERATORS.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Drops a handle's `Arc` with the registry locked: the last one of a generator with a mark
/// store removes it from the registry, which drops it (storing its mark, releasing its
/// lease).
fn release(shared: Arc<Shared>) {
    let mut generators = generators();
    // The registry's `Arc` and this one: the last handle.
    if Arc::strong_count(&shared) == 2 && (shared.leased || shared.high_water.is_some()) {
        generators.remove(&(shared.layout, shared.node));
    }
    drop(shared);
}

/// A handle on a generator of this process: what a JavaScript `Generator` holds, as an
/// external value (`crate::raw`).
pub struct Handle {
    /// The generator, until this handle is closed. (A cell: a handle lives on its
    /// JavaScript thread alone.)
    shared: RefCell<Option<Arc<Shared>>>,
    layout: Layout,
    node: u64,
    /// How long a sync call waits for each tick's IDs: one tick.
    tick: Duration,
}

impl Handle {
    fn new(shared: Arc<Shared>) -> Handle {
        Handle {
            layout: shared.layout,
            node: shared.node,
            tick: Duration::from_millis(shared.layout.tick_ms()),
            shared: RefCell::new(Some(shared)),
        }
    }

    /// `mint` with the generator, or the refusal of a closed handle.
    #[inline]
    fn with<T>(
        &self,
        mint: impl FnOnce(&Generator<MonotonicClock>) -> Result<T, Refusal>,
    ) -> Result<T, Refusal> {
        match &*self.shared.borrow() {
            Some(shared) => mint(&shared.generator),
            None => Err(Refusal::Closed),
        }
    }

    /// The next ID, waiting out spent ticks; any other refusal at once.
    #[inline]
    fn mint(&self) -> Result<u64, Refusal> {
        self.with(|generator| match generator.try_next_id() {
            Ok(id) => Ok(id.get()),
            Err(_) => self.spent_ticks_waited(|| generator.next_id_timeout(self.tick).map(Id::get)),
        })
    }

    /// `attempt` (which waits at most a tick) until it succeeds, as long as it is refused for
    /// a spent tick alone: a tick whose IDs are all taken, ending within a tick. (Other
    /// threads may take the next tick's IDs first.) Any other refusal is the caller's at
    /// once: a wait longer than a tick (a restart's clock behind the stored mark, a mark
    /// being stored) is never taken on the event loop.
    #[cold]
    fn spent_ticks_waited<T>(&self, mut attempt: impl FnMut() -> Result<T, MintError>) -> Result<T, Refusal> {
        loop {
            match attempt() {
                Ok(minted) => return Ok(minted),
                Err(MintError::SequenceExhausted { retry_after, .. }) if retry_after <= self.tick => {}
                Err(refusal) => return Err(Refusal::Mint(refusal)),
            }
        }
    }

    /// `n` checked against [`MAX_BATCH`].
    fn batch(n: f64) -> napi::Result<u64> {
        args::unsigned(
            n,
            "n",
            MAX_BATCH,
            &format!("one call returns 0..={MAX_BATCH} ids"),
        )
    }
}

/// A `Vec` of `n` IDs' room.
fn room(n: u64) -> Vec<u64> {
    Vec::with_capacity(usize::try_from(n).unwrap_or(0))
}

impl Handle {
    /// The next ID, waiting at most one tick.
    pub(crate) fn next_id(&self) -> napi::Result<u64> {
        Ok(self.mint()?)
    }

    /// The next ID as decimal text, waiting at most one tick.
    pub(crate) fn next_id_string(&self) -> napi::Result<String> {
        Ok(self.mint()?.to_string())
    }

    /// The next ID as a number, waiting at most one tick: on layouts of at most 53 bits.
    pub(crate) fn next_id_number(&self) -> napi::Result<f64> {
        if !self.layout.fits_js_number() {
            return Err(range(format!(
                "nextIdNumber() needs a layout whose IDs are numbers exactly (at most 53 bits, as Layout.JAVASCRIPT): {} has {}-bit IDs; take nextId() (a bigint) or nextIdString()",
                NativeLayout(self.layout).describe(),
                self.layout.total_bits()
            )));
        }
        #[expect(clippy::cast_precision_loss, reason = "the layout's IDs have at most 53 bits")]
        Ok(self.mint()? as f64)
    }

    /// `ids` filled with IDs in increasing order, a tick's run at a time, spent ticks
    /// waited out.
    pub(crate) fn fill(&self, ids: &mut [u64]) -> napi::Result<()> {
        #[expect(
            clippy::cast_precision_loss,
            reason = "a length past 2^53 is past MAX_BATCH either way"
        )]
        Self::batch(ids.len() as f64)?;
        Ok(self.with(|generator| {
            let mut slots = ids.iter_mut();
            while slots.len() > 0 {
                let run =
                    self.spent_ticks_waited(|| generator.next_run_timeout(slots.len() as u64, self.tick))?;
                // The run first: a zip takes from its first iterator before it finds the
                // second empty.
                for (id, slot) in run.into_iter().zip(slots.by_ref()) {
                    *slot = id.get();
                }
            }
            Ok(())
        })?)
    }

    /// The next ID now, else the refusal (a spent tick: transient, with the ms to wait).
    pub(crate) fn try_next_id(&self) -> napi::Result<u64> {
        Ok(self.with(|generator| generator.try_next_id().map(Id::get).map_err(Refusal::Mint))?)
    }
}

/// The generator of `layout` on `node` in this process: the one already minting there,
/// shared, or a new one, with `highWater` (a file that keeps the mark of minted time) and
/// `borrowAheadMs` (ticks a burst may mint into ahead of the clock).
#[napi]
pub fn open_generator(
    layout: &NativeLayout,
    node: f64,
    high_water: Option<String>,
    borrow_ahead_ms: f64,
) -> napi::Result<HandleBox> {
    let layout = layout.0;
    let node = args::unsigned(
        node,
        "node",
        layout.max_node(),
        &format!("the layout allows 0..={}", layout.max_node()),
    )?;
    let lead = args::millis(
        borrow_ahead_ms,
        "borrowAheadMs",
        Builder::<MonotonicClock>::MAX_LEAD,
    )?;
    let high_water = high_water.map(PathBuf::from);
    let mut generators = generators();
    if let Some(shared) = generators.get(&(layout, node)).cloned() {
        if high_water.is_some() && high_water != shared.high_water {
            return Err(range(format!(
                "node {node} already mints in this process with {}: ask for it without highWater, or with the same file",
                match (&shared.high_water, shared.leased) {
                    (Some(path), _) => format!("the high-water file {}", path.display()),
                    (None, true) => "a lease".to_owned(),
                    (None, false) => "no high-water file".to_owned(),
                }
            )));
        }
        if lead != shared.lead {
            return Err(range(format!(
                "node {node} already mints in this process with borrowAheadMs {}: ask for it with the same",
                shared.lead.as_millis()
            )));
        }
        return Ok(HandleBox(Handle::new(shared)));
    }
    let mut builder = Builder::new(layout).borrow_ahead(lead);
    if let Some(path) = &high_water {
        builder = builder.high_water_file(path);
    }
    let generator = builder.build(node).map_err(|error| build_error(&error))?;
    let shared = Arc::new(Shared {
        generator,
        layout,
        node,
        high_water,
        leased: false,
        lead,
    });
    generators.insert((layout, node), Arc::clone(&shared));
    Ok(HandleBox(Handle::new(shared)))
}

/// Up to `n` IDs of the current tick now, else the refusal.
#[napi]
pub fn try_next_run(handle: HandleArg, n: f64) -> napi::Result<BigUint64Array> {
    let n = Handle::batch(n)?;
    if n == 0 {
        return Ok(BigUint64Array::new(Vec::new()));
    }
    let run = handle.with(|generator| generator.try_next_run(n).map_err(Refusal::Mint))?;
    let mut ids = room(run.len());
    ids.extend(run.into_iter().map(Id::get));
    Ok(BigUint64Array::new(ids))
}

/// The node the generator mints on.
#[napi]
pub fn generator_node(handle: HandleArg) -> napi::Result<f64> {
    number(handle.node, "node")
}

/// The generator's layout.
#[napi]
pub fn generator_layout(handle: HandleArg) -> NativeLayout {
    NativeLayout(handle.layout)
}

/// Whether the handle was closed.
#[napi]
pub fn generator_closed(handle: HandleArg) -> bool {
    handle.shared.borrow().is_none()
}

/// Closes the handle; when it is the last on a generator with a mark store, stores the
/// mark that covers exactly the IDs minted and releases the lease, off the event loop.
#[napi]
pub fn close_generator(handle: HandleArg) -> AsyncTask<Closing> {
    AsyncTask::new(Closing(handle.shared.borrow_mut().take()))
}

impl Drop for Handle {
    fn drop(&mut self) {
        if let Some(shared) = self.shared.get_mut().take() {
            release(shared);
        }
    }
}

/// A handle's `Arc`, released on libuv's thread pool.
pub struct Closing(Option<Arc<Shared>>);

impl Task for Closing {
    type Output = ();
    type JsValue = ();

    fn compute(&mut self) -> napi::Result<()> {
        if let Some(shared) = self.0.take() {
            release(shared);
        }
        Ok(())
    }

    fn resolve(&mut self, _: Env, (): ()) -> napi::Result<()> {
        Ok(())
    }
}

/// The lease engines of `lease()`, found by the URL's scheme.
static LEASES: Registry = Registry::new(&[
    atomflake_postgres::lease::DRIVER,
    atomflake_etcd::lease::DRIVER,
    atomflake_redis::lease::DRIVER,
    atomflake_zookeeper::lease::DRIVER,
]);

/// A lease's claim, on libuv's thread pool.
pub struct Leasing {
    url: String,
    layout: Layout,
    options: Option<LeaseOptions>,
    lead: Duration,
}

impl Task for Leasing {
    type Output = Arc<Shared>;
    type JsValue = HandleBox;

    fn compute(&mut self) -> napi::Result<Arc<Shared>> {
        let options = self
            .options
            .take()
            .unwrap_or_else(|| unreachable!("a task computes once"));
        let lease = LEASES
            .acquire(&self.url, &self.layout, &options)
            .map_err(|error| lease_error(&error))?;
        let node = lease.node();
        let generator = Builder::new(self.layout)
            .borrow_ahead(self.lead)
            .mark_store(lease)
            .build(node)
            .map_err(|error| build_error(&error))?;
        let mut generators = generators();
        if generators.get(&(self.layout, node)).is_some() {
            // Dropped with the registry unlocked: it releases the lease.
            drop(generators);
            drop(generator);
            return Err(range(format!(
                "the lease gave node {node}, on which this process mints (or minted) with a generator of its own: lease nodes apart from fixed ones"
            )));
        }
        let shared = Arc::new(Shared {
            generator,
            layout: self.layout,
            node,
            high_water: None,
            leased: true,
            lead: self.lead,
        });
        generators.insert((self.layout, node), Arc::clone(&shared));
        Ok(shared)
    }

    fn resolve(&mut self, _: Env, shared: Arc<Shared>) -> napi::Result<HandleBox> {
        Ok(HandleBox(Handle::new(shared)))
    }
}

/// Leases a node from PostgreSQL, etcd, Redis or ZooKeeper, chosen by `url`'s scheme, off
/// the event loop, and resolves to a generator on it.
#[napi]
pub fn lease(
    url: String,
    namespace: String,
    ttl_seconds: f64,
    layout: &NativeLayout,
    node: Option<f64>,
    borrow_ahead_ms: f64,
) -> napi::Result<AsyncTask<Leasing>> {
    let layout = layout.0;
    let ttl = match Duration::try_from_secs_f64(ttl_seconds) {
        Ok(ttl) if ttl <= atomflake_lease::MAX_TTL => ttl,
        _ => {
            return Err(range(format!(
                "ttl {ttl_seconds} s is out of range: 0..={} s",
                atomflake_lease::MAX_TTL.as_secs()
            )));
        }
    };
    let mut options = LeaseOptions::new(&namespace).ttl(ttl);
    if let Some(node) = node {
        options = options.node(args::unsigned(
            node,
            "node",
            layout.max_node(),
            &format!("the layout allows 0..={}", layout.max_node()),
        )?);
    }
    let lead = args::millis(
        borrow_ahead_ms,
        "borrowAheadMs",
        Builder::<MonotonicClock>::MAX_LEAD,
    )?;
    Ok(AsyncTask::new(Leasing {
        url,
        layout,
        options: Some(options),
        lead,
    }))
}

/// The constants `index.js` checks its arguments against.
#[napi(object)]
pub struct Limits {
    /// The most IDs one `nextIds` call returns.
    pub max_batch: f64,
    /// The longest patience of the async calls, in ms.
    pub max_patience_ms: f64,
}

/// The constants `index.js` checks its arguments against.
#[napi]
pub fn limits() -> Limits {
    #[expect(
        clippy::cast_precision_loss,
        reason = "small powers of two and whole seconds: exact"
    )]
    Limits {
        max_batch: MAX_BATCH as f64,
        max_patience_ms: MAX_PATIENCE.as_millis() as f64,
    }
}
