'use strict';
// atomflake for Node.js: the package's API over the native addon (Rust, built with
// napi-rs). The addon mints; this file checks argument types, throws the package's error
// classes and runs the async calls, which wait with timers and hold nothing while they do.

const { setTimeout: sleep } = require('node:timers/promises');
const { inspect } = require('node:util');

const native = loadNative();

function loadNative() {
  const platform = `${process.platform}-${process.arch}`;
  if (platform !== 'linux-x64') {
    throw new Error(
      `atomflake has no native addon for ${platform}: this package holds one for linux-x64 (glibc 2.17 or later)`,
    );
  }
  return require('./atomflake.linux-x64-gnu.node');
}

/** The base of every atomflake error but bad input (TypeError, RangeError). */
class AtomflakeError extends Error {
  constructor(message, { transient = false, retryAfter = undefined } = {}) {
    super(message);
    /** Whether trying again may succeed. */
    this.transient = transient;
    /** Ms until it may, when that is known. */
    this.retryAfter = retryAfter;
  }

  get name() {
    return this.constructor.name;
  }
}

/** No ID can be minted now: `transient` says whether this generator can mint again. */
class MintError extends AtomflakeError {}
/** The generator was closed: its mark is stored and its lease, if any, released. */
class ClosedError extends MintError {}
/** A generator cannot start: its high-water file or mark store refuses, or its clock is
 * too far behind the stored mark. */
class StartError extends AtomflakeError {}
/** No node could be leased: none is free, or the engine is out of reach or refuses. */
class LeaseError extends AtomflakeError {}

const CLASSES = { AtomflakeError, MintError, ClosedError, StartError, LeaseError, RangeError, TypeError };
const SEPARATOR = '\u001f';

/** The addon's error as the package's class (src/errors.rs says how it is written). */
function translated(error) {
  const message = error instanceof Error ? error.message : undefined;
  if (typeof message !== 'string' || !message.startsWith(`atomflake${SEPARATOR}`)) {
    return error;
  }
  const [, name, transient, retryAfter, ...text] = message.split(SEPARATOR);
  const Class = CLASSES[name];
  const plain = text.join(SEPARATOR);
  if (Class === RangeError || Class === TypeError) {
    return new Class(plain);
  }
  return new Class(plain, {
    transient: transient === '1',
    retryAfter: retryAfter === '' ? undefined : Number(retryAfter),
  });
}

/** `call()`, its error translated. */
function checked(call) {
  try {
    return call();
  } catch (error) {
    throw translated(error);
  }
}

function describe(value) {
  if (value === null) return 'null';
  if (typeof value === 'object') return value.constructor?.name ?? 'object';
  return typeof value;
}

function mustBe(type, value, what) {
  if (typeof value !== type) {
    throw new TypeError(`${what} must be a ${type}, not ${describe(value)}`);
  }
  return value;
}

function options(given, allowed, what) {
  if (given === undefined) return {};
  if (given === null || typeof given !== 'object' || Array.isArray(given)) {
    throw new TypeError(`${what} must be an object, not ${describe(given)}`);
  }
  for (const key of Object.keys(given)) {
    if (!allowed.includes(key)) {
      throw new TypeError(`unknown option ${JSON.stringify(key)} of ${what}: the options are ${allowed.join(', ')}`);
    }
  }
  return given;
}

const MAX_ID = 0xffff_ffff_ffff_ffffn;

/** An ID given as a bigint, decimal text or a safe integer, as a bigint in 0..=2^64-1. */
function idOf(value, what = 'id') {
  let id;
  if (typeof value === 'bigint') {
    id = value;
  } else if (typeof value === 'number' && Number.isSafeInteger(value)) {
    id = BigInt(value);
  } else if (typeof value === 'string') {
    return checked(() => native.parseId(value));
  } else {
    throw new TypeError(`${what} must be a bigint, decimal text or a safe integer, not ${describe(value)} ${String(value)}`);
  }
  if (id < 0n || id > MAX_ID) {
    throw new RangeError(`${what} ${id} is out of range: an id is 0..=${MAX_ID}`);
  }
  return id;
}

/** Unix ms from a `Date` or a number. */
function unixMsOf(when, what) {
  if (when instanceof Date) {
    const ms = when.getTime();
    if (Number.isNaN(ms)) throw new RangeError(`${what} is an invalid Date`);
    return ms;
  }
  return mustBe('number', when, what);
}

const NATIVE = Symbol('atomflake.native');
const FIELDS = ['timestampBits', 'nodeBits', 'sequenceBits', 'epochMs', 'tickMs'];

