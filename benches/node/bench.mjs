// atomflake for Node.js beside the npm ID packages, in one process.
//
//     bash benches/node/run.sh      # installs the peers, builds the addon, runs this (~1 min)
//     node benches/node/bench.mjs   # with the addon built and `npm ci` done in benches/node
//
// The method is benches/python/compare.py's. Each generator is checked before it is timed:
// 10,000 of its IDs, minted back to back, must be strictly increasing, and the last must
// decode, with the generator's own layout and epoch, to the wall-clock time of the sample
// within 20 ms; one that fails is flagged `[BROKEN]` with the reason, and timed all the
// same (its speed is what people pick it for). Then, per ID:
//
// - tight: one call per ID in a loop of 200,000 calls (fewer for a generator slower than
//   2.5 µs per ID: a round lasts 0.5 s at most), each result consumed cheaply (a few
//   of its bits xored into a sink, so that V8 cannot drop the call); a generator with a
//   per-tick cap below the call rate times the cap here, not the call;
// - paced: bursts of 512 calls 1 ms apart (100 bursts a round, fewer for a slow generator),
//   only the time inside the bursts counted, at the median burst's rate, so that no
//   generator with 512 IDs per tick or more waits: the cost of the call;
// - batch: one `nextIds(100,000)` call a round. (A process has one generator per node, kept
//   after its last close when it has no mark store: the rounds go on from one another, and
//   the borrowing row borrows up to 25 ms more a round, within its 1,000.)
//
// Each figure is the median of ROUNDS rounds (env ROUNDS, default 7), after warm-up rounds
// that let V8 optimise the loop. Every row gets loops of its own (compiled with `new
// Function`), so that no call site in them sees more than one generator. Ratios are each
// row's time over atomflake's first row in the same column (with
// ATOMFLAKE_BENCH_PEERS_ONLY=1: over the first row timed).
//
// ATOMFLAKE_BENCH_PEERS_ONLY=1 skips atomflake (for a machine without the addon built);
// otherwise an addon that does not load is an error.

import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import os from 'node:os';

import { Snowflake as SapphireSnowflake } from '@sapphire/snowflake';
import FlakeId from 'flake-idgen';
import nodejsSnowflake from 'nodejs-snowflake';
import snowflakeId from 'snowflake-id';
import { decodeTime as ulidTime, monotonicFactory } from 'ulid';
import { v7 as uuidV7 } from 'uuid';

const require = createRequire(import.meta.url);
const TWITTER_EPOCH_MS = 1288834974657;
const NODE = 7;
const ROUNDS = positiveInt('ROUNDS', 7);
const TIGHT_CALLS = 200_000;
const BURSTS = 100; // per paced round
const PER_BURST = 512;
const BATCH = 100_000;
const SAMPLE = 10_000;
const TOLERANCE_MS = 20;
const PEERS_ONLY = process.env.ATOMFLAKE_BENCH_PEERS_ONLY === '1';
const now = process.hrtime.bigint;

function positiveInt(name, fallback) {
  const text = process.env[name];
  if (text === undefined || text === '') return fallback;
  const value = Number(text);
  if (!Number.isInteger(value) || value < 1) throw new Error(`${name}=${text}: expected a positive integer`);
  return value;
}

function version(pkg) {
  const url = new URL(`./node_modules/${pkg}/package.json`, import.meta.url);
  return JSON.parse(readFileSync(url, 'utf8')).version;
}

function median(values) {
  const sorted = Float64Array.from(values).sort();
  const mid = sorted.length >> 1;
  return sorted.length % 2 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
}

function cpuModel() {
  try {
    const line = readFileSync('/proc/cpuinfo', 'utf8').split('\n').find((l) => l.startsWith('model name'));
    if (line) return line.slice(line.indexOf(':') + 1).trim();
  } catch {
    // not Linux: os.cpus() below
  }
  return os.cpus()[0]?.model ?? 'unknown CPU';
}

// --- the IDs' kinds: how a loop consumes one, how the check orders them ------------------

