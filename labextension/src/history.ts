/**
 * The recent figures of each model version, kept across refreshes for the
 * sparklines: requests per second and p50 latency, newest last.
 */

import { ISummary, formatMs, formatRate, modelKey } from './summary';

/** How many refreshes a sparkline shows. */
export const HISTORY_LENGTH = 60;

export interface ISeries {
  throughput: number[];
  latency: number[];
}

export class FigureHistory {
  constructor(readonly length: number = HISTORY_LENGTH) {}

  /** Add one refresh; versions gone from the summary lose their history. */
  record(summary: ISummary): void {
    const seen = new Set<string>();
    for (const model of summary.models) {
      const key = modelKey(model);
      seen.add(key);
      const series = this.series(key);
      push(series.throughput, model.throughputRps ?? 0, this.length);
      push(series.latency, model.latencyMs.p50 ?? 0, this.length);
    }
    for (const key of [...this._series.keys()]) {
      if (!seen.has(key)) {
        this._series.delete(key);
      }
    }
  }

  /** The series of one version (empty when it has none yet). */
  series(key: string): ISeries {
    let series = this._series.get(key);
    if (series === undefined) {
      series = { throughput: [], latency: [] };
      this._series.set(key, series);
    }
    return series;
  }

  private _series = new Map<string, ISeries>();
}

function push(values: number[], value: number, length: number): void {
  values.push(value);
  if (values.length > length) {
    values.splice(0, values.length - length);
  }
}

/**
 * SVG polyline points of `values` in a `width` x `height` box: the x axis holds
 * `slots` values (the newest at the right edge), the y axis runs from 0 to the
 * largest value (a flat line at the bottom when all are 0).
 */
export function sparklinePoints(
  values: readonly number[],
  width: number,
  height: number,
  slots: number = HISTORY_LENGTH
): string {
  if (values.length === 0) {
    return '';
  }
  const top = Math.max(...values, 0);
  const step = slots > 1 ? width / (slots - 1) : width;
  const start = width - step * (values.length - 1);
  return values
    .map((value, index) => {
      const x = start + step * index;
      const y = top > 0 ? height - (value / top) * height : height;
      return `${x.toFixed(1)},${y.toFixed(1)}`;
    })
    .join(' ');
}

/** What the sparkline's legend and tooltip say: each line's peak, the latest values. */
export function sparkLegend(series: ISeries): {
  throughput: string;
  latency: string;
  latest: string;
} {
  const peak = (values: number[]): number | null =>
    values.length ? Math.max(...values) : null;
  const last = (values: number[]): number | null =>
    values.length ? values[values.length - 1] : null;
  return {
    throughput: `req/s, peak ${formatRate(peak(series.throughput))}`,
    latency: `p50, peak ${formatMs(peak(series.latency))}`,
    latest: `now: ${formatRate(last(series.throughput))} req/s, p50 ${formatMs(last(series.latency))} (last 2 min: req/s solid, p50 dashed)`
  };
}
