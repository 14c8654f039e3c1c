/**
 * Drawing an explanation's heat map (`heatmap.ts` computes its colours) on Try-it's
 * canvas: the input underneath (the picture sent, or a grey rendering of a JSON
 * grid), the attributions over it, nearest-neighbour scaled to `CANVAS_WIDTH`.
 */

import { Grid, greyPixels, heatPixels } from './heatmap';

export const CANVAS_WIDTH = 256;

/** Draw `grid` over `under` (an image file or an input grid); false when no 2D context. */
export async function drawHeatmap(
  canvas: HTMLCanvasElement,
  grid: Grid,
  under: { file?: File; like: Grid | null }
): Promise<boolean> {
  const context = canvas.getContext('2d');
  if (context === null) {
    return false;
  }
  const height = Math.round((CANVAS_WIDTH * grid.length) / grid[0].length);
  canvas.width = CANVAS_WIDTH;
  canvas.height = height;
  context.imageSmoothingEnabled = false;
  context.fillStyle = 'white';
  context.fillRect(0, 0, CANVAS_WIDTH, height);
  if (under.file && under.file.type.startsWith('image/')) {
    const bitmap = await createImageBitmap(under.file);
    context.drawImage(bitmap, 0, 0, CANVAS_WIDTH, height);
  } else if (under.like !== null) {
    await drawPixels(context, greyPixels(under.like), under.like, height);
  }
  await drawPixels(context, heatPixels(grid), grid, height);
  return true;
}

/** Draw RGBA pixels of a grid over the whole canvas width. */
async function drawPixels(
  context: CanvasRenderingContext2D,
  pixels: Uint8ClampedArray,
  grid: Grid,
  height: number
): Promise<void> {
  const image = new ImageData(
    new Uint8ClampedArray(pixels),
    grid[0].length,
    grid.length
  );
  const bitmap = await createImageBitmap(image);
  context.drawImage(bitmap, 0, 0, CANVAS_WIDTH, height);
}
