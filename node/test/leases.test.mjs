// Leases on real servers (PostgreSQL, etcd, ZooKeeper and Redis, started by
// db-tests/tests/node.rs, which names them in ATOMFLAKE_TEST_*): distinct nodes, a release
// with the exact mark, a killed holder's successor, and the errors. Run without the
// servers, these tests skip (fail under CI=true).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { randomUUID } from 'node:crypto';
import { createInterface } from 'node:readline';
import { Generator, Layout, LeaseError, MintError, lease } from '../index.mjs';
import { fakeTime, serverUrl, startScript } from './helpers.mjs';

// Two nodes, so that a third claimant finds none free.
const TWO_NODES = new Layout({ timestampBits: 41, nodeBits: 1, sequenceBits: 12, epochMs: 1288834974657 });

const ENGINES = {
  PostgreSQL: 'ATOMFLAKE_TEST_POSTGRES',
  etcd: 'ATOMFLAKE_TEST_ETCD',
  ZooKeeper: 'ATOMFLAKE_TEST_ZOOKEEPER',
  Redis: 'ATOMFLAKE_TEST_REDIS',
};

// A process holding node 0 of a namespace that mints `rounds` batches (-1: until killed),
// printing its node and then the last ID of each batch.
const HOLDER = `
const { Layout, LeaseError, lease } = require(process.cwd());
const [url, namespace, rounds] = process.argv.slice(1);
const layout = new Layout({ timestampBits: 41, nodeBits: 1, sequenceBits: 12, epochMs: 1288834974657 });
// A claim refused for now (on a busy machine, a statement past the server's timeout of a
// quarter of the 3 s lease time) is asked again, as a transient LeaseError says it may be.
async function claimed() {
  const deadline = Date.now() + 30_000;
  for (;;) {
    try {
      return await lease(url, { namespace, ttl: 3, layout, node: 0 });
    } catch (error) {
      if (!(error instanceof LeaseError && error.transient) || Date.now() > deadline) throw error;
      await new Promise((resolve) => setTimeout(resolve, 200));
    }
  }
}
(async () => {
  const generator = await claimed();
  console.log('node', generator.node);
  for (let left = Number(rounds); left !== 0; left--) {
    const ids = await generator.nextIdsAsync(1000);
    console.log(String(ids[ids.length - 1]));
  }
  await generator.close();
})();
`;

const namespace = () => `js-${randomUUID().slice(0, 16)}`;

/** The lines a holder prints, as they come. */
function lines(child) {
  return createInterface({ input: child.stdout })[Symbol.asyncIterator]();
}

