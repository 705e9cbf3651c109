// Before `npm pack` and `npm publish`: the licence texts beside the package (from the
// repository's root), and the addon checked to run on glibc 2.17 or later, by the highest
// glibc symbol version it needs (objdump -T, from binutils). `npm run build:dist` builds
// such an addon (zig links it against glibc 2.17); a plain `npm run build` links against
// this machine's glibc.
import { copyFileSync } from 'node:fs';
import { execFileSync } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const PACKAGE = join(dirname(fileURLToPath(import.meta.url)), '..');
const ADDON = join(PACKAGE, 'atomflake.linux-x64-gnu.node');
const OLDEST = [2, 17];

for (const licence of ['LICENSE-MIT', 'LICENSE-APACHE']) {
  copyFileSync(join(PACKAGE, '..', licence), join(PACKAGE, licence));
}

const symbols = execFileSync('objdump', ['-T', ADDON], { encoding: 'utf8', maxBuffer: 1 << 26 });
const versions = [...new Set(symbols.match(/GLIBC_[0-9.]+/g) ?? [])]
  .map((name) => name.slice('GLIBC_'.length).split('.').map(Number))
  .sort((a, b) => a[0] - b[0] || (a[1] ?? 0) - (b[1] ?? 0));
const newest = versions.at(-1);
if (newest === undefined || newest[0] > OLDEST[0] || (newest[0] === OLDEST[0] && (newest[1] ?? 0) > OLDEST[1])) {
  console.error(
    `prepack: ${ADDON} needs glibc ${newest?.join('.') ?? '(none found)'}: a published addon must run on glibc ${OLDEST.join('.')}; build it with npm run build:dist`,
  );
  process.exit(1);
}
console.log(`prepack: the addon needs glibc ${newest.join('.')} at most (it must run on ${OLDEST.join('.')})`);
