// Type-checked by `npm run check-types` (tsc --strict), never run: the declarations
// (index.d.ts) accept the package's uses and refuse wrong ones.
import atomflake, { Generator, Layout, Mask, lease, toBase32, fromBase32, MintError, type Parts } from 'atomflake';

async function uses(): Promise<void> {
  const generator = new Generator('twitter', { node: 7 });
  const id: bigint = generator.nextId();
  const text: string = generator.nextIdString();
  const ids: BigUint64Array = generator.nextIds(100_000);
  const later: bigint = await generator.nextIdAsync();
  const parts: Parts = Layout.TWITTER.decode(id);
  const when: Date = parts.date;
  const custom = new Layout({ timestampBits: 41, nodeBits: 0, sequenceBits: 22, epochMs: 1288834974657 });
  const wide = new Generator(custom, { node: 0, borrowAheadMs: 1000 });
  const leased = await lease('postgres://app@db/app', { namespace: 'orders', ttl: 10 });
  await leased.close();
  const back: bigint = fromBase32(toBase32(id));
  const uuid: string = Layout.TWITTER.toUuid(id);
  const fromUuid: bigint = Layout.TWITTER.fromUuid(uuid);
  const mask = Mask.fromKeyFile('ids.key');
  const hidden: bigint = new Mask(new Uint8Array(16)).mask(id);
  const shown: bigint = mask.unmask(hidden);
  try {
    wide.tryNextId();
  } catch (error) {
    if (error instanceof MintError && error.transient) {
      const wait: number | undefined = error.retryAfter;
      void wait;
    }
  }
  void [text, ids, later, when, back, fromUuid, shown, atomflake.Mask];
  // @ts-expect-error: a generator needs its node.
  new Generator('twitter', {});
  // @ts-expect-error: a mask's key is bytes, not text.
  new Mask('00010203040506070809');
  // @ts-expect-error: nextId() is a bigint, not a number.
  const wrong: number = generator.nextId();
  void wrong;
}
void uses;
