// What outlives a process: a high-water file across restarts, one with its wall clock
// stepped behind (the repository's stepped clock), and the file's lock.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { join } from 'node:path';
import { Generator, StartError } from '../index.mjs';
import { runScript, scratch, startScript, stepClock, steppedClock } from './helpers.mjs';

const MINT = `
const { Generator } = require(process.cwd());
const [highWater, n] = process.argv.slice(1);
const generator = new Generator('twitter', { node: 9, highWater });
// A restart waits until its clock passes the stored mark: with a timer, as every wait
// longer than a tick is.
generator.nextIdsAsync(Number(n)).then((ids) => {
  console.log(String(ids[ids.length - 1]));
  return generator.close();
}).then(() => console.log('closed'));
`;

function mintInAProcess(highWater, n, env = {}) {
  const lines = runScript(MINT, [highWater, String(n)], env);
  assert.equal(lines.at(-1), 'closed');
  return BigInt(lines[0]);
}

test('a restart with its wall clock stepped 3 s behind mints past every ID before it', (t) => {
  const directory = scratch(t);
  const highWater = join(directory, 'node-9.hw');
  const last = mintInAProcess(highWater, 100_000);
  const clock = steppedClock(directory);
  stepClock(clock.ATOMFLAKE_STEPPED_CLOCK, -3);
  // Without the file, that clock mints 3 s in the past.
  assert.ok(mintInAProcess(join(directory, 'other.hw'), 1, clock) < last);
  // With it, the restart waits until its clock passes the mark.
  assert.ok(mintInAProcess(highWater, 1, clock) > last);
});

const HOLD = `
const { Generator } = require(process.cwd());
const generator = new Generator('twitter', { node: 14, highWater: process.argv[1] });
generator.nextIdAsync().then((id) => console.log(String(id)));
setTimeout(() => {}, 60_000);
`;

test('a high-water file is held by one process at a time: another gets a StartError', async (t) => {
  const highWater = join(scratch(t), 'node-14.hw');
  const holder = startScript(HOLD, [highWater]);
  t.after(() => holder.kill('SIGKILL'));
  const [line] = await once(holder.stdout, 'data');
  const held = BigInt(String(line).trim());
  assert.throws(() => new Generator('twitter', { node: 14, highWater }), (error) => {
    assert.ok(error instanceof StartError);
    assert.equal(error.message, `high-water file ${highWater} is in use: another live generator holds its lock`);
    return true;
  });
  holder.kill('SIGKILL');
  await once(holder, 'exit');
  // Killed, the holder left its mark, ahead of its ID: the next generator starts past it,
  // and until its clock does, a sync call refuses (transient) and an async one waits.
  const next = new Generator('twitter', { node: 14, highWater });
  assert.ok((await next.nextIdAsync()) > held);
  await next.close();
});

test('in one process a node asked for with another high-water file is a RangeError naming both', async (t) => {
  const directory = scratch(t);
  const first = new Generator('twitter', { node: 15, highWater: join(directory, 'a.hw') });
  assert.throws(() => new Generator('twitter', { node: 15, highWater: join(directory, 'b.hw') }), {
    name: 'RangeError',
    message: `node 15 already mints in this process with the high-water file ${join(directory, 'a.hw')}: ask for it without highWater, or with the same file`,
  });
  // Asked for without one, or with the same file, it is the same generator.
  const same = new Generator('twitter', { node: 15 });
  const again = new Generator('twitter', { node: 15, highWater: join(directory, 'a.hw') });
  assert.ok(first.nextId() < same.nextId() && same.nextId() < again.nextId());
  await Promise.all([first.close(), same.close(), again.close()]);
});
