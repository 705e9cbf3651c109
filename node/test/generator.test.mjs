// The generator: order, the waits of the sync and async calls, closing, sharing between
// worker threads, and every bad argument.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Worker } from 'node:worker_threads';
import { Generator, Layout, MintError, ClosedError, AtomflakeError, MAX_BATCH } from '../index.mjs';
import { increasing, PACKAGE } from './helpers.mjs';

// One ID per 50 ms tick: every mint after the first in a tick is refused or waits.
const SLOW = new Layout({ timestampBits: 53, nodeBits: 10, sequenceBits: 0, epochMs: 1288834974657, tickMs: 50 });

test('IDs increase and decode to the node and the time of minting', () => {
  const generator = new Generator('twitter', { node: 7 });
  const before = Date.now();
  const ids = Array.from({ length: 10_000 }, () => generator.nextId());
  const after = Date.now();
  assert.ok(increasing(ids));
  for (const id of [ids[0], ids.at(-1)]) {
    const parts = Layout.TWITTER.decode(id);
    assert.equal(parts.node, 7);
    // The generator's clock is disciplined to the wall clock (it slews, never steps), so
    // it may differ from Date.now() by a few ms; 50 ms leaves room for a busy machine.
    assert.ok(before - 50 <= parts.unixMs && parts.unixMs <= after + 50, `${parts.unixMs} not in ${before}..${after}`);
  }
});

test("a tight loop past Twitter's 4,096 IDs per ms waits for each spent tick, never throwing", () => {
  const generator = new Generator('twitter', { node: 8 });
  const started = Date.now();
  const ids = new BigUint64Array(200_000);
  for (let i = 0; i < ids.length; i++) ids[i] = generator.nextId();
  // 200,000 IDs take 49 ticks at least: the calls waited.
  assert.ok(Date.now() - started >= 48);
  assert.ok(increasing(ids));
});

test('strings, batches and single IDs continue one sequence', () => {
  const generator = new Generator(Layout.DISCORD, { node: 31 });
  const first = generator.nextId();
  const text = generator.nextIdString();
  const batch = generator.nextIds(10_000);
  assert.ok(batch instanceof BigUint64Array && batch.length === 10_000);
  const together = [first, BigInt(text), ...batch, generator.nextId()];
  assert.ok(increasing(together));
  assert.match(text, /^[1-9][0-9]*$/);
  assert.equal(generator.nextIds(0).length, 0);
  // A buffer filled again and again goes on with the sequence.
  const buffer = new BigUint64Array(5000);
  const refilled = [...generator.fillIds(buffer)];
  assert.ok(generator.fillIds(buffer) === buffer && increasing([together.at(-1), ...refilled, ...buffer]));
  assert.throws(() => generator.fillIds(new BigInt64Array(5)), { name: 'TypeError', message: 'ids must be a BigUint64Array, not BigInt64Array' });
});

test('tryNextId() refuses a spent tick at once with a transient MintError and the ms to wait', () => {
  const generator = new Generator(SLOW, { node: 1 });
  generator.nextId();
  assert.throws(() => generator.tryNextId(), (error) => {
    assert.ok(error instanceof MintError && error instanceof AtomflakeError && error instanceof Error);
    assert.equal(error.name, 'MintError');
    assert.equal(error.transient, true);
    assert.ok(error.retryAfter > 0 && error.retryAfter <= 50, String(error.retryAfter));
    assert.match(error.message, /tick/);
    return true;
  });
});

test('a sync call waits a spent tick out (at most one tick) and the async calls wait with timers', async () => {
  const generator = new Generator(SLOW, { node: 2 });
  const first = generator.nextId();
  const second = generator.nextId();
  assert.equal(Layout.prototype.decode.call(SLOW, second).unixMs - SLOW.decode(first).unixMs, 50);
  // While the async calls wait, the event loop runs: a timer of 10 ms fires many times.
  let ticks = 0;
  const timer = setInterval(() => ticks++, 10);
  const ids = [];
  for (let i = 0; i < 4; i++) ids.push(await generator.nextIdAsync());
  const batch = await generator.nextIdsAsync(3);
  clearInterval(timer);
  assert.ok(increasing([second, ...ids, ...batch]));
  assert.ok(ticks >= 15, `the event loop ran ${ticks} timers in about 350 ms`);
});

test('nextIdsAsync mints a tick at a time into one array', async () => {
  const generator = new Generator('twitter', { node: 9 });
  const ids = await generator.nextIdsAsync(100_000);
  assert.equal(ids.length, 100_000);
  assert.ok(increasing(ids));
  assert.ok(ids[0] < (await generator.nextIdAsync()));
});

test('an async call gives up after its patience with the last transient refusal', async () => {
  const generator = new Generator(SLOW, { node: 3, patienceMs: 0 });
  generator.nextId();
  await assert.rejects(generator.nextIdAsync(), (error) => error instanceof MintError && error.transient);
});

test('a closed generator throws ClosedError from every call, and closing twice does nothing', async () => {
  const generator = new Generator('twitter', { node: 10 });
  generator.nextId();
  const closing = generator.close();
  assert.ok(generator.closed);
  const closed = { name: 'ClosedError', message: 'the generator is closed: its mark is stored and its lease released' };
  for (const call of [() => generator.nextId(), () => generator.nextIdString(), () => generator.nextIds(5), () => generator.tryNextId()]) {
    assert.throws(call, (error) => error instanceof ClosedError && error instanceof MintError && !error.transient && error.name === closed.name && error.message === closed.message);
  }
  await assert.rejects(generator.nextIdAsync(), closed);
  await assert.rejects(generator.nextIdsAsync(5), closed);
  await closing;
  await generator.close();
  assert.equal(String(generator), 'Generator { layout: Layout.TWITTER, node: 10, closed }');
});