// `consume`: an expression of `id`, a small integer xored into the loop's sink.
// `key`: the ID as something `<` orders as the generator means (bigint or string).
const KINDS = {
  bigint: { consume: 'Number(id & 255n)', key: (id) => id },
  decimal: { consume: 'id.charCodeAt(id.length - 1)', key: (id) => BigInt(id) },
  buffer: { consume: 'id[7]', key: (id) => id.readBigUInt64BE(0) },
  // uuid (lower-case hex, fixed dashes) and ULID (Crockford base32, upper case) sort as
  // strings in the order of their bits.
  sortable: { consume: 'id.charCodeAt(id.length - 1)', key: (id) => id },
  // a small number (the N-API floor's)
  smallint: { consume: 'id', key: (id) => id },
};

// A loop of its own for each row, so that its call site stays monomorphic.
function tightLoop(kind) {
  return new Function(
    'mint',
    'calls',
    'now',
    `let sink = 0;
     const started = now();
     for (let i = 0; i < calls; i++) {
       const id = mint();
       sink ^= ${KINDS[kind].consume};
     }
     const ended = now();
     return { ns: Number(ended - started) / calls, sink };`,
  );
}

function pacedLoop(kind) {
  return new Function(
    'mint',
    'bursts',
    'perBurst',
    'now',
    `let sink = 0;
     const rates = new Float64Array(bursts);
     for (let b = 0; b < bursts; b++) {
       const next = now() + 1000000n;
       const started = now();
       for (let i = 0; i < perBurst; i++) {
         const id = mint();
         sink ^= ${KINDS[kind].consume};
       }
       rates[b] = Number(now() - started) / perBurst;
       while (now() < next) {}
     }
     return { rates, sink };`,
  );
}

let sinkAll = 0; // every loop's sink ends here, printed as nothing but kept alive

// A round lasts ROUND_NS at most: a generator slower than 2.5 µs per ID gets fewer calls
// (2,000 at least) or bursts (5 at least) per round, so that one row never takes minutes.
const ROUND_NS = 500e6;
const clamp = (value, low, high) => Math.max(low, Math.min(high, Math.floor(value)));

function tight(kind, mint) {
  const loop = tightLoop(kind);
  let warm = 0;
  for (let w = 0; w < 3; w++) {
    const { ns, sink } = loop(mint, w === 0 ? 2_000 : 50_000, now); // warm-up
    sinkAll ^= sink;
    warm = ns;
    if (ns * 50_000 > 2 * ROUND_NS) break; // slow: warm enough
  }
  const calls = clamp(ROUND_NS / warm, 2_000, TIGHT_CALLS);
  const rounds = [];
  for (let r = 0; r < ROUNDS; r++) {
    const { ns, sink } = loop(mint, calls, now);
    sinkAll ^= sink;
    rounds.push(ns);
  }
  return median(rounds);
}

function paced(kind, mint) {
  const loop = pacedLoop(kind);
  let warm = 0;
  for (let w = 0; w < 2; w++) {
    const { rates, sink } = loop(mint, 20, PER_BURST, now); // warm-up
    sinkAll ^= sink;
    warm = median(rates);
  }
  const bursts = clamp(ROUND_NS / Math.max(1e6, warm * PER_BURST), 5, BURSTS);
  const rounds = [];
  for (let r = 0; r < ROUNDS; r++) {
    const { rates, sink } = loop(mint, bursts, PER_BURST, now);
    sinkAll ^= sink;
    rounds.push(median(rates));
  }
  return median(rounds);
}

// Why the generator is broken, or null: the Rust report's check (src/sanity.rs), with the
// Python report's tolerance on the last ID.
function sane(mint, kind, unixMs) {
  const ids = new Array(SAMPLE);
  for (let i = 0; i < SAMPLE; i++) ids[i] = mint();
  const wall = Date.now();
  const key = KINDS[kind].key;
  let before = key(ids[0]);
  for (let i = 1; i < SAMPLE; i++) {
    const id = key(ids[i]);
    if (id === before) return `ID ${i} of the sample repeats the one before`;
    if (id < before) return `ID ${i} of the sample is smaller than the one before`;
    before = id;
  }
  const last = unixMs(ids[SAMPLE - 1]);
  if (!(Math.abs(last - wall) <= TOLERANCE_MS)) {
    const off = last - wall;
    return `the last ID decodes to Unix ms ${last}, ${off >= 0 ? '+' : ''}${off} ms from the wall clock`;
  }
  return null;
}