/** How bits of an ID are spent: timestamp, node and sequence widths, the epoch and the tick. */
class Layout {
  constructor(fields) {
    if (fields instanceof native.NativeLayout) {
      this[NATIVE] = fields;
      return;
    }
    const given = options(fields, FIELDS, 'a Layout');
    const values = FIELDS.map((field) => {
      const value = given[field] ?? (field === 'tickMs' ? 1 : undefined);
      if (value === undefined) {
        throw new TypeError(`a Layout needs ${field}: a Layout is { ${FIELDS.join(', ')} (1 unless given) }`);
      }
      return mustBe('number', value, field);
    });
    this[NATIVE] = checked(() => new native.NativeLayout(...values));
  }

  /** The preset of that name: twitter, discord, instagram, sonyflake, mastodon, javascript. */
  static preset(name) {
    mustBe('string', name, 'a preset name');
    return new Layout(checked(() => native.NativeLayout.preset(name)));
  }

  get name() { return this[NATIVE].name ?? undefined; }
  get timestampBits() { return this[NATIVE].timestampBits; }
  get nodeBits() { return this[NATIVE].nodeBits; }
  get sequenceBits() { return this[NATIVE].sequenceBits; }
  get epochMs() { return checked(() => this[NATIVE].epochMs); }
  get tickMs() { return checked(() => this[NATIVE].tickMs); }
  get maxNode() { return checked(() => this[NATIVE].maxNode); }
  get idsPerTick() { return BigInt(this[NATIVE].idsPerTick); }
  get maxId() { return BigInt(this[NATIVE].maxId); }
  /** Whether every ID of the layout is exactly a JavaScript number (at most 53 bits). */
  get fitsJsNumber() { return this[NATIVE].fitsJsNumber; }

  /** The fields of `id`: `{ unixMs, node, sequence, date }`. */
  decode(id) {
    const parts = checked(() => this[NATIVE].decode(idOf(id)));
    return { unixMs: parts.unixMs, node: parts.node, sequence: parts.sequence, date: new Date(parts.unixMs) };
  }

  /** The ID of `{ unixMs (or date), node, sequence }`, each checked against the layout. */
  encode(parts) {
    const given = options(parts, ['unixMs', 'date', 'node', 'sequence'], 'the parts');
    const unixMs = unixMsOf(given.unixMs ?? given.date, 'unixMs');
    const node = mustBe('number', given.node ?? 0, 'node');
    const sequence = mustBe('number', given.sequence ?? 0, 'sequence');
    return checked(() => this[NATIVE].encode(unixMs, node, sequence));
  }

  /** The first ID of the tick of `when` (a Date or Unix ms): `id >= firstIdAt(t)`. */
  firstIdAt(when) {
    const ms = unixMsOf(when, 'when');
    return checked(() => this[NATIVE].firstIdAt(ms));
  }

  /** The last ID of the tick of `when` (a Date or Unix ms). */
  lastIdAt(when) {
    const ms = unixMsOf(when, 'when');
    return checked(() => this[NATIVE].lastIdAt(ms));
  }

  /**
   * The ID as the text of a UUID of version 7 (RFC 9562, lowercase): its tick's start as the
   * UUID's time, then the whole ID and the layout's fingerprint. The UUIDs sort as the IDs
   * do, and `fromUuid` gives the ID back.
   */
  toUuid(id) {
    const value = idOf(id);
    return checked(() => this[NATIVE].toUuid(value));
  }

  /** The ID that a UUID's text from `toUuid` holds: 32 hex digits, either case, with or without hyphens, braces or urn:uuid:. */
  fromUuid(text) {
    mustBe('string', text, 'a uuid');
    return checked(() => this[NATIVE].fromUuid(text));
  }

  equals(other) {
    return other instanceof Layout && this[NATIVE].equals(other[NATIVE]);
  }

  toString() {
    return this[NATIVE].describe();
  }

  [inspect.custom]() {
    return this.toString();
  }
}

for (const name of native.NativeLayout.presets()) {
  Object.defineProperty(Layout, name.toUpperCase(), {
    value: Layout.preset(name),
    enumerable: true,
  });
}

function layoutOf(layout) {
  if (layout instanceof Layout) return layout;
  if (typeof layout === 'string') return Layout.preset(layout);
  throw new TypeError(`layout must be a preset's name or a Layout, not ${describe(layout)}`);
}

const { maxBatch: MAX_BATCH, maxPatienceMs: MAX_PATIENCE_MS } = native.limits();

function patienceOf(value) {
  mustBe('number', value, 'patienceMs');
  if (!(value >= 0 && value <= MAX_PATIENCE_MS)) {
    throw new RangeError(`patienceMs ${value} ms is out of range: 0..=${MAX_PATIENCE_MS} ms`);
  }
  return value;
}

/** A batch's size, checked. */
function batchOf(n) {
  mustBe('number', n, 'n');
  if (!(Number.isInteger(n) && n >= 0 && n <= MAX_BATCH)) {
    throw new RangeError(`n ${n} is out of range: one call returns 0..=${MAX_BATCH} ids`);
  }
  return n;
}

