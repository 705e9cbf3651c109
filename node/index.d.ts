// The declarations of the `atomflake` package (index.js, index.mjs).

/** The fields of an ID. */
export interface Parts {
  /** The Unix time of the ID's tick, in ms. */
  unixMs: number;
  /** The node that minted it. */
  node: number;
  /** Its place in its tick. */
  sequence: number;
  /** `unixMs` as a Date. */
  date: Date;
}

/** An ID as a bigint, decimal text or a safe integer. */
export type IdLike = bigint | string | number;

/** The fields of a custom layout: widths in bits, the epoch in Unix ms, the tick in ms. */
export interface LayoutFields {
  timestampBits: number;
  nodeBits: number;
  sequenceBits: number;
  epochMs: number;
  /** 1 unless given. */
  tickMs?: number;
}

/** The names of the presets. */
export type PresetName = 'twitter' | 'discord' | 'instagram' | 'sonyflake' | 'mastodon' | 'javascript';

/** How bits of an ID are spent: timestamp, node and sequence widths, the epoch and the tick. */
export declare class Layout {
  /** A custom layout, checked: the widths fit 64 bits, with a timestamp; the tick is at least 1 ms. */
  constructor(fields: LayoutFields);
  /** The preset of that name; a RangeError lists the presets for another. */
  static preset(name: PresetName | string): Layout;
  /** Twitter's: 41/10/12, epoch 1288834974657 (2010-11-04). */
  static readonly TWITTER: Layout;
  /** Discord's: 42/10/12, epoch 1420070400000 (2015); the node is worker (5 bits) | process (5). */
  static readonly DISCORD: Layout;
  /** Instagram's: 41/13/10, epoch 1314220021721. */
  static readonly INSTAGRAM: Layout;
  /** Sonyflake's: 39 bits of 10 ms ticks, 16-bit machine, 8-bit sequence, epoch 2014-09-01. */
  static readonly SONYFLAKE: Layout;
  /** Mastodon's: 48 bits of ms since 1970, 16 bits of sequence. */
  static readonly MASTODON: Layout;
  /** 53-bit IDs, exact as JavaScript numbers: 38/7/8 with 10 ms ticks. */
  static readonly JAVASCRIPT: Layout;
  /** The preset's name, if the layout is one. */
  readonly name: PresetName | undefined;
  readonly timestampBits: number;
  readonly nodeBits: number;
  readonly sequenceBits: number;
  readonly epochMs: number;
  readonly tickMs: number;
  readonly maxNode: number;
  readonly idsPerTick: bigint;
  readonly maxId: bigint;
  /** Whether every ID of the layout is exactly a JavaScript number (at most 53 bits). */
  readonly fitsJsNumber: boolean;
  /** The fields of `id`. */
  decode(id: IdLike): Parts;
  /** The ID of these fields (the time as `unixMs` or `date`), each checked against the layout. */
  encode(parts: { unixMs?: number; date?: Date; node?: number; sequence?: number }): bigint;
  /** The first ID of the tick of `when`: for queries by time (`id >= firstIdAt(t)`). */
  firstIdAt(when: Date | number): bigint;
  /** The last ID of the tick of `when`. */
  lastIdAt(when: Date | number): bigint;
  /**
   * The ID as the text of a UUID of version 7 (RFC 9562, lowercase): its tick's start as the
   * UUID's time, then the whole ID and the layout's fingerprint. The UUIDs sort as the IDs
   * do, and `fromUuid` gives the ID back.
   */
  toUuid(id: IdLike): string;
  /** The ID that a UUID's text from `toUuid` holds (32 hex digits, either case, with or without hyphens, braces or urn:uuid:); a RangeError names why any other is not. */
  fromUuid(text: string): bigint;
  equals(other: unknown): boolean;
  toString(): string;
}

/** The options of a Generator. */
export interface GeneratorOptions {
  /** The node it mints on: 0..=layout.maxNode. */
  node: number;
  /** A file that keeps the mark of minted time, so that a restart with the clock behind
   * never repeats an ID. */
  highWater?: string;
  /** How far (ms, at most 60000) a burst may mint into ticks ahead of the clock. 0 unless given. */
  borrowAheadMs?: number;
  /** How long an async call waits for IDs (a spent tick, a mark being stored, a lease being
   * renewed) before it rejects with the MintError: ms, 10000 unless given. */
  patienceMs?: number;
}

/** A Snowflake ID generator on one node. Every Generator on the same node of the same layout
 * in one process (in any worker thread) mints from one generator: no ID twice. */
