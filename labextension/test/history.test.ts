import { describe, expect, it } from 'vitest';

import { FigureHistory, sparkLegend, sparklinePoints } from '../src/history';
import { summary, version } from './fixtures';

describe('FigureHistory', () => {
  it('keeps the newest figures of each version, capped', () => {
    const history = new FigureHistory(3);
    for (const rate of [1, 2, 3, 4]) {
      history.record(
        summary(
          version({
            throughputRps: rate,
            latencyMs: { p50: rate * 10, p99: null }
          })
        )
      );
    }
    expect(history.series('demo/1.0')).toEqual({
      throughput: [2, 3, 4],
      latency: [20, 30, 40]
    });
  });

  it('counts a version without latency yet as 0 and forgets versions that are gone', () => {
    const history = new FigureHistory();
    history.record(summary(version(), version({ modelVersion: '2.0' })));
    expect(history.series('demo/2.0').latency).toEqual([0]);
    history.record(summary(version()));
    expect(history.series('demo/2.0')).toEqual({ throughput: [], latency: [] });
    expect(history.series('demo/1.0').throughput).toEqual([0, 0]);
  });
});

describe('sparklinePoints', () => {
  it('puts the newest value at the right edge and the largest at the top', () => {
    expect(sparklinePoints([0, 5, 10], 100, 20, 3)).toBe(
      '0.0,20.0 50.0,10.0 100.0,0.0'
    );
  });

  it('draws a short history at the right, in slots of the full width', () => {
    expect(sparklinePoints([2, 2], 100, 20, 5)).toBe('75.0,0.0 100.0,0.0');
  });

  it('lays all-zero figures on the bottom line and draws nothing without data', () => {
    expect(sparklinePoints([0, 0], 10, 8, 2)).toBe('0.0,8.0 10.0,8.0');
    expect(sparklinePoints([], 10, 8)).toBe('');
  });
});

describe('sparkLegend', () => {
  it('names the peaks and the latest values', () => {
    const legend = sparkLegend({ throughput: [1, 12.5, 3], latency: [8.2, 4] });
    expect(legend.throughput).toBe('req/s, peak 12.5');
    expect(legend.latency).toBe('p50, peak 8.2 ms');
    expect(legend.latest).toContain('now: 3.00 req/s, p50 4.0 ms');
  });

  it('writes dashes before any refresh', () => {
    const legend = sparkLegend({ throughput: [], latency: [] });
    expect(legend.throughput).toBe('req/s, peak –');
    expect(legend.latency).toBe('p50, peak –');
  });
});
