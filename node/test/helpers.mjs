// What the tests share: the package, skipping (a failure under CI=true), child processes
// on a moved or stepped wall clock, and checks on runs of IDs.
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import assert from 'node:assert/strict';

export const PACKAGE = join(dirname(fileURLToPath(import.meta.url)), '..');
const REPOSITORY = join(PACKAGE, '..');
const LIBFAKETIME = '/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1';
const STEPPED_CLOCK_SOURCE = join(REPOSITORY, 'test-servers', 'src', 'clock', 'stepped_clock.c');

/** Skips the test `t`, or fails it under CI=true. */
export function cannotRun(t, why) {
  if (process.env.CI === 'true') {
    assert.fail(`cannot run under CI=true: ${why}`);
  }
  t.skip(why);
}

/** The URL of a lease server from the environment, or undefined (the test skipped). */
export function serverUrl(t, variable) {
  const url = process.env[variable];
  if (!url) {
    cannotRun(t, `no ${variable}: db-tests/tests/node.rs starts the servers and runs these tests`);
  }
  return url;
}

/** A fresh temporary directory, removed after the test. */
export function scratch(t) {
  const directory = mkdtempSync(join(tmpdir(), 'atomflake-node-'));
  t.after(() => rmSync(directory, { recursive: true, force: true }));
  return directory;
}

/** The environment of a process whose wall clock libfaketime moves by `offset` ("-3s"). */
export function fakeTime(offset) {
  return { LD_PRELOAD: LIBFAKETIME, FAKETIME: offset, FAKETIME_DONT_FAKE_MONOTONIC: '1' };
}

/** The environment of processes on a wall clock that `stepClock` steps: the repository's
 * stepped clock, built with the C compiler into `directory`, and its file, at the real time. */
export function steppedClock(directory) {
  const library = join(directory, 'stepped_clock.so');
  const built = spawnSync('cc', ['-shared', '-fPIC', '-O2', '-o', library, STEPPED_CLOCK_SOURCE], { encoding: 'utf8' });
  assert.equal(built.status, 0, built.stderr ?? String(built.error));
  const clock = join(directory, 'stepped_clock');
  stepClock(clock, 0);
  return { LD_PRELOAD: library, ATOMFLAKE_STEPPED_CLOCK: clock };
}

/** Steps the wall clock of the processes on `clock` to `seconds` from the real time: one
 * 8-byte word, ns << 1, in host order, which a process reads at its next clock reading. */
export function stepClock(clock, seconds) {
  const word = Buffer.alloc(8);
  word.writeBigInt64LE(BigInt(seconds) * 1_000_000_000n << 1n);
  writeFileSync(clock, word);
}

/** Runs `script` (CommonJS, with `atomflake` loadable) in a fresh Node.js process with
 * `args` and `env` added; resolves to its stdout's lines once it exits with 0. */
export function runScript(script, args = [], env = {}, timeoutMs = 60_000) {
  const done = spawnSync(process.execPath, ['-e', script, '--', ...args], {
    cwd: PACKAGE,
    env: { ...process.env, NODE_PATH: join(PACKAGE, '..'), ...env },
    encoding: 'utf8',
    timeout: timeoutMs,
  });
  assert.equal(done.status, 0, `the script failed (${done.status ?? done.signal}):\n${done.stderr}`);
  return done.stdout.split('\n').filter((line) => line !== '');
}

/** Starts `script` as `runScript` does, without waiting for it. */
export function startScript(script, args = [], env = {}) {
  return spawn(process.execPath, ['-e', script, '--', ...args], {
    cwd: PACKAGE,
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
}

/** Whether `ids` strictly increase. */
export function increasing(ids) {
  for (let i = 1; i < ids.length; i++) {
    if (!(ids[i - 1] < ids[i])) return false;
  }
  return true;
}
