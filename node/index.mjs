// The ES module entry point: the same objects as the CommonJS one (index.js), so that a
// program that loads both sees one addon and one set of classes.
import { createRequire } from 'node:module';

const atomflake = createRequire(import.meta.url)('./index.js');

export const {
  Generator,
  Layout,
  lease,
  toBase32,
  fromBase32,
  toBase62,
  fromBase62,
  parseId,
  AtomflakeError,
  MintError,
  ClosedError,
  StartError,
  LeaseError,
  MAX_BATCH,
} = atomflake;
export default atomflake;
