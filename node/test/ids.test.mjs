// IDs: the layouts, decode and encode, the text forms, the exact errors, and another
// package's decoder (@sapphire/snowflake's DiscordSnowflake).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { DiscordSnowflake } from '@sapphire/snowflake';
import atomflake, { Generator, Layout, toBase32, fromBase32, toBase62, fromBase62, parseId } from '../index.mjs';
import { increasing } from './helpers.mjs';

const WIDE = new Layout({ timestampBits: 41, nodeBits: 0, sequenceBits: 22, epochMs: 1288834974657 });

test("published IDs decode to their documented parts (the Rust crate's vectors, tests/vectors.rs)", () => {
  // X (Twitter) developer docs, Tweet object example: created_at "Wed Oct 10 20:19:24 +0000 2018".
  assert.deepEqual(Layout.TWITTER.decode(1050118621198921728n), {
    unixMs: 1539202764211, node: 347, sequence: 0, date: new Date('2018-10-10T20:19:24.211Z'),
  });
  assert.equal(Layout.TWITTER.encode({ unixMs: 1539202764211, node: 347 }), 1050118621198921728n);

  // Discord's developer docs, API reference, Snowflakes: 175928847299117063 is
  // 2016-04-30 11:18:25.796 UTC, worker 1, process 0, increment 7.
  const parts = Layout.DISCORD.decode(175928847299117063n);
  assert.deepEqual(parts, { unixMs: 1462015105796, node: 1 << 5, sequence: 7, date: new Date('2016-04-30T11:18:25.796Z') });
  assert.equal(Layout.DISCORD.encode({ date: parts.date, node: 32, sequence: 7 }), 175928847299117063n);
  assert.equal(Layout.DISCORD.encode(parts), 175928847299117063n);
  // The ID as text and as a safe-integer-less number: the same.
  assert.deepEqual(Layout.DISCORD.decode('175928847299117063'), parts);
});

test('the presets and custom layouts describe themselves', () => {
  assert.ok(Layout.preset('twitter').equals(Layout.TWITTER));
  assert.deepEqual(
    Object.keys(Layout),
    ['TWITTER', 'DISCORD', 'INSTAGRAM', 'SONYFLAKE', 'MASTODON', 'JAVASCRIPT'],
  );
  assert.equal(String(Layout.SONYFLAKE), 'Layout.SONYFLAKE');
  const t = Layout.TWITTER;
  assert.deepEqual(
    [t.name, t.timestampBits, t.nodeBits, t.sequenceBits, t.epochMs, t.tickMs, t.maxNode, t.idsPerTick],
    ['twitter', 41, 10, 12, 1288834974657, 1, 1023, 4096n],
  );
  assert.equal(Layout.DISCORD.epochMs, 1420070400000);
  assert.deepEqual([Layout.INSTAGRAM.nodeBits, Layout.INSTAGRAM.sequenceBits, Layout.INSTAGRAM.epochMs], [13, 10, 1314220021721]);
  assert.deepEqual([Layout.SONYFLAKE.timestampBits, Layout.SONYFLAKE.tickMs], [39, 10]);
  assert.equal(WIDE.idsPerTick, 1n << 22n);
  assert.equal(WIDE.name, undefined);
  assert.equal(
    String(WIDE),
    'Layout { timestampBits: 41, nodeBits: 0, sequenceBits: 22, epochMs: 1288834974657, tickMs: 1 }',
  );
  assert.ok(!WIDE.equals(Layout.TWITTER));
  assert.equal(atomflake.Layout, Layout);
});

test('every ID round-trips through its parts, its text forms and its time', () => {
  for (const layout of Object.values(Layout)) {
    const generator = new Generator(layout, { node: layout.maxNode });
    for (const id of [generator.nextId(), ...generator.nextIds(100)]) {
      const parts = layout.decode(id);
      assert.equal(layout.encode(parts), id, String(layout));
      assert.ok(layout.firstIdAt(parts.date) <= id && id <= layout.lastIdAt(parts.unixMs), String(layout));
      assert.equal(fromBase32(toBase32(id)), id);
      assert.equal(fromBase62(toBase62(id)), id);
      assert.equal(parseId(String(id)), id);
    }
    generator.close();
  }
});

test('JavaScript IDs are safe integers, and nextIdNumber() mints only those', () => {
  const js = Layout.JAVASCRIPT;
  assert.deepEqual([js.timestampBits, js.nodeBits, js.sequenceBits, js.tickMs], [38, 7, 8, 10]);
  assert.equal(js.maxId, BigInt(Number.MAX_SAFE_INTEGER));
  assert.deepEqual(Object.values(Layout).filter((layout) => layout.fitsJsNumber), [js]);
  const generator = new Generator('javascript', { node: js.maxNode });
  const numbers = Array.from({ length: 1000 }, () => generator.nextIdNumber());
  assert.ok(numbers.every(Number.isSafeInteger) && increasing(numbers));
  assert.ok(BigInt(numbers.at(-1)) < generator.nextId());
  const twitter = new Generator('twitter', { node: 1 });
  assert.throws(() => twitter.nextIdNumber(), {
    name: 'RangeError',
    message:
      'nextIdNumber() needs a layout whose IDs are numbers exactly (at most 53 bits, as Layout.JAVASCRIPT): ' +
      'Layout.TWITTER has 63-bit IDs; take nextId() (a bigint) or nextIdString()',
  });
});

