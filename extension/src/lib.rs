//! atomflake inside PostgreSQL: Snowflake IDs minted in shared memory by atomflake's own
//! state machine.
//!
//! The extension `atomflake` keeps one state word per node of its layout in shared memory,
//! advanced by [`atomflake::raw::WordMinter`], the same transition and CAS loop as the
//! crate's generators. Every backend mints over the same words without a lock; one of
//! them writes the mark file (below) once per 1.5 s of minting, under a lock only that
//! write takes.
//!
//! - `atomflake.layout` (a preset name) and `atomflake.node` are fixed at server start.
//! - The library must be in `shared_preload_libraries`; loaded any other way (`CREATE
//!   EXTENSION`, the first call) it raises an error and mints nothing.
//! - `atomflake_next_id(node)` and `atomflake_next_id_at` are not PUBLIC's: the install
//!   script revokes them, and a role needs `GRANT EXECUTE` for each.
//! - A server in recovery (a hot standby) mints nothing: every minting function raises
//!   SQLSTATE 25006 (`read_only_sql_transaction`, as `nextval` does there).
//! - The wall clock is read on every call. A clock that moved back continues the last
//!   tick; a spent tick waits for the clock, at most [`MAX_WAIT_MS`], and a cancel or a
//!   statement timeout interrupts the wait.
//! - A high-water mark, `atomflake.mark` in the data directory, is stored durably before
//!   any ID reaches it, 1.5 s ahead of the clock (one write per 1.5 s of minting at most),
//!   by the first backend whose ID comes within 0.5 s of the stored mark.
//!   Shared memory starts empty after every restart and after a backend crash; the first
//!   call then reads the mark and starts every word past it, so every new ID is past every
//!   ID handed out before, whatever the clock says. When the postmaster lets go of shared
//!   memory (a stop, a crash reset), it lowers the mark to just past the last ID minted.
//! - A dump carries the mark: the one row of `atomflake_dump` (extension configuration
//!   data) is of the type `atomflake_mark`, which prints the mark of the server it is read
//!   on, and restoring the row raises the new server's mark ([`raise_mark`]).

use atomflake::Layout;
use atomflake::raw::{self, Refusal, WordMinter};
use pgrx::prelude::*;
use pgrx::{
    GucContext, GucFlags, GucRegistry, GucSetting, PGRXSharedMemory, PgAtomic, PgLwLock, PostgresGucEnum,
    pg_shmem_init,
};
use std::ffi::{CStr, CString};
use std::path::Path;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

pgrx::pg_module_magic!();

/// The longest a call waits for the clock to reach a free tick before it raises an error:
/// a clock stepped back further than this fails fast instead of stalling every insert.
pub const MAX_WAIT_MS: u64 = 10_000;

/// How far ahead of the clock `atomflake_next_id_at` mints: a time further ahead would move
/// the mark (shared by every node) so far that the first calls after a restart would wait
/// longer than [`MAX_WAIT_MS`].
pub const MAX_AHEAD_MS: u64 = MAX_WAIT_MS / 2;

/// The most nodes any preset has (Sonyflake's 16-bit machine ID): one state word each.
const WORDS: usize = 1 << 16;

/// The longest one sleep of a wait lasts, so that interrupts are served promptly.
const NAP_LIMIT: Duration = Duration::from_millis(5);

/// The mark file, in the data directory (the backends' working directory).
const MARK_FILE: &str = "atomflake.mark";