// --- atomflake ------------------------------------------------------------------------------

function loadAtomflake() {
  if (PEERS_ONLY) {
    console.log('atomflake skipped (ATOMFLAKE_BENCH_PEERS_ONLY=1): the peers alone\n');
    return null;
  }
  try {
    return require('../../node');
  } catch (error) {
    throw new Error(
      `atomflake's addon did not load from node/ (${error.message.split('\n')[0]}). ` +
        'Build it: bash benches/node/run.sh, or (cd node && npm ci && npm run build -- --release). ' +
        'ATOMFLAKE_BENCH_PEERS_ONLY=1 runs the peers alone.',
      { cause: error },
    );
  }
}

const atomflake = loadAtomflake();

function wideLayout() {
  return new atomflake.Layout({ timestampBits: 41, nodeBits: 0, sequenceBits: 22, epochMs: TWITTER_EPOCH_MS, tickMs: 1 });
}

// A generator's `close()` may answer a promise (it hands its node back): waited for.
async function closeAll(generators) {
  for (const g of generators.splice(0)) await g.close?.();
}

const open = []; // atomflake generators to close after the row

function atomflakeWide() {
  const g = new atomflake.Generator(wideLayout(), { node: 0 });
  open.push(g);
  return g;
}

function atomflakeTwitter(options = {}) {
  // A process's generators on one node are one generator, with one borrowAheadMs: a row
  // that borrows ahead takes a node of its own.
  const g = new atomflake.Generator('twitter', { node: options.borrowAheadMs ? NODE + 1 : NODE, ...options });
  open.push(g);
  return g;
}

function atomflakeDecode(g) {
  return (id) => g.layout.decode(typeof id === 'string' ? BigInt(id) : id).unixMs;
}

// --- the rows -------------------------------------------------------------------------------

