import { describe, expect, it } from 'vitest';

import { closest, didYouMean, editDistance } from '../src/typos';

describe('editDistance', () => {
  it('counts insertions, deletions, substitutions and swaps as one edit', () => {
    expect(editDistance('demo', 'demo')).toBe(0);
    expect(editDistance('demo.mr', 'demo.mar')).toBe(1);
    expect(editDistance('deom', 'demo')).toBe(1);
    expect(editDistance('Demo', 'demo')).toBe(0);
    expect(editDistance('', 'abc')).toBe(3);
  });
});

describe('closest', () => {
  it('offers the nearest known name within the allowed edits', () => {
    expect(closest('demo.mr', ['heat-1.0.mar', 'demo.mar'])).toBe('demo.mar');
    expect(closest('heats', ['heat', 'demo'])).toBe('heat');
  });

  it('offers nothing for a far name or the name itself', () => {
    expect(closest('squeezenet', ['demo', 'heat'])).toBeNull();
    expect(closest('demo', ['demo'])).toBeNull();
    expect(closest('abc', [])).toBeNull();
  });

  it('writes the question only when there is a match', () => {
    expect(didYouMean('dem', ['demo'])).toBe('; did you mean demo?');
    expect(didYouMean('zzz', ['demo'])).toBe('');
  });
});