test('two generators on one node of one layout in a process mint from one: no ID twice', async () => {
  const first = new Generator('twitter', { node: 11 });
  const second = new Generator('twitter', { node: 11 });
  const ids = [];
  for (let i = 0; i < 5000; i++) ids.push(first.nextId(), second.nextId());
  assert.ok(increasing(ids));
  // Closing one leaves the other minting.
  await first.close();
  assert.ok(second.nextId() > ids.at(-1));
  // Another layout's node 11 is a generator of its own.
  const discord = new Generator('discord', { node: 11 });
  assert.equal(Layout.DISCORD.decode(discord.nextId()).node, 11);
});

test('a generator built again on a node after its last close goes on past its IDs', async () => {
  let last = 0n;
  for (let round = 0; round < 200; round++) {
    const generator = new Generator('twitter', { node: 16 });
    const ids = generator.nextIds(10);
    assert.ok(ids[0] > last, `round ${round}: ${ids[0]} after ${last}`);
    last = ids[9];
    await generator.close();
  }
});

test('a node asked for again with another borrowAheadMs is a RangeError naming the first', () => {
  const first = new Generator('twitter', { node: 17, borrowAheadMs: 1000 });
  assert.throws(() => new Generator('twitter', { node: 17 }), {
    name: 'RangeError',
    message: 'node 17 already mints in this process with borrowAheadMs 1000: ask for it with the same',
  });
  assert.ok(first.nextId() < new Generator('twitter', { node: 17, borrowAheadMs: 1000 }).nextId());
});

const WORKER = `
const { parentPort, workerData } = require('node:worker_threads');
const { Generator } = require(workerData.package);
const generator = new Generator('twitter', { node: 12 });
const ids = new BigUint64Array(workerData.count);
for (let i = 0; i < ids.length; i += 2) {
  ids[i] = generator.nextId();
  ids.set(generator.nextIds(1), i + 1);
}
parentPort.postMessage(ids);
`;

test('eight worker threads asking for node 12 share its generator: none mints an ID twice', async () => {
  const count = 50_000;
  const mine = new Generator('twitter', { node: 12 });
  const workers = Array.from({ length: 8 }, () =>
    new Promise((resolve, reject) => {
      const worker = new Worker(WORKER, { eval: true, workerData: { package: PACKAGE, count } });
      worker.once('message', resolve);
      worker.once('error', reject);
    }),
  );
  const here = mine.nextIds(count);
  const minted = [here, ...(await Promise.all(workers))];
  const all = new Set();
  for (const ids of minted) {
    assert.equal(ids.length, count);
    assert.ok(increasing(ids));
    for (const id of ids) all.add(id);
  }
  assert.equal(all.size, 9 * count);
});

for (const [what, call, error] of [
  ['no node', () => new Generator('twitter'), ['TypeError', 'a Generator needs its node: { node: 0..=1023 } for Layout.TWITTER (or lease() for a leased one)']],
  ['a node out of range', () => new Generator('twitter', { node: 1024 }), ['RangeError', 'node 1024 is out of range: the layout allows 0..=1023']],
  ['a negative node', () => new Generator('discord', { node: -1 }), ['RangeError', 'node -1 is out of range: the layout allows 0..=1023']],
  ['a node as text', () => new Generator('twitter', { node: '7' }), ['TypeError', 'node must be a number, not string']],
  ['an unknown option', () => new Generator('twitter', { node: 7, nodes: 1 }), ['TypeError', 'unknown option "nodes" of the options of a Generator: the options are node, highWater, borrowAheadMs, patienceMs']],
  ['a layout of another type', () => new Generator(41, { node: 7 }), ['TypeError', "layout must be a preset's name or a Layout, not number"]],
  ['a borrow ahead too long', () => new Generator('twitter', { node: 7, borrowAheadMs: 3_600_001 }), ['RangeError', 'borrowAheadMs 3600001 ms is out of range: 0..=60000 ms']],
  ['a negative patience', () => new Generator('twitter', { node: 7, patienceMs: -1 }), ['RangeError', 'patienceMs -1 ms is out of range: 0..=3600000 ms']],
  ['a batch too large', () => new Generator('twitter', { node: 7 }).nextIds(MAX_BATCH + 1), ['RangeError', `n ${MAX_BATCH + 1} is out of range: one call returns 0..=${MAX_BATCH} ids`]],
  ['a fractional batch', () => new Generator('twitter', { node: 7 }).nextIds(1.5), ['RangeError', `n 1.5 is out of range: one call returns 0..=${MAX_BATCH} ids`]],
  ['a batch as a bigint', () => new Generator('twitter', { node: 7 }).nextIds(5n), ['TypeError', 'n must be a number, not bigint']],
]) {
  test(`bad arguments are a TypeError or RangeError naming the value and the range: ${what}`, () => {
    assert.throws(call, (thrown) => {
      assert.deepEqual([thrown.constructor.name, thrown.message], error);
      return true;
    });
  });
}