// name, the ID's kind, make(): { mint, unixMs }  (unixMs null: not an ID generator, not checked)
function rowsOfOne() {
  const rows = [];
  if (atomflake) {
    rows.push(
      ['atomflake nextId(), 41/0/22', 'bigint', () => {
        const g = atomflakeWide();
        return { mint: () => g.nextId(), unixMs: atomflakeDecode(g) };
      }],
      ['atomflake nextId(), twitter (41/10/12: its cap waits)', 'bigint', () => {
        const g = atomflakeTwitter();
        return { mint: () => g.nextId(), unixMs: atomflakeDecode(g) };
      }],
      ['atomflake nextIdString(), 41/0/22', 'decimal', () => {
        const g = atomflakeWide();
        return { mint: () => g.nextIdString(), unixMs: atomflakeDecode(g) };
      }],
    );
  }
  rows.push(
    // 42/5/5/12 (Discord's). Its 12-bit increment is one counter for the instance, never
    // reset: it wraps from 4,095 to 0 whatever the clock says, and the timestamp is
    // Date.now() as it is. So it never waits at a spent tick: the 4,097th ID in one ms
    // repeats the first, or lies below it; and a clock going back gives earlier IDs.
    [`@sapphire/snowflake ${version('@sapphire/snowflake')} generate() (42/5/5/12, bigint)`, 'bigint', () => {
      const g = new SapphireSnowflake(TWITTER_EPOCH_MS);
      g.workerId = 0;
      g.processId = NODE;
      return { mint: () => g.generate(), unixMs: (id) => Number(id >> 22n) + TWITTER_EPOCH_MS };
    }],
    // v2 (Rust in WASM; the class is `Snowflake`, v1's `UniqueID` is gone): 42/12/10, i.e.
    // a 12-bit instance ID and a 10-bit sequence, 1,024 IDs per ms ("1,024,000 IDs/sec").
    // At a spent tick it spins on Date.now() until the next ms (seen: 1,024 IDs per ms at
    // most, ~1 µs each in a tight loop). A clock going back is used as it is: the next ID
    // is smaller than the last (seen with Date.now() stubbed 1 s back). Unsigned bigint.
    [`nodejs-snowflake ${version('nodejs-snowflake')} getUniqueID() (42/12/10, WASM, bigint)`, 'bigint', () => {
      const g = new nodejsSnowflake.Snowflake({ custom_epoch: TWITTER_EPOCH_MS, instance_id: NODE });
      return { mint: () => g.getUniqueID(), unixMs: (id) => Number(id >> 22n) + TWITTER_EPOCH_MS };
    }],
    // 42/10/12, built as a string of binary digits, then hex, then decimal (a string). At a
    // spent tick it spins until Date.now() moves on, then mints with the old ms and
    // sequence 0: the 4,097th ID in one ms repeats the first (reached only above 4,096
    // calls per ms, which this pure-JS path does not reach here). A clock going back is
    // used as it is (sequence 0 at the earlier ms: a smaller ID). `mid` is taken mod 1,023.
    [`snowflake-id ${version('snowflake-id')} generate() (42/10/12, decimal string)`, 'decimal', () => {
      const g = new snowflakeId.default({ mid: NODE, offset: TWITTER_EPOCH_MS });
      return { mint: () => g.generate(), unixMs: (id) => Number(BigInt(id) >> 22n) + TWITTER_EPOCH_MS };
    }],
    // 42/5/5/12 (or a 10-bit id) in an 8-byte big-endian Buffer. next() without a callback
    // throws at a spent tick ("Sequence exceeded its maximum value", every call until the
    // next ms) and when the clock went back ("Clock moved backwards"); next(cb) retries on
    // a 1 ms setTimeout instead (async; its clock-back path calls `self.next`, `self`
    // undefined in Node). The synchronous caller's loop: ask again until it returns.
    [`flake-idgen ${version('flake-idgen')} next() (42/10/12, Buffer; asked until no throw)`, 'buffer', () => {
      const g = new FlakeId({ id: NODE, epoch: TWITTER_EPOCH_MS });
      const mint = () => {
        for (;;) {
          try {
            return g.next();
          } catch {
            // a spent tick or the clock back: ask again
          }
        }
      };
      return { mint, unixMs: (id) => Number(id.readBigUInt64BE(0) >> 22n) + TWITTER_EPOCH_MS };
    }],
    // 128 bits: 48-bit Unix ms, version, a 32-bit counter seeded at random each new ms,
    // random bits; a string. Never waits: when the counter wraps within a ms it moves its
    // ms on by one (runs ahead of the clock); a clock going back keeps its last ms and
    // counts on (monotonic in the process; state is module-wide).
    [`uuid ${version('uuid')} v7() (128-bit, string)`, 'sortable', () => ({
      mint: () => uuidV7(),
      unixMs: (id) => parseInt(id.slice(0, 8) + id.slice(9, 13), 16),
    })],
    // 128 bits: 48-bit Unix ms (10 Crockford base32 chars), 80 random bits (16 chars, one
    // crypto.getRandomValues call of 1 byte each) drawn at each new ms and incremented as
    // a base32 string within it; a string. Never waits; a clock going back keeps its last
    // ms and increments; it throws only if the 80 bits overflow.
    [`ulid ${version('ulid')} monotonicFactory()() (128-bit, string)`, 'sortable', () => {
      const ulid = monotonicFactory();
      return { mint: () => ulid(), unixMs: (id) => ulidTime(id) };
    }],
    // What the loop costs around any call: V8 inlines this function, so the row is the
    // loop and its sink alone.
    ['floor: a JS function returning a cached bigint (inlined)', 'bigint', () => {
      const cached = 0x1234_5678_9abc_def0n;
      return { mint: () => cached, unixMs: null };
    }],
    // A call into C++ (a V8 fast API call to hrtime, then a BigInt made from its result).
    ['floor: process.hrtime.bigint() (a native call, a new bigint)', 'bigint', () => ({
      mint: () => process.hrtime.bigint(),
      unixMs: null,
    })],
  );
  return rows;
}

