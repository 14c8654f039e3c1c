/**
 * "Did you mean X?": the known name closest to a mistyped one, by edit distance
 * (insertions, deletions, substitutions and swaps of neighbours each count one).
 * Pure: the callers pass the names they know (served models, archives in the store).
 */

/** Edits allowed for a name of `length` characters: one per three, at least one. */
export function allowedEdits(length: number): number {
  return Math.max(1, Math.floor(length / 3));
}

/** The optimal string alignment distance of `a` and `b`, case-insensitive. */
export function editDistance(a: string, b: string): number {
  const [x, y] = [a.toLowerCase(), b.toLowerCase()];
  const rows: number[][] = [];
  for (let i = 0; i <= x.length; i++) {
    rows.push([i, ...new Array<number>(y.length).fill(0)]);
  }
  for (let j = 0; j <= y.length; j++) {
    rows[0][j] = j;
  }
  for (let i = 1; i <= x.length; i++) {
    for (let j = 1; j <= y.length; j++) {
      const same = x[i - 1] === y[j - 1] ? 0 : 1;
      let best = Math.min(
        rows[i - 1][j] + 1,
        rows[i][j - 1] + 1,
        rows[i - 1][j - 1] + same
      );
      if (i > 1 && j > 1 && x[i - 1] === y[j - 2] && x[i - 2] === y[j - 1]) {
        best = Math.min(best, rows[i - 2][j - 2] + 1);
      }
      rows[i][j] = best;
    }
  }
  return rows[x.length][y.length];
}

/** The candidate closest to `name` within its allowed edits (the first of equals); null if none. */
export function closest(
  name: string,
  candidates: Iterable<string>
): string | null {
  let best: string | null = null;
  let bestDistance = allowedEdits(name.length) + 1;
  for (const candidate of candidates) {
    const distance = editDistance(name, candidate);
    if (candidate !== name && distance < bestDistance) {
      best = candidate;
      bestDistance = distance;
    }
  }
  return best;
}

/** "; did you mean X?" for a close candidate, else the empty string. */
export function didYouMean(name: string, candidates: Iterable<string>): string {
  const match = closest(name, candidates);
  return match === null ? '' : `; did you mean ${match}?`;
}