/// Declares [`Preset`] from `VARIANT = c"name"` pairs, in [`Layout::PRESETS`]' order, and
/// checks at compile time that the names are those of [`Layout::PRESETS`], one for one:
/// [`Preset::preset`] indexes it by the variant's number.
macro_rules! presets {
    ($($variant:ident = $name:literal),+ $(,)?) => {
        /// `atomflake.layout`: the layout presets, in [`Layout::PRESETS`]' order (the decode
        /// test starts a server for each name and checks it against that preset's layout).
        #[derive(PostgresGucEnum, Clone, Copy, PartialEq, Eq, Debug)]
        enum Preset {
            $(#[name = $name] $variant,)+
        }

        const _: () = {
            let names: &[&CStr] = &[$($name),+];
            assert!(names.len() == Layout::PRESETS.len(), "Preset has not one variant for each of Layout::PRESETS");
            let mut i = 0;
            while i < names.len() {
                assert!(
                    same_bytes(names[i].to_bytes(), Layout::PRESETS[i].0.as_bytes()),
                    "a Preset variant is not named as Layout::PRESETS is at its place"
                );
                i += 1;
            }
        };
    };
}

/// `a == b`, in a constant.
const fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

presets! {
    Twitter = c"twitter",
    Discord = c"discord",
    Instagram = c"instagram",
    Sonyflake = c"sonyflake",
    Mastodon = c"mastodon",
    Javascript = c"javascript",
}

impl Preset {
    /// The preset's name and layout: the variants are in [`Layout::PRESETS`]' order (checked
    /// where [`Preset`] is declared).
    fn preset(self) -> (&'static str, Layout) {
        Layout::PRESETS[self as usize]
    }

    fn layout(self) -> Layout {
        self.preset().1
    }
}

static LAYOUT: GucSetting<Preset> = GucSetting::<Preset>::new(Preset::Twitter);
/// -1: not set.
static NODE: GucSetting<i32> = GucSetting::<i32>::new(-1);

/// The state words, one per node; each holds the node's next free slot.
// SAFETY: the name is this extension's own.
static STATE: PgAtomic<[AtomicU64; WORDS]> = unsafe { PgAtomic::new(c"atomflake_state") };

/// The mark every word is minted below (Unix ms): a copy of `Mark::stored`, read without
/// the lock; 0 until the first call after a start has read the mark file.
// SAFETY: the name is this extension's own.
static COVERED: PgAtomic<AtomicU64> = unsafe { PgAtomic::new(c"atomflake_covered") };

/// The value every word started at when the mark file was read (meaningful once `COVERED`
/// is not 0): a word past it has minted.
// SAFETY: the name is this extension's own.
static START: PgAtomic<AtomicU64> = unsafe { PgAtomic::new(c"atomflake_start") };

/// Set while a backend moves the mark ahead of need (see `move_mark_early`): the others
/// mint on below the stored mark meanwhile.
// SAFETY: the name is this extension's own.
static STORING: PgAtomic<AtomicBool> = unsafe { PgAtomic::new(c"atomflake_storing") };

/// The mark file's state, under a lock: one backend reads or writes the file at a time.
// SAFETY: the name is this extension's own.
static MARK: PgLwLock<Mark> = unsafe { PgLwLock::new(c"atomflake_mark") };

#[derive(Default, Clone, Copy)]
struct Mark {
    /// Whether the file has been read since shared memory was set up.
    loaded: bool,
    /// The mark in the file.
    stored: u64,
}

// SAFETY: plain data, no pointers.
unsafe impl PGRXSharedMemory for Mark {}

/// Whether `_PG_init` ran in the postmaster, from `shared_preload_libraries`.
static PRELOADED: OnceLock<()> = OnceLock::new();

/// Runs when the postmaster loads the library: defines the settings, checks the node, and
/// asks for the shared memory.
#[pg_guard]
#[allow(
    clippy::large_stack_arrays,
    reason = "the state words' first value (512 KiB) is built on the postmaster's stack in its \
              shared-memory hook (at every start and crash restart, well within the stack) \
              and copied into shared memory"
)]
pub extern "C-unwind" fn _PG_init() {
    // SAFETY: a flag the postmaster sets while it loads `shared_preload_libraries`.
    if !unsafe { pg_sys::process_shared_preload_libraries_in_progress } {
        // Loaded by a backend for a call, not at server start: `CREATE EXTENSION` (and
        // `ALTER EXTENSION`) is refused here, every function but the mark's output
        // function raises the same error when called, and the output function prints the
        // mark file's mark (a dump of a server restarted without the library works).
        // SAFETY: a flag PostgreSQL sets while it runs an extension's script.
        if unsafe { pg_sys::creating_extension } {
            not_preloaded();
        }
        return;
    }
    GucRegistry::define_enum_guc(
        c"atomflake.layout",
        c"The layout of the IDs atomflake mints: twitter, discord, instagram, sonyflake, mastodon or javascript.",
        c"Fixed at server start. Changing it once IDs exist makes the decode functions read them wrongly.",
        &LAYOUT,
        GucContext::Postmaster,
        GucFlags::default(),
    );
    GucRegistry::define_int_guc(
        c"atomflake.node",
        c"The node atomflake_next_id() mints for; -1: none (atomflake_next_id() raises an error).",
        c"Fixed at server start. Every server (and every other generator) sharing an ID space needs its own node.",
        &NODE,
        -1,
        i32::from(u16::MAX),
        GucContext::Postmaster,
        GucFlags::default(),
    );
    // A misspelt `atomflake.*` setting is refused (`SET`), or warned about at start
    // (postgresql.conf), instead of being kept as a placeholder nothing reads.
    // SAFETY: a static C string; called while the library is loaded, as PostgreSQL asks.
    #[cfg(any(feature = "pg13", feature = "pg14"))]
    unsafe {
        pg_sys::EmitWarningsOnPlaceholders(c"atomflake".as_ptr());
    }
    // SAFETY: as above.
    #[cfg(not(any(feature = "pg13", feature = "pg14")))]
    unsafe {
        pg_sys::MarkGUCPrefixReserved(c"atomflake".as_ptr());
    }
    let layout = LAYOUT.get().layout();
    if let Ok(node) = u64::try_from(NODE.get())
        && node > layout.max_node()
    {
        raise(
            PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
            format!(
                "atomflake.node {node} is out of range: layout {} allows 0..={}",
                preset_name(),
                layout.max_node()
            ),
        );
    }
    pg_shmem_init!(STATE = [const { AtomicU64::new(0) }; WORDS]);
    pg_shmem_init!(COVERED = AtomicU64::new(0));
    pg_shmem_init!(STORING = AtomicBool::new(false));
    pg_shmem_init!(START = AtomicU64::new(0));
    // SAFETY: the postmaster loads preloaded libraries before it sets shared memory up, one
    // at a time; the hook chains to the one it replaces.
    unsafe {
        PREVIOUS_STARTUP_HOOK = pg_sys::shmem_startup_hook;
        pg_sys::shmem_startup_hook = Some(on_shmem_startup);
    }
    pg_shmem_init!(MARK);
    PRELOADED.get_or_init(|| ());
}