for (const [engine, variable] of Object.entries(ENGINES)) {
  test(`${engine}: claimants get distinct nodes and one too many gets a LeaseError`, async (t) => {
    const url = serverUrl(t, variable);
    if (url === undefined) return;
    const ns = namespace();
    const first = await lease(url, { namespace: ns, ttl: 5, layout: TWO_NODES });
    const second = await lease(url, { namespace: ns, ttl: 5, layout: TWO_NODES });
    assert.deepEqual(new Set([first.node, second.node]), new Set([0, 1]));
    // Asked for by its node, a leased generator is shared, as a worker thread would ask.
    const shared = new Generator(TWO_NODES, { node: first.node });
    const ids = [...first.nextIds(2500), ...shared.nextIds(2500), ...second.nextIds(5000)];
    await shared.close();
    assert.equal(new Set(ids).size, 10_000);
    assert.deepEqual(new Set(ids.map((id) => TWO_NODES.decode(id).node)), new Set([0, 1]));
    await assert.rejects(lease(url, { namespace: ns, ttl: 5, layout: TWO_NODES }), (error) => {
      assert.ok(error instanceof LeaseError);
      assert.equal(error.message, `no free node in ${engine} lease namespace "${ns}": every node of 0..=1 is held by a live lease`);
      assert.equal(error.transient, true);
      return true;
    });
    // The second's release frees its node at once.
    await second.close();
    const third = await lease(url, { namespace: ns, ttl: 5, layout: TWO_NODES });
    assert.equal(third.node, second.node);
    assert.ok((await third.nextIdAsync()) > ids.reduce((a, b) => (a > b ? a : b)));
    await Promise.all([first.close(), third.close()]);
    assert.ok(first.closed && second.closed && third.closed);
  });

  test(`${engine}: a release stores the exact mark, so a successor behind starts right after it`, async (t) => {
    const url = serverUrl(t, variable);
    if (url === undefined) return;
    const ns = namespace();
    // A holder whose clock runs 4 s ahead mints, then closes.
    const ahead = startScript(HOLDER, [url, ns, '20'], fakeTime('+4s'));
    let out = '';
    ahead.stdout.on('data', (chunk) => { out += chunk; });
    let err = '';
    ahead.stderr.on('data', (chunk) => { err += chunk; });
    const [code] = await once(ahead, 'exit');
    assert.equal(code, 0, err);
    const printed = out.split('\n').filter(Boolean);
    assert.equal(printed[0], 'node 0');
    const last = BigInt(printed.at(-1));
    const lastMs = TWO_NODES.decode(last).unixMs;
    // This process's clock is behind the stored mark: its first mint is refused, told to
    // wait until its clock passes the mark. So the refusal tells where the mark is: just
    // past the last ID, for an exact mark; 0.5 s to 1.5 s further, for one kept ahead for
    // minting. (Read off the refusal, not off a timer's wake-up, which a busy machine
    // delays.)
    const successor = await lease(url, { namespace: ns, ttl: 5, layout: TWO_NODES, node: 0 });
    const asked = Date.now();
    const refusal = (() => {
      try {
        return `minted ${successor.tryNextId()}`;
      } catch (error) {
        return error;
      }
    })();
    assert.ok(refusal instanceof MintError && refusal.transient, `the successor, ${asked - lastMs} ms after the last ID, was not refused: ${refusal}`);
    const markMs = asked + refusal.retryAfter;
    t.diagnostic(`${engine}: the mark is ${(markMs - lastMs).toFixed(1)} ms past the last ID`);
    assert.ok(markMs - lastMs > -50 && markMs - lastMs < 250, `the mark is ${markMs - lastMs} ms past the last ID`);
    const first = await successor.nextIdAsync();
    await successor.close();
    assert.ok(first > last);
  });

  test(`${engine}: a killed holder's node is claimed again after its lease time, past every ID`, async (t) => {
    const url = serverUrl(t, variable);
    if (url === undefined) return;
    const ns = namespace();
    const holder = startScript(HOLDER, [url, ns, '-1']);
    t.after(() => holder.kill('SIGKILL'));
    const read = lines(holder);
    assert.equal((await read.next()).value, 'node 0');
    const printed = [];
    for (let i = 0; i < 50; i++) printed.push(BigInt((await read.next()).value));
    holder.kill('SIGKILL');
    for (let line = await read.next(); !line.done; line = await read.next()) printed.push(BigInt(line.value));
    // The node stays taken until its lease time (3 s) has passed without a renewal.
    const started = Date.now();
    let successor;
    while (successor === undefined) {
      try {
        successor = await lease(url, { namespace: ns, ttl: 5, layout: TWO_NODES, node: 0 });
      } catch (error) {
        assert.ok(error instanceof LeaseError && error.transient, String(error));
        assert.ok(Date.now() - started < 30_000, 'node 0 was never freed');
        await new Promise((resolve) => setTimeout(resolve, 200));
      }
    }
    const next = await successor.nextIdAsync();
    await successor.close();
    assert.ok(next > printed.reduce((a, b) => (a > b ? a : b)));
  });

  test(`${engine}: bad lease arguments are RangeErrors that never show a password`, async (t) => {
    const url = serverUrl(t, variable);
    if (url === undefined) return;
    await assert.rejects(lease(url, { namespace: 'no spaces', layout: TWO_NODES }), {
      name: 'RangeError',
      message: 'invalid lease namespace "no spaces": allowed 1..=63 bytes of ASCII letters, digits, \'-\', \'_\' and \'.\'',
    });
    await assert.rejects(lease(url, { ttl: 0.5 }), {
      name: 'RangeError',
      message: 'lease time 500ms is out of range: allowed whole seconds in 1s..=3600s',
    });
    await assert.rejects(lease(url, { layout: TWO_NODES, node: 2 }), {
      name: 'RangeError',
      message: 'node 2 is out of range: the layout allows 0..=1',
    });
  });
}

test('lease URLs and options are checked before any server is asked', async () => {
  await assert.rejects(lease('etcd://app:s3cret@127.0.0.1:2379'), {
    name: 'RangeError',
    message:
      "invalid lease URL: invalid etcd URL: found '@': an etcd:// URL names members only, " +
      'etcd://HOST:PORT[,HOST:PORT...]; a user, a password and TLS files go in an etcds:// URL, ' +
      'etcds://[USER:PASSWORD@]HOST:PORT[,...][?cacert=PATH&cert=PATH&key=PATH] (no path or fragment)',
  });
  await assert.rejects(lease('redis://app:s3cret@127.0.0.1:6379/x'), {
    name: 'RangeError',
    message: 'invalid lease URL: the Redis URL names the database "x": allowed 0 to 65535',
  });
  await assert.rejects(lease('postgresql://app:s3cret@127.0.0.1:99999/app'), {
    name: 'RangeError',
    message: 'invalid lease URL: invalid connection string: invalid value for option `port`',
  });
  await assert.rejects(lease('zk://127.0.0.1:2181', { ttl: 3601 }), {
    name: 'RangeError',
    message: 'ttl 3601 s is out of range: 0..=3600 s',
  });
  await assert.rejects(lease('zk://127.0.0.1:2181', { ttl: -1 }), {
    name: 'RangeError',
    message: 'ttl -1 s is out of range: 0..=3600 s',
  });
  await assert.rejects(lease(5), { name: 'TypeError', message: 'url must be a string, not number' });
});