function batchRows() {
  if (!atomflake) return [];
  return [
    ['atomflake nextIds(100,000), 41/0/22', () => atomflakeWide()],
    ['atomflake nextIds(100,000), twitter, borrowAheadMs 1000', () => atomflakeTwitter({ borrowAheadMs: 1000 })],
    ['atomflake fillIds(a BigUint64Array of 100,000 used again), 41/0/22', () => refilling(atomflakeWide())],
  ];
}

// A generator whose nextIds fills one buffer again and again: the batch without allocation.
const reused = new BigUint64Array(BATCH);
function refilling(g) {
  return { nextIds: () => g.fillIds(reused) };
}

async function batch(make) {
  const timed = async () => {
    const g = make(); // the node's generator: see the batch rows' comment at the top
    const started = now();
    const ids = g.nextIds(BATCH);
    const ns = Number(now() - started) / BATCH;
    await closeAll(open);
    return { ns, ids };
  };
  // Warm-up, and a look at what came back: BATCH IDs, strictly increasing.
  const { ids } = await timed();
  if (ids.length !== BATCH) return { broken: `${ids.length} IDs, not ${BATCH}` };
  for (let i = 1; i < ids.length; i++) {
    if (ids[i] <= ids[i - 1]) return { broken: `ID ${i} of the batch is not above the one before` };
  }
  const rounds = [];
  for (let r = 0; r < ROUNDS; r++) rounds.push((await timed()).ns);
  return { ns: median(rounds) };
}

// --- the report -----------------------------------------------------------------------------

const fmt = (value, width, digits) => value.toFixed(digits).padStart(width);
const NAME = 66;

async function main() {
  const cores = os.availableParallelism?.() ?? os.cpus().length;
  console.log(
    `Node ${process.version} (V8 ${process.versions.v8}), ${cpuModel()}, ${cores} cores; ` +
      `ns per ID, median of ${ROUNDS} rounds; ratio = row / ${atomflake ? "atomflake's first row" : 'the first row timed'}\n`,
  );
  console.log(`${'generator'.padEnd(NAME)} ${'tight'.padStart(9)} ${'ratio'.padStart(6)} ${'paced'.padStart(9)} ${'ratio'.padStart(6)}`);
  let base = null;
  for (const [name, kind, make] of rowsOfOne()) {
    const checked = make();
    const broken = checked.unixMs && sane(checked.mint, kind, checked.unixMs);
    await closeAll(open);
    // A broken peer is timed too (its speed is what people choose it for), and flagged.
    const shown = broken ? `${name} [BROKEN]` : name;
    if (broken) console.log(`${shown.padEnd(NAME)} BROKEN: ${broken}; its times:`);
    const timedTight = tight(kind, make().mint);
    await closeAll(open);
    const timedPaced = paced(kind, make().mint);
    await closeAll(open);
    base ??= [timedTight, timedPaced];
    console.log(
      `${shown.padEnd(NAME)} ${fmt(timedTight, 9, 1)} ${fmt(timedTight / base[0], 6, 2)} ` +
        `${fmt(timedPaced, 9, 1)} ${fmt(timedPaced / base[1], 6, 2)}`,
    );
  }
  const batches = batchRows();
  if (batches.length) {
    console.log(`\n${'batch of 100,000, one call a round'.padEnd(NAME)} ${'ns/ID'.padStart(9)} ${'ratio'.padStart(6)}`);
    let first = null;
    for (const [name, make] of batches) {
      const { ns, broken } = await batch(make);
      if (broken) {
        console.log(`${name.padEnd(NAME)} BROKEN, not timed: ${broken}`);
        continue;
      }
      first ??= ns;
      console.log(`${name.padEnd(NAME)} ${fmt(ns, 9, 1)} ${fmt(ns / first, 6, 2)}`);
    }
  }
  if (sinkAll === 0.5) console.log(''); // never: keeps every sink observable
}

await main();