export declare class Generator {
  constructor(layout: Layout | PresetName, options: GeneratorOptions);
  /** The next ID. Waits out a spent tick and no more; else throws a MintError. */
  nextId(): bigint;
  /** The next ID as decimal text, as JSON APIs send IDs. */
  nextIdString(): string;
  /** The next ID as a number: only on layouts of at most 53 bits (Layout.JAVASCRIPT). */
  nextIdNumber(): number;
  /** The next ID now, or a MintError at once (a spent tick: transient, with retryAfter). */
  tryNextId(): bigint;
  /** `n` IDs in increasing order: the fastest way to take many. */
  nextIds(n: number): BigUint64Array;
  /** Fills `ids` with IDs in increasing order and returns it: a batch with no allocation. */
  fillIds(ids: BigUint64Array): BigUint64Array;
  /** The next ID, never blocking the event loop: waits with timers, for at most patienceMs. */
  nextIdAsync(): Promise<bigint>;
  /** `n` IDs in increasing order, never blocking the event loop. */
  nextIdsAsync(n: number): Promise<BigUint64Array>;
  readonly node: number;
  readonly layout: Layout;
  /** Whether close() was called. */
  readonly closed: boolean;
  /** Stops minting with this generator; the last one open on its node, with a high-water
   * file or a lease, stores the mark that covers exactly the IDs minted and releases them,
   * off the event loop. */
  close(): Promise<void>;
  [Symbol.asyncDispose](): Promise<void>;
}

/** The options of lease(). */
export interface LeaseOptions {
  /** The lease namespace: 1..=63 bytes of ASCII letters, digits, '-', '_' and '.'. "atomflake" unless given. */
  namespace?: string;
  /** The lease time in whole seconds (1..=3600), 10 unless given. */
  ttl?: number;
  /** Twitter's unless given. */
  layout?: Layout | PresetName;
  /** A node to claim; any free one unless given. */
  node?: number;
  borrowAheadMs?: number;
  /** As for a Generator; the lease time unless given. */
  patienceMs?: number;
}

/** Leases a node from PostgreSQL, etcd (`etcd://`, `etcds://`), Redis (`redis://`,
 * `rediss://`) or ZooKeeper (`zk://`), chosen by the URL (else a PostgreSQL URL or
 * `key=value` settings), off the event loop; resolves to a generator on the leased node. */
export declare function lease(url: string, options?: LeaseOptions): Promise<Generator>;

/** An ID as 13 characters of Crockford base32, which sort as the IDs do. */
export declare function toBase32(id: IdLike): string;
/** The ID of 13 characters of base32. */
export declare function fromBase32(text: string): bigint;
/** An ID as 11 characters of base62 (0-9A-Za-z, in ASCII order), which sort as the IDs do. */
export declare function toBase62(id: IdLike): string;
/** The ID of 11 characters of base62. */
export declare function fromBase62(text: string): bigint;
/** The ID of decimal text. */
export declare function parseId(text: string): bigint;

/** The most IDs one nextIds call returns. */
export declare const MAX_BATCH: number;

/**
 * A keyed permutation of the IDs (Speck64/128): `unmask(mask(id)) === id`, and an ID below
 * 2^63 masks to one below 2^63. The key is never shown.
 */
export declare class Mask {
  /** A mask with a 16-byte key. */
  constructor(key: Uint8Array);
  /** A mask with the key in a file of 16 raw bytes or 32 hex digits, readable by its owner alone. */
  static fromKeyFile(path: string): Mask;
  /** The masked ID of `id`. */
  mask(id: IdLike): bigint;
  /** The ID whose masked ID is `masked`. */
  unmask(masked: IdLike): bigint;
  toString(): string;
}

/** The base of every atomflake error but bad input (TypeError, RangeError). */
export declare class AtomflakeError extends Error {
  /** Whether trying again may succeed. */
  readonly transient: boolean;
  /** Ms until it may, when that is known. */
  readonly retryAfter: number | undefined;
}
/** No ID can be minted now. */
export declare class MintError extends AtomflakeError {}
/** The generator was closed: its mark is stored and its lease, if any, released. */
export declare class ClosedError extends MintError {}
/** A generator cannot start: its high-water file or mark store refuses. */
export declare class StartError extends AtomflakeError {}
/** No node could be leased: none is free, or the engine is out of reach or refuses. */
export declare class LeaseError extends AtomflakeError {}

declare const atomflake: {
  Generator: typeof Generator;
  Layout: typeof Layout;
  lease: typeof lease;
  toBase32: typeof toBase32;
  fromBase32: typeof fromBase32;
  toBase62: typeof toBase62;
  fromBase62: typeof fromBase62;
  parseId: typeof parseId;
  Mask: typeof Mask;
  AtomflakeError: typeof AtomflakeError;
  MintError: typeof MintError;
  ClosedError: typeof ClosedError;
  StartError: typeof StartError;
  LeaseError: typeof LeaseError;
  MAX_BATCH: number;
};
export default atomflake;