/// The shared-memory startup hook this library's replaced.
static mut PREVIOUS_STARTUP_HOOK: pg_sys::shmem_startup_hook_type = None;

/// After shared memory is set up (at start, and again after a crash): in the postmaster,
/// asks for [`store_final_mark`] when it next lets go of it.
#[pg_guard]
unsafe extern "C-unwind" fn on_shmem_startup() {
    // SAFETY: set once in `_PG_init`, before this hook can run.
    if let Some(previous) = unsafe { PREVIOUS_STARTUP_HOOK } {
        // SAFETY: the hook PostgreSQL had before this one, called as it would be.
        unsafe { previous() };
    }
    // SAFETY: a flag PostgreSQL sets before any hook runs; `on_shmem_exit` only records
    // the callback.
    unsafe {
        if !pg_sys::IsUnderPostmaster {
            pg_sys::on_shmem_exit(Some(store_final_mark), pg_sys::Datum::from(0));
        }
    }
}

/// Runs in the postmaster when it exits or resets shared memory after a crash, once every
/// backend is gone: stores the mark just past the last ID any word minted, below the mark
/// stored ahead of need, so that the next start does not wait for the clock to pass that.
/// A failed write leaves the stored mark, which still covers every ID.
#[pg_guard]
unsafe extern "C-unwind" fn store_final_mark(_code: std::ffi::c_int, _arg: pg_sys::Datum) {
    // Relaxed: no backend is left to race with; their stores happened before they exited.
    let covered = COVERED.get().load(Ordering::Relaxed);
    let Ok(minter) = WordMinter::new(LAYOUT.get().layout(), 0) else {
        return;
    };
    if covered == 0 {
        // The mark file was not read since shared memory was set up: nothing minted (a
        // standby never mints).
        return;
    }
    let start = START.get().load(Ordering::Relaxed);
    let last = node_words(&minter)
        .iter()
        .map(|word| word.load(Ordering::Relaxed))
        .filter(|&word| word > start)
        .map(|word| minter.mark_after(word))
        .max();
    if let Some(mark) = last.filter(|&mark| mark < covered)
        && let Err(error) = raw::write_mark(Path::new(MARK_FILE), mark)
    {
        pgrx::warning!("atomflake cannot store its final mark: {error}");
    }
}

/// The state words of the layout's nodes.
fn node_words(minter: &WordMinter) -> &'static [AtomicU64] {
    let nodes = usize::try_from(minter.layout().max_node()).map_or(WORDS, |max| max + 1);
    &STATE.get()[..nodes]
}

/// Raises an ERROR with `code` (SQLSTATE) and `message`.
fn raise(code: PgSqlErrorCode, message: String) -> ! {
    ereport!(ERROR, code, message);
}

/// Raises [`not_preloaded`]'s error unless `_PG_init` ran in the postmaster.
fn require_preloaded() {
    if PRELOADED.get().is_none() {
        not_preloaded();
    }
}

fn not_preloaded() -> ! {
    raise(
        PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        "atomflake must be loaded at server start: add atomflake to shared_preload_libraries \
         in postgresql.conf and restart the server"
            .to_owned(),
    );
}

fn preset_name() -> &'static str {
    LAYOUT.get().preset().0
}

/// Mints an ID for `atomflake.node`.
#[pg_extern(name = "atomflake_next_id")]
fn next_id() -> i64 {
    require_preloaded();
    mint(own_minter(), None)
}

/// This backend's minter for `atomflake.node`, made on first use.
fn own_minter() -> &'static WordMinter {
    static MINTER: OnceLock<WordMinter> = OnceLock::new();
    MINTER.get_or_init(|| {
        let node = u64::try_from(NODE.get()).unwrap_or_else(|_| node_not_set());
        node_minter(node)
    })
}

/// Mints an ID for `node` (a logical shard): each node has its own state word.
#[pg_extern(name = "atomflake_next_id")]
fn next_id_for(node: i64) -> i64 {
    require_preloaded();
    let layout = LAYOUT.get().layout();
    match u64::try_from(node) {
        Ok(node) if node <= layout.max_node() => mint(&node_minter(node), None),
        _ => raise(
            PgSqlErrorCode::ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE,
            format!(
                "node {node} is out of range: layout {} allows 0..={}",
                preset_name(),
                layout.max_node()
            ),
        ),
    }
}

