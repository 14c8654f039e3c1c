// Unit tests of the panel's data handling (test/*.test.ts), run in node: the
// modules they cover touch neither the DOM nor the network.
import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: { include: ['test/**/*.test.ts'], environment: 'node' }
});
