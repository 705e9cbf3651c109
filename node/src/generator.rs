//! `NativeGenerator` and `lease()`.
//!
//! Every generator on one node of one layout is one Rust generator per process: a worker
//! thread that asks for a node this process already mints on gets that generator, shared,
//! so the workers of one process never mint an ID twice and need one node between them.
//! Each handle (a `NativeGenerator`, one per `new Generator`) holds it through an `Arc`;
//! the last handle to close (or to be collected) drops it, which stores the mark that
//! covers exactly what it minted and releases its lease. Every `Arc` of the registry is
//! made and dropped with the registry locked, so that a generator on a node is built only
//! once the one before it on that node is dropped.

use crate::args;
use crate::errors::{Refusal, build_error, lease_error, range};
use crate::layout::NativeLayout;
use atomflake::{Builder, Generator, Id, Layout, MonotonicClock};
use atomflake_lease::{LeaseOptions, Registry};
use napi::bindgen_prelude::{AsyncTask, BigUint64Array};
use napi::{Env, Task};
use napi_derive::napi;
use std::cell::RefCell;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, LazyLock, Mutex, MutexGuard, PoisonError, Weak};
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
}

/// The generators of this process, by layout and node.
type Generators = HashMap<(Layout, u64), Weak<Shared>>;

/// The registry, locked.
fn generators() -> MutexGuard<'static, Generators> {
    static GENERATORS: LazyLock<Mutex<Generators>> = LazyLock::new(Mutex::default);
    GENERATORS.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Drops a handle's `Arc`: the last one removes the generator from the registry and drops
/// it (storing its mark, releasing its lease) with the registry locked.
fn release(shared: Arc<Shared>) {
    let mut generators = generators();
    if Arc::strong_count(&shared) == 1 {
        generators.remove(&(shared.layout, shared.node));
        drop(shared);
    }
}

/// A handle on a generator of this process.
#[napi]
pub struct NativeGenerator {
    /// The generator, until this handle is closed. (A cell: a handle lives on its
    /// JavaScript thread alone, and `close()` must not borrow it mutably, as napi-rs would
    /// hold that borrow until the close's promise settles.)
    shared: RefCell<Option<Arc<Shared>>>,
    layout: Layout,
    node: u64,
    /// How long a sync call waits for each tick's IDs: one tick.
    tick: Duration,
}

impl NativeGenerator {
    fn handle(shared: Arc<Shared>) -> NativeGenerator {
        NativeGenerator {
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

    /// The next ID, waiting at most one tick (a spent tick); any other refusal at once.
    #[inline]
    fn mint(&self) -> Result<u64, Refusal> {
        self.with(|generator| match generator.try_next_id() {
            Ok(id) => Ok(id.get()),
            Err(_) => self.mint_slowly(generator),
        })
    }

    #[cold]
    fn mint_slowly(&self, generator: &Generator<MonotonicClock>) -> Result<u64, Refusal> {
        generator
            .next_id_timeout(self.tick)
            .map(Id::get)
            .map_err(Refusal::Mint)
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

#[napi]
impl NativeGenerator {
    /// The generator of `layout` on `node` in this process: the one already minting there,
    /// shared, or a new one, with `highWater` (a file that keeps the mark of minted time)
    /// and `borrowAheadMs` (ticks a burst may mint into ahead of the clock).
    #[napi(constructor)]
    pub fn new(
        layout: &NativeLayout,
        node: f64,
        high_water: Option<String>,
        borrow_ahead_ms: f64,
    ) -> napi::Result<Self> {
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
        if let Some(shared) = generators.get(&(layout, node)).and_then(Weak::upgrade) {
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
            return Ok(NativeGenerator::handle(shared));
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
        });
        generators.insert((layout, node), Arc::downgrade(&shared));
        Ok(NativeGenerator::handle(shared))
    }

    /// The next ID, waiting at most one tick.
    #[napi]
    pub fn next_id(&self) -> napi::Result<u64> {
        Ok(self.mint()?)
    }

    /// The next ID as decimal text, waiting at most one tick.
    #[napi]
    pub fn next_id_string(&self) -> napi::Result<String> {
        Ok(self.mint()?.to_string())
    }

    /// The next ID as a number, waiting at most one tick: on layouts of at most 53 bits.
    #[napi]
    pub fn next_id_number(&self) -> napi::Result<f64> {
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

    /// The next ID now, else the refusal (a spent tick: transient, with the ms to wait).
    #[napi]
    pub fn try_next_id(&self) -> napi::Result<u64> {
        Ok(self.with(|generator| generator.try_next_id().map(Id::get).map_err(Refusal::Mint))?)
    }

    /// `n` IDs in increasing order, a tick's run at a time, each waited for at most a tick.
    #[napi]
    pub fn next_ids(&self, n: f64) -> napi::Result<BigUint64Array> {
        let n = Self::batch(n)?;
        let ids = self.with(|generator| {
            let mut ids = room(n);
            while (ids.len() as u64) < n {
                let run = generator
                    .next_run_timeout(n - ids.len() as u64, self.tick)
                    .map_err(Refusal::Mint)?;
                ids.extend(run.into_iter().map(Id::get));
            }
            Ok(ids)
        })?;
        Ok(BigUint64Array::new(ids))
    }

    /// Up to `n` IDs of the current tick now, else the refusal.
    #[napi]
    pub fn try_next_run(&self, n: f64) -> napi::Result<BigUint64Array> {
        let n = Self::batch(n)?;
        if n == 0 {
            return Ok(BigUint64Array::new(Vec::new()));
        }
        let run = self.with(|generator| generator.try_next_run(n).map_err(Refusal::Mint))?;
        let mut ids = room(run.len());
        ids.extend(run.into_iter().map(Id::get));
        Ok(BigUint64Array::new(ids))
    }

    /// The node this generator mints on.
    #[napi(getter)]
    pub fn node(&self) -> u32 {
        // Every layout's node fits 32 bits where a node has a generator: a generator
        // checks its node against the layout, which has at most 2^32 nodes in practice;
        // a wider one is shown saturated.
        u32::try_from(self.node).unwrap_or(u32::MAX)
    }

    /// The generator's layout.
    #[napi(getter)]
    pub fn layout(&self) -> NativeLayout {
        NativeLayout(self.layout)
    }

    /// Whether this handle was closed.
    #[napi(getter)]
    pub fn closed(&self) -> bool {
        self.shared.borrow().is_none()
    }

    /// Closes this handle; when it is the last on its generator, stores the mark that
    /// covers exactly the IDs minted and releases the lease, off the event loop.
    #[napi]
    pub fn close(&self) -> AsyncTask<Closing> {
        AsyncTask::new(Closing(self.shared.borrow_mut().take()))
    }
}

impl Drop for NativeGenerator {
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
    type JsValue = NativeGenerator;

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
        if generators
            .get(&(self.layout, node))
            .and_then(Weak::upgrade)
            .is_some()
        {
            // Dropped with the registry unlocked: it releases the lease.
            drop(generators);
            drop(generator);
            return Err(range(format!(
                "the lease gave node {node}, on which this process already mints with a generator of its own: lease nodes apart from fixed ones"
            )));
        }
        let shared = Arc::new(Shared {
            generator,
            layout: self.layout,
            node,
            high_water: None,
            leased: true,
        });
        generators.insert((self.layout, node), Arc::downgrade(&shared));
        Ok(shared)
    }

    fn resolve(&mut self, _: Env, shared: Arc<Shared>) -> napi::Result<NativeGenerator> {
        Ok(NativeGenerator::handle(shared))
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