/// Mints an ID for `atomflake.node` at the time `unix_ms` (tests, replays), at most
/// [`MAX_AHEAD_MS`] ahead of the clock: never waits.
#[pg_extern(name = "atomflake_next_id_at", strict)]
fn next_id_at(unix_ms: i64) -> i64 {
    require_preloaded();
    let Ok(ms) = u64::try_from(unix_ms) else {
        raise(
            PgSqlErrorCode::ERRCODE_DATETIME_FIELD_OVERFLOW,
            format!(
                "atomflake cannot mint an id: time {unix_ms} ms is before the layout's epoch: \
                 the layout allows {} ms and later",
                LAYOUT.get().layout().epoch_ms()
            ),
        );
    };
    let clock = wall_ms();
    if ms > clock.saturating_add(MAX_AHEAD_MS) {
        raise(
            PgSqlErrorCode::ERRCODE_DATETIME_FIELD_OVERFLOW,
            format!(
                "time {ms} ms is {} ms ahead of the clock: atomflake_next_id_at mints at most \
                 {MAX_AHEAD_MS} ms ahead",
                ms - clock
            ),
        );
    }
    mint(own_minter(), Some(ms))
}

// Who may call what, set by the install script once the functions exist. `CREATE FUNCTION`
// grants EXECUTE to PUBLIC, so without this every role that can connect could move this
// server's node up to `MAX_AHEAD_MS` ahead of the clock (once that tick's IDs are spent,
// every call of every role waits for the clock to reach it), or mint on the nodes of
// other servers.
// `atomflake_next_id()` stays PUBLIC's: it mints at the clock for this server's node and
// leaves nothing behind once its caller stops; the decode functions read only their
// argument. Privileges set here are recorded in `pg_init_privs`: `pg_dump` dumps only
// the grants made since.
extension_sql!(
    r"
REVOKE EXECUTE ON FUNCTION @extschema@.atomflake_next_id(bigint) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION @extschema@.atomflake_next_id_at(bigint) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION @extschema@.atomflake_raise_mark(bigint) FROM PUBLIC;
",
    name = "privileges",
    requires = [next_id_for, next_id_at, raise_mark],
);

// `atomflake_adopt(tbl, col)`: switches an existing bigint key (a bigserial or an
// identity) over to `atomflake_next_id()`, as the SQL script's `--adopt` does: under an
// ACCESS EXCLUSIVE lock taken before anything is read, the column and every foreign key
// to it must be bigint and every value below the first ID of the tick of an ID minted
// then (node 0, sequence 0: the smallest ID any node mints from then on); then the
// default moves and the identity (with its sequence) or the sequence's ownership goes.
// One call is one statement, so one transaction. A column whose default already calls
// this extension's `atomflake_next_id()` (by its dependency, not its text) is left alone,
// with no lock and no ID minted. The maximum is read with row security off; a relation
// that is not a table is refused; the caller's `lock_timeout` bounds the wait for the
// lock. The body is the template `atomflake_sql::ADOPT` (`sql/templates/adopt.sql`),
// shared with the script; `build.rs` fills in its names.
include!(concat!(env!("OUT_DIR"), "/adopt.rs"));

fn node_not_set() -> ! {
    raise(
        PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        format!(
            "atomflake.node is not set: set it in postgresql.conf (0..={} for layout {}) \
             and restart the server, or pass a node to atomflake_next_id(node)",
            LAYOUT.get().layout().max_node(),
            preset_name()
        ),
    );
}

fn node_minter(node: u64) -> WordMinter {
    match WordMinter::new(LAYOUT.get().layout(), node) {
        Ok(minter) => minter,
        Err(error) => raise(
            PgSqlErrorCode::ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE,
            error.to_string(),
        ),
    }
}

/// The wall clock, in Unix ms.
fn wall_ms() -> u64 {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO);
    u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
}

/// Mints one ID with `minter` over its node's word, at `at` (never waiting) or at the
/// clock's time (waiting for a spent tick). Its callers have checked that the library is
/// preloaded.
fn mint(minter: &WordMinter, at: Option<u64>) -> i64 {
    // SAFETY: a read of PostgreSQL's recovery state, which any backend may make: a
    // backend-local flag once recovery has ended (a server never goes back into it), a
    // read of shared memory before.
    if unsafe { pg_sys::RecoveryInProgress() } {
        in_recovery();
    }
    let node = minter.node();
    let word = &STATE.get()[usize::try_from(node).unwrap_or(usize::MAX)];
    loop {
        let now = at.unwrap_or_else(wall_ms);
        // Acquire: pairs with the Release store after a first call set the words up from
        // the mark file, so a mint under that mark sees the words' new values.
        let covered = COVERED.get().load(Ordering::Acquire);
        match minter.mint(word, now, covered) {
            Ok(id) => {
                if let Some(mark_ms) = minter.early_mark(id, now, covered) {
                    move_mark_early(minter, covered, mark_ms);
                }
                return i64::try_from(id.get()).unwrap_or_else(|_| {
                    raise(
                        PgSqlErrorCode::ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE,
                        format!(
                            "id {} does not fit a bigint: layout {}'s bigint ids end at {} ms (Unix)",
                            id.get(),
                            preset_name(),
                            minter.layout().i64_end_unix_ms()
                        ),
                    );
                });
            }
            Err(Refusal::Uncovered { mark_ms }) => store_mark(minter, covered, mark_ms),
            Err(Refusal::Spent { until_ms }) => {
                if at.is_some() {
                    raise(
                        PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
                        format!("no id left at {now} ms: node {node}'s ids are used up to {until_ms} ms"),
                    );
                }
                wait_until(node, now, until_ms);
            }
            Err(Refusal::Failed(error)) => out_of_span(&error),
        }
    }
}

