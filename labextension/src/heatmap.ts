/**
 * Explanations as a heat map: the attribution grid of an explanation answer and
 * the colour of each cell, as the notebook's viewer draws them
 * (jupyter_serve/kernel/widgets/explanations.py and plots.py): red pushes towards the
 * answer, blue away from it, opacity by magnitude.
 */

export type Grid = number[][];

export const POSITIVE: [number, number, number] = [214, 39, 40];
export const NEGATIVE: [number, number, number] = [31, 119, 180];

function isNumberArray(value: unknown): value is number[] {
  return (
    Array.isArray(value) &&
    value.length > 0 &&
    value.every(item => typeof item === 'number' && Number.isFinite(item))
  );
}

function isGrid(value: unknown): value is Grid {
  if (!Array.isArray(value) || value.length === 0 || !isNumberArray(value[0])) {
    return false;
  }
  const width = value[0].length;
  return value.every(row => isNumberArray(row) && row.length === width);
}

function sumChannels(channels: Grid[]): Grid {
  const first = channels[0];
  return first.map((row, y) =>
    row.map((_, x) => channels.reduce((sum, channel) => sum + channel[y][x], 0))
  );
}

function depth(value: unknown): number {
  return Array.isArray(value) && value.length > 0 ? 1 + depth(value[0]) : 0;
}

/**
 * A [H][W] grid from an explanation: [H][W], [C][H][W] (channels summed), either
 * with a leading batch of one; or a flat list (a batch of one too) shaped like
 * `like`, the input when it was a grid of the same size. Null when the answer is
 * no image attribution.
 */
export function attributionGrid(
  answer: unknown,
  like?: Grid | null
): Grid | null {
  let data = answer;
  while (Array.isArray(data) && data.length === 1 && depth(data) > 1) {
    data = data[0];
  }
  if (depth(data) === 3 && Array.isArray(data) && data.every(isGrid)) {
    const channels = data as Grid[];
    const [height, width] = [channels[0].length, channels[0][0].length];
    const same = channels.every(
      c => c.length === height && c[0].length === width
    );
    return same ? sumChannels(channels) : null;
  }
  if (isGrid(data)) {
    return data;
  }
  if (isNumberArray(data) && like && gridSize(like) === data.length) {
    const flat = data;
    const width = like[0].length;
    return like.map((_, y) => flat.slice(y * width, (y + 1) * width));
  }
  return null;
}

/** The number of cells of a grid. */
export function gridSize(grid: Grid): number {
  return grid.length * (grid[0]?.length ?? 0);
}

/** The input as a grid of numbers, when it is one (a JSON image such as 8x8 digits). */
export function inputGrid(text: string): Grid | null {
  try {
    const value: unknown = JSON.parse(text);
    const data =
      value !== null && typeof value === 'object' && 'data' in value
        ? (value as { data: unknown }).data
        : value;
    return isGrid(data) ? data : null;
  } catch {
    return null;
  }
}

/** RGBA bytes of one cell: the sign picks the colour, the magnitude the opacity. */
export function cellColour(
  value: number,
  scale: number,
  alpha = 0.6
): [number, number, number, number] {
  const opacity = scale > 0 ? Math.min(Math.abs(value) / scale, 1) : 0;
  const [red, green, blue] = value >= 0 ? POSITIVE : NEGATIVE;
  return [red, green, blue, Math.round(255 * alpha * opacity)];
}

/** The largest magnitude in a grid (0 for an all-zero grid). */
export function gridScale(grid: Grid): number {
  return grid.reduce(
    (top, row) =>
      row.reduce((most, value) => Math.max(most, Math.abs(value)), top),
    0
  );
}

/** The grid as RGBA pixels (row-major), ready for an ImageData. */
export function heatPixels(grid: Grid, alpha = 0.6): Uint8ClampedArray {
  const scale = gridScale(grid);
  const width = grid[0].length;
  const pixels = new Uint8ClampedArray(grid.length * width * 4);
  grid.forEach((row, y) =>
    row.forEach((value, x) => {
      pixels.set(cellColour(value, scale, alpha), (y * width + x) * 4);
    })
  );
  return pixels;
}

/** A grey picture of an input grid (its values scaled to 0..255), as RGBA pixels. */
export function greyPixels(grid: Grid): Uint8ClampedArray {
  const values = grid.flat();
  const low = Math.min(...values);
  const high = Math.max(...values);
  const span = high > low ? high - low : 1;
  const pixels = new Uint8ClampedArray(values.length * 4);
  values.forEach((value, index) => {
    const level = 255 - Math.round(((value - low) / span) * 255);
    pixels.set([level, level, level, 255], index * 4);
  });
  return pixels;
}
