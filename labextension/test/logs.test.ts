import { describe, expect, it } from 'vitest';

import { newLines } from '../src/logs';

describe('newLines', () => {
  it('returns every line the first time', () => {
    expect(newLines([], ['a', 'b'])).toEqual(['a', 'b']);
  });

  it('returns nothing when the log did not change', () => {
    expect(newLines(['a', 'b'], ['a', 'b'])).toEqual([]);
  });

  it('returns the lines appended to a log that is not full yet', () => {
    expect(newLines(['a', 'b'], ['a', 'b', 'c', 'd'])).toEqual(['c', 'd']);
  });

  it('returns the lines appended to a full window that slid', () => {
    expect(newLines(['a', 'b', 'c'], ['c', 'd', 'e'])).toEqual(['d', 'e']);
  });

  it('keeps repeated lines that are new', () => {
    expect(newLines(['x', 'x'], ['x', 'x', 'x'])).toEqual(['x']);
  });

  it('returns the whole window when none of it was seen', () => {
    expect(newLines(['a', 'b'], ['c', 'd'])).toEqual(['c', 'd']);
  });
});