/// A server in recovery mints nothing, as `nextval` mints nothing there: a standby made
/// with `pg_basebackup` has the primary's mark file, and often its `atomflake.node`.
fn in_recovery() -> ! {
    raise(
        PgSqlErrorCode::ERRCODE_READ_ONLY_SQL_TRANSACTION,
        "atomflake cannot mint while the server is in recovery (a standby): mint on the \
         primary; a promoted standby mints once it is out of recovery, for the atomflake.node \
         it was started with, which must be its own"
            .to_owned(),
    );
}

fn out_of_span(error: &atomflake::MintError) -> ! {
    raise(
        PgSqlErrorCode::ERRCODE_DATETIME_FIELD_OVERFLOW,
        format!("atomflake cannot mint an id: {error}"),
    );
}

/// Sleeps until the clock reads `until_ms`, in short naps that serve interrupts (a cancel,
/// a statement timeout); raises an error when that is more than [`MAX_WAIT_MS`] away.
fn wait_until(node: u64, now: u64, until_ms: u64) {
    let behind = until_ms.saturating_sub(now);
    if behind > MAX_WAIT_MS {
        raise(
            PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            format!(
                "the clock reads {now} ms, {behind} ms behind node {node}'s next free id at \
                 {until_ms} ms: atomflake waits at most {MAX_WAIT_MS} ms for the clock"
            ),
        );
    }
    loop {
        pg_sys::check_for_interrupts!();
        let left = Duration::from_millis(until_ms).saturating_sub(
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap_or(Duration::ZERO),
        );
        if left.is_zero() {
            return;
        }
        let nap = left.min(NAP_LIMIT);
        // SAFETY: a plain sleep; a signal ends it early, and the loop serves it.
        unsafe { pg_sys::pg_usleep(i64::try_from(nap.as_micros()).unwrap_or(i64::MAX) as _) };
    }
}

/// Clears the `STORING` flag when dropped: also when a store raises an error (an unwinding
/// panic).
struct Done<'a>(&'a AtomicBool);

impl Drop for Done<'_> {
    fn drop(&mut self) {
        // Relaxed: the flag orders nothing; the mark is published through `COVERED`.
        self.0.store(false, Ordering::Relaxed);
    }
}

/// Moves the stored mark to `wanted` ahead of need, unless another backend is doing so: the
/// IDs minted meanwhile are below the stored mark, and a backend waits on the lock only if
/// its next ID reaches that mark before the write is done.
#[cold]
fn move_mark_early(minter: &WordMinter, seen: u64, wanted: u64) {
    let storing = STORING.get();
    // Relaxed: a hint that spares the other backends a failed swap; the swap decides.
    if storing.load(Ordering::Relaxed)
        || storing
            .compare_exchange(false, true, Ordering::Relaxed, Ordering::Relaxed)
            .is_err()
    {
        return;
    }
    let _done = Done(storing);
    store_mark(minter, seen, wanted);
}

/// Moves the stored mark to at least `wanted` (Unix ms), unless another backend moved it
/// since this one read `seen`. The first call after shared memory was set up reads the
/// mark file and starts every word past it first.
#[cold]
fn store_mark(minter: &WordMinter, seen: u64, wanted: u64) {
    let mut mark = MARK.exclusive();
    if !load(&mut mark, minter) && mark.stored != seen {
        // Another backend moved the mark since this one read it: mint again under it.
        COVERED.get().store(mark.stored, Ordering::Release);
        return;
    }
    if wanted > mark.stored {
        raw::write_mark(Path::new(MARK_FILE), wanted).unwrap_or_else(|error| mark_failed(&error));
        mark.stored = wanted;
    }
    // Release: see the Acquire load in `mint`.
    COVERED.get().store(mark.stored, Ordering::Release);
}

/// Reads the mark file and starts every word past it, the first time since shared memory
/// was set up (the lock held): whether it did.
fn load(mark: &mut Mark, minter: &WordMinter) -> bool {
    if mark.loaded {
        return false;
    }
    let old = raw::read_mark(Path::new(MARK_FILE)).unwrap_or_else(|error| mark_failed(&error));
    let start = minter.start(old.unwrap_or(0));
    for word in node_words(minter) {
        // Relaxed: published by the Release store of `COVERED` after; no backend mints
        // while `COVERED` is 0 (every slot is past it).
        word.store(start, Ordering::Relaxed);
    }
    // Relaxed: read by the postmaster only once every backend is gone.
    START.get().store(start, Ordering::Relaxed);
    mark.stored = old.unwrap_or(0);
    mark.loaded = true;
    true
}