test('base32 and base62 sort as the IDs do', () => {
  const ids = new Generator('twitter', { node: 5 }).nextIds(1000);
  const texts = Array.from(ids, (id) => toBase32(id));
  assert.ok(texts.every((text) => text.length === 13) && increasing(texts));
  assert.ok(increasing(Array.from(ids, (id) => toBase62(id))));
  assert.equal(toBase32(0n), '0000000000000');
  assert.equal(toBase32(2n ** 64n - 1n), 'FZZZZZZZZZZZZ');
  assert.equal(toBase62(2n ** 64n - 1n), 'LygHa16AHYF');
});

for (const [what, call, error] of [
  ['an unknown preset', () => Layout.preset('snowflake'), ['RangeError', 'unknown layout "snowflake": the presets are twitter, discord, instagram, sonyflake, mastodon, javascript']],
  ['70 bits', () => new Layout({ timestampBits: 50, nodeBits: 10, sequenceBits: 10, epochMs: 0 }), ['RangeError', 'layout needs 70 bits (50 timestamp + 10 node + 10 sequence): an id holds at most 64']],
  ['a tick of 0 ms', () => new Layout({ timestampBits: 41, nodeBits: 10, sequenceBits: 12, epochMs: 0, tickMs: 0 }), ['RangeError', 'tick length 0 ms is out of range: a tick is at least 1 ms']],
  ['a negative width', () => new Layout({ timestampBits: -1, nodeBits: 10, sequenceBits: 12, epochMs: 0 }), ['RangeError', 'timestampBits -1 is out of range: a field has 0..=64 bits']],
  ['a fractional width', () => new Layout({ timestampBits: 41.5, nodeBits: 10, sequenceBits: 12, epochMs: 0 }), ['RangeError', 'timestampBits 41.5 is out of range: a field has 0..=64 bits']],
  ['a width as text', () => new Layout({ timestampBits: '41', nodeBits: 10, sequenceBits: 12, epochMs: 0 }), ['TypeError', 'timestampBits must be a number, not string']],
  ['a missing field', () => new Layout({ timestampBits: 41, nodeBits: 10, epochMs: 0 }), ['TypeError', 'a Layout needs sequenceBits: a Layout is { timestampBits, nodeBits, sequenceBits, epochMs, tickMs (1 unless given) }']],
  ['an unknown field', () => new Layout({ timestampBits: 41, nodeBits: 10, sequenceBits: 12, epochMs: 0, tick: 1 }), ['TypeError', 'unknown option "tick" of a Layout: the options are timestampBits, nodeBits, sequenceBits, epochMs, tickMs']],
  ['a negative ID', () => Layout.TWITTER.decode(-1n), ['RangeError', 'id -1 is out of range: an id is 0..=18446744073709551615']],
  ['an ID of 65 bits', () => Layout.TWITTER.decode(2n ** 64n), ['RangeError', 'id 18446744073709551616 is out of range: an id is 0..=18446744073709551615']],
  ['an unsafe number', () => Layout.TWITTER.decode(2 ** 60), ['TypeError', 'id must be a bigint, decimal text or a safe integer, not number 1152921504606847000']],
  ['a node out of range', () => Layout.TWITTER.encode({ unixMs: 1288834974657, node: 1024 }), ['RangeError', 'node 1024 is out of range: the layout allows 0..=1023']],
  ['a sequence out of range', () => Layout.TWITTER.encode({ unixMs: 1288834974657, node: 0, sequence: 4096 }), ['RangeError', 'sequence 4096 is out of range: the layout allows 0..=4095']],
  ['a time before the epoch', () => Layout.TWITTER.encode({ unixMs: 0, node: 0 }), ['RangeError', "time 0 ms is before the layout's epoch: the layout allows 1288834974657 ms and later"]],
  ['an invalid Date', () => Layout.TWITTER.firstIdAt(new Date('no')), ['RangeError', 'when is an invalid Date']],
  ['decimal text with a letter', () => parseId('12a'), ['RangeError', "invalid character 'a' at byte 2 in id: ids are written with the digits 0-9 only"]],
  ['base32 past 2^64', () => fromBase32('ZZZZZZZZZZZZZ'), ['RangeError', 'base32 id "ZZZZZZZZZZZZZ" is out of range: ids allow 0000000000000..=FZZZZZZZZZZZZ']],
  ['a negative ID to base32', () => toBase32(-5n), ['RangeError', 'id -5 is out of range: an id is 0..=18446744073709551615']],
  ['a number to fromBase32', () => fromBase32(5), ['TypeError', 'text must be a string, not number']],
]) {
  test(`bad input is a TypeError or RangeError with Rust's message: ${what}`, () => {
    assert.throws(call, (thrown) => {
      assert.deepEqual([thrown.constructor.name, thrown.message], error);
      return true;
    });
  });
}

test("Discord IDs agree with @sapphire/snowflake's DiscordSnowflake.deconstruct", () => {
  const generator = new Generator('discord', { node: (21 << 5) | 9 });
  for (const id of [generator.nextId(), ...generator.nextIds(1000)]) {
    const ours = Layout.DISCORD.decode(id);
    const theirs = DiscordSnowflake.deconstruct(id);
    assert.equal(theirs.timestamp, BigInt(ours.unixMs));
    assert.equal(theirs.workerId, 21n);
    assert.equal(theirs.processId, 9n);
    assert.equal(theirs.increment, BigInt(ours.sequence));
    assert.equal(DiscordSnowflake.timestampFrom(id), ours.unixMs);
  }
});
