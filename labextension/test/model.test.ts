import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';

import { ServingModel } from '../src/model';
import { ISummary } from '../src/summary';
import { summary, version } from './fixtures';

vi.mock('../src/api', () => ({ serveJSON: vi.fn() }));

/** A fetch answering the queued summaries (or errors), counting its calls. */
function source(...answers: (ISummary | Error)[]) {
  const fetch = vi.fn(async () => {
    const next = answers.length > 1 ? answers.shift()! : answers[0];
    if (next instanceof Error) {
      throw next;
    }
    return next;
  });
  return fetch;
}

beforeEach(() => {
  vi.useFakeTimers();
});

afterEach(() => {
  vi.useRealTimers();
});

describe('ServingModel', () => {
  it('refreshes every interval and records the history', async () => {
    const fetch = source(
      summary(version({ throughputRps: 1 })),
      summary(version({ throughputRps: 3 }))
    );
    const model = new ServingModel(fetch);
    const seen: number[] = [];
    model.changed.connect((_, s) => seen.push(s.totals.throughputRps));
    model.interval = 2;
    await model.refresh();
    await vi.advanceTimersByTimeAsync(2000);
    expect(seen).toEqual([1, 3]);
    expect(model.history.series('demo/1.0').throughput).toEqual([1, 3]);
    model.dispose();
  });

  it('stops refreshing while paused, refreshes on demand, and resumes', async () => {
    const fetch = source(summary(version()));
    const model = new ServingModel(fetch);
    model.interval = 1;
    await model.refresh();
    model.pause();
    await vi.advanceTimersByTimeAsync(5000);
    expect(fetch).toHaveBeenCalledTimes(1);
    await model.refresh();
    await vi.advanceTimersByTimeAsync(5000);
    expect(fetch).toHaveBeenCalledTimes(2);
    model.resume();
    await vi.advanceTimersByTimeAsync(2500);
    expect(fetch).toHaveBeenCalledTimes(5);
    model.dispose();
  });

  it('shares one request between concurrent refreshes', async () => {
    const fetch = source(summary(version()));
    const model = new ServingModel(fetch);
    await Promise.all([model.refresh(), model.refresh(), model.refresh()]);
    expect(fetch).toHaveBeenCalledTimes(1);
    model.dispose();
  });

  it('reports a failing refresh once and its recovery', async () => {
    const fetch = source(
      new Error('Forbidden'),
      new Error('Forbidden'),
      summary(version())
    );
    const model = new ServingModel(fetch);
    const errors: (string | null)[] = [];
    model.errorChanged.connect((_, error) => errors.push(error));
    model.interval = 1;
    await model.refresh();
    await vi.advanceTimersByTimeAsync(2000);
    expect(errors).toEqual(['Forbidden', null]);
    expect(model.summary?.models).toHaveLength(1);
    model.dispose();
  });

  it('lets an action watch summaries until its condition holds', async () => {
    const starting = version({
      workerCounts: { target: 2, ready: 1, starting: 1, failed: 0 }
    });
    const ready = version({
      workerCounts: { target: 2, ready: 2, starting: 0, failed: 0 }
    });
    const fetch = source(summary(starting), summary(starting), summary(ready));
    const model = new ServingModel(fetch);
    model.pause();
    const counts: number[] = [];
    model.watch(s => {
      counts.push(s.models[0].workerCounts.ready);
      return s.models[0].workerCounts.ready === 2;
    });
    await vi.advanceTimersByTimeAsync(5000);
    expect(counts).toEqual([1, 1, 2]);
    expect(fetch).toHaveBeenCalledTimes(3);
    model.dispose();
  });
});