/// The mark a dump carries (Unix ms): every ID this server minted, in any database, is
/// below it. On a server in recovery, which mints nothing and whose mark file is as old as
/// its base backup, it is at least the server's clock.
fn carried_mark() -> u64 {
    // Acquire: a mark published since the file was last read counts too.
    let covered = COVERED.get().load(Ordering::Acquire);
    // The file holds the mark of the last run until the first call of this run reads it.
    let stored = raw::read_mark(Path::new(MARK_FILE))
        .unwrap_or_else(|error| mark_failed(&error))
        .unwrap_or(0);
    let mark = covered.max(stored);
    // SAFETY: as in `mint`.
    if unsafe { pg_sys::RecoveryInProgress() } {
        mark.max(wall_ms())
    } else {
        mark
    }
}

/// `atomflake_mark()`: the mark a dump of any database of this server carries now.
#[pg_extern(name = "atomflake_mark")]
fn mark_now() -> i64 {
    require_preloaded();
    bigint(carried_mark())
}

/// `atomflake_raise_mark(unix_ms)`: starts every node past `unix_ms`, and moves the stored
/// mark to `unix_ms` when that is higher, so every ID minted from then on is past every ID
/// of a server whose mark was `unix_ms` (a restored dump calls it; so may a move from
/// another generator). The words move whatever the stored mark is: that mark is an upper
/// bound up to 1.5 s ahead of the clock, shared by every node, not where the words stand.
/// Returns the mark now stored. IDs minted while it runs may be below it.
#[pg_extern(name = "atomflake_raise_mark", strict)]
fn raise_mark(unix_ms: i64) -> i64 {
    require_preloaded();
    // SAFETY: as in `mint`.
    if unsafe { pg_sys::RecoveryInProgress() } {
        in_recovery();
    }
    let layout = LAYOUT.get().layout();
    let end = layout.i64_end_unix_ms();
    let ms = match u64::try_from(unix_ms) {
        Ok(ms) if ms < end => ms,
        _ => raise(
            PgSqlErrorCode::ERRCODE_DATETIME_FIELD_OVERFLOW,
            format!(
                "mark {unix_ms} ms is out of range: layout {}'s bigint ids end at {end} ms, \
                 so a mark is 0..{end} ms (Unix)",
                preset_name()
            ),
        ),
    };
    let minter = node_minter(0);
    let mut mark = MARK.exclusive();
    load(&mut mark, &minter);
    // The stored mark is an upper bound shared by every node, ahead of where the words
    // stand: the words move past `ms` whatever it is, the file only when `ms` is above it.
    if ms > mark.stored {
        raw::write_mark(Path::new(MARK_FILE), ms).unwrap_or_else(|error| mark_failed(&error));
        mark.stored = ms;
    }
    let start = minter.start(ms);
    for word in node_words(&minter) {
        // Relaxed: a minter's CAS fails on the new value and reads it again.
        word.fetch_max(start, Ordering::Relaxed);
    }
    // Relaxed: read by the postmaster only once every backend is gone. A word at `start`
    // has minted nothing since, and one past it minted past the mark.
    START.get().fetch_max(start, Ordering::Relaxed);
    // Release: see the Acquire load in `mint`.
    COVERED.get().store(mark.stored, Ordering::Release);
    bigint(mark.stored)
}

/// The input function of the type `atomflake_mark`: a Unix time in ms.
#[pg_extern(sql = false)]
fn atomflake_mark_in(input: &CStr) -> i64 {
    let text = input.to_string_lossy();
    match text.trim().parse::<i64>() {
        Ok(ms) if ms >= 0 && !text.trim_start().starts_with(['+', '-']) => ms,
        _ => raise(
            PgSqlErrorCode::ERRCODE_INVALID_TEXT_REPRESENTATION,
            format!(
                "invalid input for type atomflake_mark: \"{text}\": a mark is a Unix time in ms, \
                 0..={}",
                i64::MAX
            ),
        ),
    }
}

/// The output function of the type `atomflake_mark`: the mark a dump carries now (see
/// [`carried_mark`]), whatever value the row holds, so that `pg_dump` writes this
/// server's mark into the dump of every database with the extension.
///
/// Without the library preloaded (a server restarted without it in
/// `shared_preload_libraries`) nothing can have been minted since the server started, so
/// the mark in the data directory's file covers every ID: that is printed, with a warning,
/// so that `pg_dump` and `pg_dumpall` still work and carry it.
#[pg_extern(sql = false)]
fn atomflake_mark_out(_stored: i64) -> CString {
    let mark = if PRELOADED.get().is_none() {
        let stored = raw::read_mark(Path::new(MARK_FILE))
            .unwrap_or_else(|error| mark_failed(&error))
            .unwrap_or(0);
        pgrx::warning!(
            "atomflake is not loaded at server start (shared_preload_libraries): the mark read \
             is the one in the data directory's file, {stored} ms, which covers every ID this \
             server minted, as it can mint none until atomflake is loaded"
        );
        stored
    } else {
        carried_mark()
    };
    CString::new(mark.to_string()).unwrap_or_default()
}

