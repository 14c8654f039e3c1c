/**
 * Following a model's log through `GET serve/logs/{m}/{v}?lines=N`, which answers
 * the newest N lines: `newLines` tells which lines of a fresh answer are new.
 */

/**
 * The lines of `current` that `previous` did not show yet.
 *
 * Both are windows onto the same growing log, so the end of `previous` is the
 * start of `current` (shifted by the lines that scrolled out); the longest such
 * overlap is taken. Lines carry a millisecond time stamp and the worker's id
 * (jupyter_serve/server/pool/logs.py), so equal neighbours are rare. With no overlap at
 * all (the log was cleared, or more lines arrived than one answer holds) every
 * line of `current` is new.
 */
export function newLines(
  previous: readonly string[],
  current: readonly string[]
): string[] {
  const most = Math.min(previous.length, current.length);
  for (let overlap = most; overlap > 0; overlap--) {
    if (sameRun(previous, previous.length - overlap, current, overlap)) {
      return current.slice(overlap);
    }
  }
  return [...current];
}

function sameRun(
  previous: readonly string[],
  from: number,
  current: readonly string[],
  count: number
): boolean {
  for (let index = 0; index < count; index++) {
    if (previous[from + index] !== current[index]) {
      return false;
    }
  }
  return true;
}
