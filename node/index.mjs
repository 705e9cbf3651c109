// The ES module entry point: the CommonJS module's exports (index.js), so that a program
// that loads both sees one addon and one set of classes. Node.js finds their names in
// index.js's `module.exports = { ... }`.
export * from './index.js';
export { default } from './index.js';