const GENERATOR_OPTIONS = ['node', 'highWater', 'borrowAheadMs', 'patienceMs'];

/**
 * A Snowflake ID generator on one node. Every `Generator` on the same node of the same
 * layout in one process (in any worker thread) mints from one Rust generator: no ID twice.
 */
class Generator {
  #native;
  #patience;
  #layout;

  constructor(layout = 'twitter', settings = undefined) {
    if (layout === NATIVE) {
      this.#native = settings.native;
      this.#patience = settings.patience;
      return;
    }
    const chosen = layoutOf(layout);
    const given = options(settings, GENERATOR_OPTIONS, 'the options of a Generator');
    if (given.node === undefined) {
      throw new TypeError(
        `a Generator needs its node: { node: 0..=${chosen.maxNode} } for ${chosen} (or lease() for a leased one)`,
      );
    }
    const node = mustBe('number', given.node, 'node');
    const highWater = given.highWater === undefined ? undefined : mustBe('string', given.highWater, 'highWater');
    const lead = mustBe('number', given.borrowAheadMs ?? 0, 'borrowAheadMs');
    this.#patience = patienceOf(given.patienceMs ?? 10_000);
    this.#native = checked(() => native.openGenerator(chosen[NATIVE], node, highWater, lead));
  }

  /** The next ID, a bigint. Waits out a spent tick and no more; else throws a MintError. */
  nextId() {
    try {
      return native.nextId(this.#native);
    } catch (error) {
      throw translated(error);
    }
  }

  /** The next ID as decimal text, as JSON APIs send IDs. */
  nextIdString() {
    try {
      return native.nextIdString(this.#native);
    } catch (error) {
      throw translated(error);
    }
  }

  /** The next ID as a number: on layouts of at most 53 bits (Layout.JAVASCRIPT) alone. */
  nextIdNumber() {
    try {
      return native.nextIdNumber(this.#native);
    } catch (error) {
      throw translated(error);
    }
  }

  /** The next ID now, or a MintError at once (a spent tick: transient, with retryAfter). */
  tryNextId() {
    try {
      return native.tryNextId(this.#native);
    } catch (error) {
      throw translated(error);
    }
  }

  /** `n` IDs in increasing order, as a BigUint64Array: the fastest way to take many. */
  nextIds(n) {
    const ids = new BigUint64Array(batchOf(n));
    checked(() => native.nextIdsInto(this.#native, ids));
    return ids;
  }

  /** Fills `ids`, a BigUint64Array of at most MAX_BATCH, with IDs in increasing order and
   * returns it: a batch with no allocation, for a buffer used again. */
  fillIds(ids) {
    if (!(ids instanceof BigUint64Array)) {
      throw new TypeError(`ids must be a BigUint64Array, not ${describe(ids)}`);
    }
    batchOf(ids.length);
    checked(() => native.nextIdsInto(this.#native, ids));
    return ids;
  }

  /** The next ID, never blocking the event loop: a spent tick is waited out with a timer,
   * for at most `patienceMs`. */
  nextIdAsync() {
    try {
      return Promise.resolve(native.tryNextId(this.#native));
    } catch (error) {
      return this.#waited(error, () => native.tryNextId(this.#native));
    }
  }

  /** `n` IDs in increasing order, as a BigUint64Array, never blocking the event loop. */
  async nextIdsAsync(n) {
    const ids = new BigUint64Array(batchOf(n));
    let filled = 0;
    while (filled < n) {
      const run = await this.#waited(undefined, () => native.tryNextRun(this.#native, n - filled));
      ids.set(run, filled);
      filled += run.length;
    }
    return ids;
  }

  /** `attempt()`, after `refused` (its first refusal, if it was made), retried after each
   * transient refusal's retryAfter, for at most the patience. */
  async #waited(refused, attempt) {
    const deadline = performance.now() + this.#patience;
    let error = refused;
    for (;;) {
      if (error !== undefined) {
        const thrown = translated(error);
        if (!(thrown instanceof MintError) || !thrown.transient) throw thrown;
        const wait = Math.max(thrown.retryAfter ?? 1, 1);
        if (performance.now() + wait > deadline) throw thrown;
        await sleep(wait);
      }
      try {
        return attempt();
      } catch (next) {
        error = next;
      }
    }
  }

  /** The node this generator mints on. */
  get node() {
    return checked(() => native.generatorNode(this.#native));
  }

  /** The generator's layout. */
  get layout() {
    this.#layout ??= new Layout(native.generatorLayout(this.#native));
    return this.#layout;
  }

  /** Whether `close()` was called. */
  get closed() {
    return native.generatorClosed(this.#native);
  }

  /** Stops minting with this generator. The last one open on its node, with a high-water
   * file or a lease, stores the mark that covers exactly the IDs minted and releases them,
   * off the event loop; the promise resolves when that is done. (One with neither stays in
   * the process: a Generator built on its node again goes on from it.) A second close
   * does nothing. */
  close() {
    return native.closeGenerator(this.#native);
  }

  async [Symbol.asyncDispose ?? Symbol.for('nodejs.asyncDispose')]() {
    await this.close();
  }

  toString() {
    return `Generator { layout: ${this.layout}, node: ${this.node}${this.closed ? ', closed' : ''} }`;
  }

  [inspect.custom]() {
    return this.toString();
  }
}

const LEASE_OPTIONS = ['namespace', 'ttl', 'layout', 'node', 'borrowAheadMs', 'patienceMs'];

/**
 * Leases a node from PostgreSQL, etcd, Redis or ZooKeeper, chosen by the URL's scheme
 * (`etcd://`/`etcds://`, `redis://`/`rediss://`, `zk://`, else a PostgreSQL URL or
 * `key=value` settings), off the event loop; resolves to a generator on the leased node.
 * `ttl` is in seconds; `close()` stores the exact mark and frees the node.
 */
async function lease(url, settings = undefined) {
  mustBe('string', url, 'url');
  const given = options(settings, LEASE_OPTIONS, 'the options of lease()');
  const namespace = mustBe('string', given.namespace ?? 'atomflake', 'namespace');
  const ttl = mustBe('number', given.ttl ?? 10, 'ttl');
  const layout = layoutOf(given.layout ?? 'twitter');
  const node = given.node === undefined ? undefined : mustBe('number', given.node, 'node');
  const lead = mustBe('number', given.borrowAheadMs ?? 0, 'borrowAheadMs');
  // The lease time unless given (the addon checks `ttl` itself, and names it).
  const patience = patienceOf(given.patienceMs ?? (ttl > 0 ? Math.min(ttl * 1000, MAX_PATIENCE_MS) : 0));
  const task = checked(() => native.lease(url, namespace, ttl, layout[NATIVE], node, lead));
  let leased;
  try {
    leased = await task;
  } catch (error) {
    throw translated(error);
  }
  return new Generator(NATIVE, { native: leased, patience });
}

/** An ID as 13 characters of Crockford base32, which sort as the IDs do. */
function toBase32(id) {
  const value = idOf(id);
  return checked(() => native.toBase32(value));
}

/** The ID of 13 characters of base32. */
function fromBase32(text) {
  mustBe('string', text, 'text');
  return checked(() => native.fromBase32(text));
}

/** An ID as 11 characters of base62 (0-9A-Za-z, in ASCII order), which sort as the IDs do. */
function toBase62(id) {
  const value = idOf(id);
  return checked(() => native.toBase62(value));
}

/** The ID of 11 characters of base62. */
function fromBase62(text) {
  mustBe('string', text, 'text');
  return checked(() => native.fromBase62(text));
}

/** The ID of decimal text. */
function parseId(text) {
  mustBe('string', text, 'text');
  return checked(() => native.parseId(text));
}

/**
 * A keyed permutation of the IDs (Speck64/128, cycle-walked within each half of the 64-bit
 * numbers): `unmask(mask(id)) === id`, and an ID below 2^63 masks to one below 2^63. The
 * key is never shown.
 */
class Mask {
  /** A mask with a 16-byte key (a Uint8Array or Buffer). */
  constructor(key) {
    if (key instanceof native.NativeMask) {
      this[NATIVE] = key;
      return;
    }
    if (!(key instanceof Uint8Array)) {
      throw new TypeError(`a mask key must be a Uint8Array of 16 bytes, not ${describe(key)}`);
    }
    this[NATIVE] = checked(() => new native.NativeMask(key));
  }

  /** A mask with the key in a file of 16 raw bytes or 32 hex digits, readable by its owner alone. */
  static fromKeyFile(path) {
    mustBe('string', path, 'a key file path');
    return new Mask(checked(() => native.NativeMask.fromKeyFile(path)));
  }

  /** The masked ID of `id`. */
  mask(id) {
    const value = idOf(id);
    return checked(() => this[NATIVE].mask(value));
  }

  /** The ID whose masked ID is `masked`. */
  unmask(masked) {
    const value = idOf(masked, 'masked id');
    return checked(() => this[NATIVE].unmask(value));
  }

  toString() {
    return 'Mask(...)';
  }

  [inspect.custom]() {
    return this.toString();
  }
}

module.exports = {
  Generator,
  Layout,
  lease,
  toBase32,
  fromBase32,
  toBase62,
  fromBase62,
  parseId,
  Mask,
  AtomflakeError,
  MintError,
  ClosedError,
  StartError,
  LeaseError,
  MAX_BATCH,
};
