// The ID's other forms: UUIDs of version 7, and masked IDs (the repository's mask vectors,
// tests/mask_vectors.txt, the same here as in Rust and Python). Each bad input is an
// exact error.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { chmodSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { inspect } from 'node:util';
import { AtomflakeError, Generator, Layout, Mask } from '../index.mjs';
import { increasing } from './helpers.mjs';

/** The key and the (id, masked id) pairs of tests/mask_vectors.txt. */
function vectors() {
  const lines = readFileSync(new URL('../../tests/mask_vectors.txt', import.meta.url), 'utf8')
    .split('\n')
    .filter((line) => line !== '' && !line.startsWith('#'));
  const key = Buffer.from(lines[0].replace(/^key /, ''), 'hex');
  return { key, pairs: lines.slice(1).map((line) => line.split(/\s+/).map(BigInt)) };
}

test("IDs become UUIDs of version 7 that sort as the IDs do and give them back", () => {
  // Twitter's published ID: the UUID the Rust crate's tests pin.
  assert.equal(Layout.TWITTER.toUuid(1050118621198921728n), '01665fa2-4db3-7fac-8e92-c5527c95b000');
  // In either case, with or without hyphens, braces or urn:uuid:.
  for (const text of ['01665FA2-4DB3-7FAC-8E92-C5527C95B000', '01665fa24db37fac8e92c5527c95b000', '{01665fa2-4db3-7fac-8e92-c5527c95b000}', 'urn:uuid:01665fa2-4db3-7fac-8e92-c5527c95b000']) {
    assert.equal(Layout.TWITTER.fromUuid(text), 1050118621198921728n, text);
  }
  for (const name of ['twitter', 'discord', 'instagram', 'sonyflake', 'mastodon', 'javascript']) {
    const layout = Layout.preset(name);
    const ids = Array.from(new Generator(layout, { node: Math.min(layout.maxNode, 3) }).nextIds(1000));
    const uuids = ids.map((id) => layout.toUuid(id));
    assert.ok(uuids.every((uuid) => /^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/.test(uuid)), name);
    assert.ok(increasing(uuids), name);
    assert.deepEqual(uuids.map((uuid) => layout.fromUuid(uuid)), ids, name);
    // The UUID's time (its first 48 bits) is the start of the ID's tick.
    for (const [at, uuid] of uuids.entries()) {
      assert.equal(parseInt(uuid.slice(0, 8) + uuid.slice(9, 13), 16), layout.decode(ids[at]).unixMs, name);
    }
  }
});

for (const [value, why] of [
  ['67e55044-10b1-426f-9247-bb680e5fe0c8', "uuid is of version 4: an id's uuid is of version 7"],
  ['01665fa2-4db3-7fac-ce92-c5527c95b000', "uuid has variant bits 0b11: an id's uuid has RFC 9562's 0b10"],
  ['01665fa2-4db3-7fac-8e92-c5527c95b000', "uuid carries layout fingerprint 1003: this layout's is 744"],
  ['01665fa2-4db4-7ba0-8e92-c5527c95b000', "uuid's unix_ts_ms 1539202764212 is not its id's time 1670438189554 ms"],
]) {
  test(`a UUID that is not the layout's is a RangeError naming why: ${why}`, () => {
    assert.throws(() => Layout.DISCORD.fromUuid(value), { name: 'RangeError', message: `invalid UUID "${value}": ${why}` });
  });
}

for (const [what, call, error] of [
  ['a UUID with a letter past f', () => Layout.TWITTER.fromUuid('01665fa2-4db3-7fac-8e92-c5527c95b00g'), ['RangeError', 'invalid UUID "01665fa2-4db3-7fac-8e92-c5527c95b00g": not a UUID (invalid character: found `g` at 35): a UUID is 32 hex digits, grouped 8-4-4-4-12 by hyphens or not']],
  ['a UUID as a number', () => Layout.TWITTER.fromUuid(5), ['TypeError', 'a uuid must be a string, not number']],
  ['an ID wider than the layout to a UUID', () => Layout.JAVASCRIPT.toUuid(2n ** 60n), ['RangeError', 'id 1152921504606846976 is out of range: the layout allows 0..=9007199254740991']],
  ['a key of 15 bytes', () => new Mask(Buffer.from('fifteen bytes..')), ['RangeError', 'key has 15 bytes: a key is 16 bytes']],
  ['a key as text', () => new Mask('00010203040506070809'), ['TypeError', 'a mask key must be a Uint8Array of 16 bytes, not string']],
  ['a negative ID to mask', () => new Mask(new Uint8Array(16)).mask(-1n), ['RangeError', 'id -1 is out of range: an id is 0..=18446744073709551615']],
  ['a masked ID of 65 bits', () => new Mask(new Uint8Array(16)).unmask(2n ** 64n), ['RangeError', 'masked id 18446744073709551616 is out of range: an id is 0..=18446744073709551615']],
  ['a key file path as a URL', () => Mask.fromKeyFile(new URL('file:///k')), ['TypeError', 'a key file path must be a string, not URL']],
]) {
  test(`bad input is a TypeError or RangeError with Rust's message: ${what}`, () => {
    assert.throws(call, (thrown) => {
      assert.deepEqual([thrown.constructor.name, thrown.message], error);
      return true;
    });
  });
}

test('the vectors mask and unmask as fixed; every ID comes back, in its half', () => {
  const { key, pairs } = vectors();
  assert.equal(pairs.length, 7);
  const mask = new Mask(key);
  for (const [id, masked] of pairs) {
    assert.equal(mask.mask(id), masked);
    assert.equal(mask.unmask(masked), id);
  }
  const ids = new Generator('twitter', { node: 9 }).nextIds(1000);
  for (const id of [...ids, 0n, 2n ** 63n - 1n, 2n ** 63n, 2n ** 64n - 1n]) {
    const masked = mask.mask(id);
    assert.equal(mask.unmask(masked), id);
    assert.equal(masked >> 63n, id >> 63n, `${id} left its half`);
  }
  assert.equal(String(mask), 'Mask(...)');
  assert.equal(inspect(mask), 'Mask(...)');
});

test('a key file of hex or raw bytes is the key; one others may read, or none, is refused', (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'atomflake-node-mask-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const { key, pairs } = vectors();
  const [hex, raw, open] = ['hex.key', 'raw.key', 'open.key'].map((name) => join(dir, name));
  writeFileSync(hex, `${key.toString('hex')}\n`);
  writeFileSync(raw, key);
  writeFileSync(open, key);
  chmodSync(hex, 0o600);
  chmodSync(raw, 0o400);
  chmodSync(open, 0o640);
  for (const path of [hex, raw]) {
    assert.equal(Mask.fromKeyFile(path).mask(pairs[3][0]), pairs[3][1]);
  }
  assert.throws(() => Mask.fromKeyFile(open), {
    name: 'RangeError',
    message: `key file ${open} has mode 640: a key file may be read and written by its owner alone (chmod 600)`,
  });
  const missing = join(dir, 'missing.key');
  assert.throws(() => Mask.fromKeyFile(missing), (error) => {
    assert.ok(error instanceof AtomflakeError, String(error));
    assert.equal(error.message, `cannot read key file ${missing}: No such file or directory (os error 2)`);
    assert.equal(error.transient, false);
    return true;
  });
});
