import { describe, expect, it } from 'vitest';

import {
  NEGATIVE,
  POSITIVE,
  attributionGrid,
  cellColour,
  greyPixels,
  heatPixels,
  inputGrid
} from '../src/heatmap';

describe('attributionGrid', () => {
  it('takes a [H][W] grid as it is', () => {
    expect(
      attributionGrid([
        [1, 2],
        [3, 4]
      ])
    ).toEqual([
      [1, 2],
      [3, 4]
    ]);
  });

  it('sums the channels of [C][H][W], under a batch of one', () => {
    const channels = [
      [
        [1, 2],
        [3, 4]
      ],
      [
        [10, 20],
        [30, 40]
      ]
    ];
    expect(attributionGrid([channels])).toEqual([
      [11, 22],
      [33, 44]
    ]);
  });

  it('shapes a flat answer like the input grid', () => {
    expect(
      attributionGrid(
        [1, 2, 3, 4],
        [
          [0, 0],
          [0, 0]
        ]
      )
    ).toEqual([
      [1, 2],
      [3, 4]
    ]);
    expect(
      attributionGrid(
        [[1, 2, 3, 4]],
        [
          [0, 0],
          [0, 0]
        ]
      )
    ).toEqual([
      [1, 2],
      [3, 4]
    ]);
  });

  it('refuses answers that are no image attribution', () => {
    expect(attributionGrid({ setosa: 0.9 })).toBeNull();
    expect(attributionGrid([1, 2, 3])).toBeNull();
    expect(attributionGrid([[1, 2], [3]])).toBeNull();
    expect(
      attributionGrid(
        [1, 2, 3],
        [
          [0, 0],
          [0, 0]
        ]
      )
    ).toBeNull();
  });
});

describe('colours', () => {
  it('colours by sign, opacity by magnitude', () => {
    expect(cellColour(2, 4, 1)).toEqual([...POSITIVE, 128]);
    expect(cellColour(-4, 4, 1)).toEqual([...NEGATIVE, 255]);
    expect(cellColour(1, 0)).toEqual([...POSITIVE, 0]);
  });

  it('turns a grid into RGBA pixels, row-major', () => {
    const pixels = heatPixels([[1, -1]], 1);
    expect([...pixels]).toEqual([...POSITIVE, 255, ...NEGATIVE, 255]);
  });

  it('draws an input grid dark where its values are high', () => {
    expect([...greyPixels([[0, 16]])]).toEqual([
      255, 255, 255, 255, 0, 0, 0, 255
    ]);
  });

  it('reads a JSON input grid, plain or under "data"', () => {
    expect(inputGrid('[[1, 2], [3, 4]]')).toEqual([
      [1, 2],
      [3, 4]
    ]);
    expect(inputGrid('{"data": [[1], [2]]}')).toEqual([[1], [2]]);
    expect(inputGrid('[6.5, 3.0]')).toBeNull();
    expect(inputGrid('not json')).toBeNull();
  });
});
