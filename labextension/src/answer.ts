/**
 * How Try-it shows a successful answer, decided from its Content-Type alone.
 *
 * Only raster image types on an explicit allow-list are shown inline, through a
 * `blob:` URL typed with the allow-listed type (never the server's string). Any
 * other `image/*` answer is offered as a download whose blob is typed
 * `application/octet-stream`: a `blob:` URL has the Jupyter page's origin, and an
 * `image/svg+xml` one opened in a tab ran the answer's scripts with it. Everything
 * else is shown as text (`textContent`, never parsed as HTML).
 */

/** The image types shown inline: rasters, which carry no script. */
export const RASTER_TYPES: readonly string[] = [
  'image/png',
  'image/jpeg',
  'image/gif',
  'image/webp',
  'image/bmp',
  'image/avif'
];

/** The type every downloaded answer's blob has, so no browser renders it. */
export const DOWNLOAD_TYPE = 'application/octet-stream';

export type AnswerView =
  | { kind: 'image'; type: string }
  | { kind: 'download'; type: string; fileName: string }
  | { kind: 'text' };

/** `image/svg+xml` from `Image/SVG+XML; charset=utf-8`. */
export function mediaType(contentType: string): string {
  return contentType.split(';')[0].trim().toLowerCase();
}

/** How an answer of `contentType` is shown (module docstring). */
export function answerView(contentType: string): AnswerView {
  const type = mediaType(contentType);
  if (RASTER_TYPES.includes(type)) {
    return { kind: 'image', type };
  }
  if (type.startsWith('image/')) {
    return { kind: 'download', type, fileName: downloadName(type) };
  }
  return { kind: 'text' };
}

/** `answer.svg` for `image/svg+xml`: a plain name from the subtype. */
function downloadName(type: string): string {
  const subtype = type.slice('image/'.length).split('+')[0];
  const extension = subtype.replace(/[^a-z0-9]/g, '').slice(0, 16);
  return extension ? `answer.${extension}` : 'answer';
}

/** The answer's bytes in a blob typed for its view: the raster type, or a download. */
export function viewBlob(bytes: Blob, view: AnswerView): Blob {
  const type = view.kind === 'image' ? view.type : DOWNLOAD_TYPE;
  return new Blob([bytes], { type });
}

/**
 * JSON as Try-it shows it: indented like `JSON.stringify(value, null, 2)`, but an
 * array holding no array or object stays on one line, so an attribution map of
 * 28 x 28 numbers is 28 lines, not 784.
 */
export function formatJSON(value: unknown, indent = ''): string {
  if (Array.isArray(value)) {
    if (value.every(item => item === null || typeof item !== 'object')) {
      return `[${value.map(item => JSON.stringify(item) ?? 'null').join(', ')}]`;
    }
    const inner = indent + '  ';
    const items = value.map(item => inner + formatJSON(item, inner));
    return value.length ? `[\n${items.join(',\n')}\n${indent}]` : '[]';
  }
  if (value !== null && typeof value === 'object') {
    const inner = indent + '  ';
    const entries = Object.entries(value).map(
      ([key, item]) =>
        `${inner}${JSON.stringify(key)}: ${formatJSON(item, inner)}`
    );
    return entries.length ? `{\n${entries.join(',\n')}\n${indent}}` : '{}';
  }
  return JSON.stringify(value) ?? String(value);
}
