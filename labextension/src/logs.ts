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
 * (jupyter_serve/pool/logs.py), so equal neighbours are rare. With no overlap at
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

/** `2024-01-01T00:00:00.000Z [model/worker] message` (jupyter_serve/pool/logs.py). */
const LOG_LINE = /^\S+ \[(.*)\] ?(.*)$/;
const TRACEBACK = 'Traceback (most recent call last):';
const LOAD_FAILED = 'Load failed: ';

/**
 * Why a version's workers failed, from its log: the exception line ending the
 * newest traceback a worker printed (the handler's exception, as
 * jupyter_serve/registry/start_failure.py takes it), else the newest
 * "Load failed: ..." note; null when the log says neither.
 */
export function failureCause(lines: readonly string[]): string | null {
  const inTraceback = new Set<string>();
  let exception: string | null = null;
  let loadFailed: string | null = null;
  for (const line of lines) {
    const match = LOG_LINE.exec(line);
    if (match === null) {
      continue;
    }
    const [, source, message] = match;
    if (message === TRACEBACK) {
      inTraceback.add(source);
    } else if (message.startsWith(LOAD_FAILED)) {
      loadFailed = message.slice(LOAD_FAILED.length);
    } else if (inTraceback.has(source) && /^\S/.test(message)) {
      exception = message; // the first unindented line ends the traceback
      inTraceback.delete(source);
    }
  }
  return exception ?? loadFailed;
}
