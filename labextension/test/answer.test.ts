import { describe, expect, it } from 'vitest';

import {
  DOWNLOAD_TYPE,
  formatJSON,
  RASTER_TYPES,
  answerView,
  mediaType,
  viewBlob
} from '../src/answer';

describe('answerView', () => {
  it('shows the allow-listed raster types inline, typed by the list', () => {
    for (const type of RASTER_TYPES) {
      expect(answerView(type)).toEqual({ kind: 'image', type });
    }
    expect(answerView('IMAGE/PNG; charset=binary')).toEqual({
      kind: 'image',
      type: 'image/png'
    });
  });

  it('never shows svg (or any other image type) inline: a download', () => {
    for (const type of [
      'image/svg+xml',
      'image/SVG+XML; charset=utf-8',
      'image/svg',
      'image/tiff',
      'image/x-icon',
      'image/'
    ]) {
      const view = answerView(type);
      expect(view.kind).toBe('download');
    }
    expect(answerView('image/svg+xml')).toEqual({
      kind: 'download',
      type: 'image/svg+xml',
      fileName: 'answer.svg'
    });
    expect(answerView('image/')).toMatchObject({ fileName: 'answer' });
  });

  it('shows everything else as text', () => {
    for (const type of ['application/json', 'text/html', 'text/xml', '']) {
      expect(answerView(type)).toEqual({ kind: 'text' });
    }
    expect(mediaType(' Text/HTML ; charset=utf-8')).toBe('text/html');
  });
});

describe('viewBlob', () => {
  const bytes = new Blob(['<svg><script>alert(1)</script></svg>'], {
    type: 'image/svg+xml'
  });

  it('types a download application/octet-stream, never an image', async () => {
    const blob = viewBlob(bytes, answerView('image/svg+xml'));
    expect(blob.type).toBe(DOWNLOAD_TYPE);
    expect(await blob.text()).toBe(await bytes.text());
  });

  it('types an inline image with the allow-listed type, not the blob it came in', () => {
    expect(viewBlob(bytes, answerView('image/png; x=y')).type).toBe(
      'image/png'
    );
  });
});

describe('formatJSON', () => {
  it('keeps a flat array on one line inside indented objects', () => {
    expect(formatJSON({ a: [1, 2], b: { c: 'x' } })).toBe(
      '{\n  "a": [1, 2],\n  "b": {\n    "c": "x"\n  }\n}'
    );
  });

  it('writes a grid one row per line', () => {
    const grid = [
      [0.5, -1],
      [2, 0]
    ];
    expect(formatJSON(grid)).toBe('[\n  [0.5, -1],\n  [2, 0]\n]');
    expect(formatJSON(grid).split('\n')).toHaveLength(4);
  });

  it('reads back as the same value, strings with commas included', () => {
    const value = { s: ['a,b', null, true], e: [], o: {} };
    expect(JSON.parse(formatJSON(value))).toEqual(value);
  });
});