// The mark travels in every dump: `atomflake_dump` is extension configuration data (so
// `pg_dump` and `pg_dumpall` dump its row), and its one row's type prints the mark of the
// server being dumped. Restoring the row raises the new server's mark through the
// trigger, which keeps the row out of the table: the row the install script put there
// stays the only one.
extension_sql!(
    r"
CREATE TYPE @extschema@.atomflake_mark;
CREATE FUNCTION @extschema@.atomflake_mark_in(cstring) RETURNS @extschema@.atomflake_mark
    LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE AS 'MODULE_PATHNAME', 'atomflake_mark_in_wrapper';
-- STABLE, not VOLATILE as what it reads would make it: PostgreSQL wants type output
-- functions no more than stable, and one statement's rows may show different marks.
CREATE FUNCTION @extschema@.atomflake_mark_out(@extschema@.atomflake_mark) RETURNS cstring
    LANGUAGE c STABLE STRICT AS 'MODULE_PATHNAME', 'atomflake_mark_out_wrapper';
CREATE TYPE @extschema@.atomflake_mark (
    INPUT = @extschema@.atomflake_mark_in,
    OUTPUT = @extschema@.atomflake_mark_out,
    LIKE = pg_catalog.int8
);
COMMENT ON TYPE @extschema@.atomflake_mark IS
    'A Unix time in ms that reads as the mark of the server it is read on: every ID that server minted is below it.';

CREATE TABLE @extschema@.atomflake_dump (mark @extschema@.atomflake_mark NOT NULL);
INSERT INTO @extschema@.atomflake_dump VALUES ('0');
SELECT pg_catalog.pg_extension_config_dump('@extschema@.atomflake_dump', '');
GRANT SELECT ON @extschema@.atomflake_dump TO PUBLIC;
COMMENT ON TABLE @extschema@.atomflake_dump IS
    'One row that carries this server''s mark in a dump; restored, it raises the new server''s mark.';

CREATE FUNCTION @extschema@.atomflake_raise_mark(@extschema@.atomflake_mark) RETURNS bigint
    LANGUAGE c VOLATILE STRICT AS 'MODULE_PATHNAME', 'raise_mark_wrapper';
REVOKE EXECUTE ON FUNCTION @extschema@.atomflake_raise_mark(@extschema@.atomflake_mark) FROM PUBLIC;
CREATE FUNCTION @extschema@.atomflake_dump_restored() RETURNS trigger LANGUAGE plpgsql AS $restored$
BEGIN
    PERFORM @extschema@.atomflake_raise_mark(NEW.mark);
    RETURN NULL;
END
$restored$;
CREATE TRIGGER restored BEFORE INSERT ON @extschema@.atomflake_dump
    FOR EACH ROW EXECUTE FUNCTION @extschema@.atomflake_dump_restored();
-- Loaders that run with session_replication_role = replica (pgcopydb, the table sync of
-- logical replication) fire only the triggers enabled ALWAYS.
ALTER TABLE @extschema@.atomflake_dump ENABLE ALWAYS TRIGGER restored;
",
    name = "dump",
    requires = [raise_mark],
);

fn mark_failed(error: &atomflake::mark::HighWaterError) -> ! {
    raise(
        PgSqlErrorCode::ERRCODE_IO_ERROR,
        format!("atomflake cannot use its high-water mark: {error}"),
    );
}

/// The layout's decoding of `id`, or the error for an ID outside it.
fn parts(id: i64) -> atomflake::Parts {
    let (layout, id) = of_the_layout(id);
    layout.decode(id)
}

/// The layout and `id` in it, or the error for an ID outside it.
fn of_the_layout(id: i64) -> (Layout, atomflake::Id) {
    require_preloaded();
    let layout = LAYOUT.get().layout();
    match u64::try_from(id) {
        Ok(raw) if raw <= layout.max_id() => (layout, atomflake::Id::new(raw)),
        _ => raise(
            PgSqlErrorCode::ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE,
            format!(
                "id {id} is out of range: the layout allows 0..={}",
                layout.max_id().min(i64::MAX as u64)
            ),
        ),
    }
}

fn bigint(value: u64) -> i64 {
    // Every field of an ID that fits a bigint fits one too.
    i64::try_from(value).unwrap_or(i64::MAX)
}

/// The Unix ms of `id`'s tick.
#[pg_extern(name = "atomflake_unix_ms", immutable, strict, parallel_safe)]
fn unix_ms(id: i64) -> i64 {
    bigint(parts(id).unix_ms)
}

/// The node of `id`.
#[pg_extern(name = "atomflake_node", immutable, strict, parallel_safe)]
fn node(id: i64) -> i64 {
    bigint(parts(id).node)
}

/// The sequence value of `id`.
#[pg_extern(name = "atomflake_sequence", immutable, strict, parallel_safe)]
fn sequence(id: i64) -> i64 {
    bigint(parts(id).sequence)
}

/// Milliseconds from the Unix epoch to PostgreSQL's (2000-01-01).
const PG_EPOCH_UNIX_MS: i64 = 946_684_800_000;

/// The time of `id`'s tick.
#[pg_extern(name = "atomflake_time", immutable, strict, parallel_safe)]
fn time(id: i64) -> TimestampWithTimeZone {
    let micros = (bigint(parts(id).unix_ms) - PG_EPOCH_UNIX_MS) * 1000;
    TimestampWithTimeZone::try_from(micros).unwrap_or_else(|_| {
        raise(
            PgSqlErrorCode::ERRCODE_DATETIME_FIELD_OVERFLOW,
            format!("id {id}'s time is out of timestamptz's range"),
        )
    })
}

/// The smallest ID of the tick that holds `at`.
#[pg_extern(name = "atomflake_first_id_at", immutable, strict, parallel_safe)]
fn first_id_at(at: TimestampWithTimeZone) -> i64 {
    id_at(at, Layout::first_id_at)
}

/// The largest ID of the tick that holds `at`.
#[pg_extern(name = "atomflake_last_id_at", immutable, strict, parallel_safe)]
fn last_id_at(at: TimestampWithTimeZone) -> i64 {
    id_at(at, Layout::last_id_at)
}

/// `id_of` at the Unix ms of `at`, for times whose IDs fit a bigint.
fn id_at(
    at: TimestampWithTimeZone,
    id_of: fn(&Layout, u64) -> Result<atomflake::Id, atomflake::RangeError>,
) -> i64 {
    require_preloaded();
    let layout = LAYOUT.get().layout();
    let micros: i64 = at.into();
    let ms = micros.div_euclid(1000).saturating_add(PG_EPOCH_UNIX_MS);
    let end = layout.i64_end_unix_ms();
    match u64::try_from(ms)
        .ok()
        .filter(|ms| *ms < end)
        .map(|ms| id_of(&layout, ms))
    {
        Some(Ok(id)) => bigint(id.get()),
        _ => raise(
            PgSqlErrorCode::ERRCODE_DATETIME_FIELD_OVERFLOW,
            format!(
                "time {ms} ms is out of range: the layout's bigint ids cover {}..{end} ms",
                layout.epoch_ms()
            ),
        ),
    }
}

/// `id` as a UUID of version 7 (RFC 9562): its tick's start as the UUID's time, then the
/// whole ID and the layout's fingerprint, so the UUIDs sort as the IDs do and
/// `atomflake_from_uuid` gives the ID back (`Id::to_uuid_u128`).
#[pg_extern(name = "atomflake_to_uuid", immutable, strict, parallel_safe)]
fn to_uuid(id: i64) -> pgrx::Uuid {
    let (layout, id) = of_the_layout(id);
    match id.to_uuid_u128(layout) {
        Ok(uuid) => pgrx::Uuid::from_bytes(uuid.to_be_bytes()),
        // Only a layout whose times pass 2^48 ms: none of the presets.
        Err(error) => raise(
            PgSqlErrorCode::ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE,
            error.to_string(),
        ),
    }
}

/// The ID that `uuid`, a UUID of version 7 of the layout (`atomflake_to_uuid`'s), holds;
/// an error naming why for any other UUID (`Id::from_uuid_u128`).
#[pg_extern(name = "atomflake_from_uuid", immutable, strict, parallel_safe)]
fn from_uuid(uuid: pgrx::Uuid) -> i64 {
    require_preloaded();
    let layout = LAYOUT.get().layout();
    match atomflake::Id::from_uuid_u128(u128::from_be_bytes(*uuid.as_bytes()), layout) {
        Ok(id) => i64::try_from(id.get()).unwrap_or_else(|_| {
            raise(
                PgSqlErrorCode::ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE,
                format!(
                    "uuid {uuid:-} holds id {id}, out of range for bigint: allowed 0..={}",
                    i64::MAX
                ),
            )
        }),
        Err(error) => raise(
            PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
            format!("uuid {uuid:-} is not an id's: {error}"),
        ),
    }
}

/// `id` masked with the 16-byte `key` (`Mask::mask`): a keyed permutation of the IDs that
/// fit a bigint, whose output shows neither the ID's time, node nor the volume between
/// two IDs; `atomflake_unmask` with the same key gives the ID back. Pass the key as a
/// query parameter rather than a literal, which the server's statement log would keep.
#[pg_extern(name = "atomflake_mask", immutable, strict, parallel_safe)]
fn mask(id: i64, key: &[u8]) -> i64 {
    masked_with(id, key, atomflake::Mask::mask)
}

/// The ID whose `atomflake_mask` with `key` is `masked` (`Mask::unmask`).
#[pg_extern(name = "atomflake_unmask", immutable, strict, parallel_safe)]
fn unmask(masked: i64, key: &[u8]) -> i64 {
    masked_with(masked, key, atomflake::Mask::unmask)
}

/// `through` (a mask's `mask` or `unmask`) of `value` with `key`, or the error for a key of
/// another length (never showing it) or a negative value.
fn masked_with(value: i64, key: &[u8], through: fn(&atomflake::Mask, atomflake::Id) -> atomflake::Id) -> i64 {
    let Ok(key) = <[u8; atomflake::MASK_KEY_BYTES]>::try_from(key) else {
        raise(
            PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
            format!("key has {} bytes: a key is 16 bytes", key.len()),
        );
    };
    let Ok(raw) = u64::try_from(value) else {
        raise(
            PgSqlErrorCode::ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE,
            format!("id {value} is out of range: ids allow 0..={}", i64::MAX),
        );
    };
    // Below 2^63 in, below 2^63 out: the mask keeps each half.
    bigint(through(&atomflake::Mask::new(key), atomflake::Id::new(raw)).get())
}
