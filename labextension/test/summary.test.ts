import { describe, expect, it } from 'vitest';

import {
  describeMemory,
  describeStateful,
  describeWorkers,
  formatFill,
  formatMs,
  formatRate,
  modelKey,
  servedFrom,
  statusText
} from '../src/summary';
import { summary, version } from './fixtures';

describe('figures', () => {
  it('writes rates with a precision that suits them', () => {
    expect(formatRate(0)).toBe('0');
    expect(formatRate(0.4)).toBe('0.40');
    expect(formatRate(12.34)).toBe('12.3');
    expect(formatRate(1234.5)).toBe('1235');
    expect(formatRate(null)).toBe('–');
    expect(formatRate(Number.NaN)).toBe('–');
  });

  it('writes latencies in ms and a dash before the first request', () => {
    expect(formatMs(null)).toBe('–');
    expect(formatMs(1.234)).toBe('1.2 ms');
    expect(formatMs(250.6)).toBe('251 ms');
  });

  it('writes batch fill as a percentage', () => {
    expect(formatFill(0.125)).toBe('13%');
    expect(formatFill(1)).toBe('100%');
    expect(formatFill(null)).toBe('–');
  });
});

describe('versions', () => {
  it('keys a version by name and version', () => {
    expect(modelKey(version({ modelName: 'a', modelVersion: '2.0' }))).toBe(
      'a/2.0'
    );
  });

  it('counts workers by state with their devices', () => {
    const model = version({
      workers: [
        { id: '1', status: 'READY', device: 'cpu', pid: 1, memoryUsage: 0 },
        { id: '2', status: 'UNLOADING', device: 'gpu', pid: 2, memoryUsage: 0 }
      ],
      workerCounts: { target: 3, ready: 1, starting: 1, failed: 1 }
    });
    expect(describeWorkers(model)).toBe(
      '1 ready · 1 starting · 1 failed (cpu, gpu)'
    );
  });

  it("shows each worker's own memory, and its resident size on hover", () => {
    const mib = 2 ** 20;
    const model = version({
      workers: [
        {
          id: '1',
          status: 'READY',
          device: 'cpu',
          pid: 1,
          memoryUsage: 190 * mib,
          memoryOwn: 96 * mib
        },
        {
          id: '2',
          status: 'READY',
          device: 'cpu',
          pid: 2,
          memoryUsage: 180 * mib,
          memoryOwn: 11 * mib
        }
      ]
    });
    const memory = describeMemory(model);
    expect(memory.text).toBe('memory: 96 + 11 MiB own');
    expect(memory.title).toContain('what one more worker costs (PSS)');
    expect(memory.title).toMatch(/190 \+ 180 MiB\.$/);
    const unmeasured = version({
      workers: [
        { id: '1', status: 'READY', device: 'cpu', pid: 1, memoryUsage: 5 }
      ]
    });
    expect(describeMemory(unmeasured)).toEqual({ text: '', title: '' });
  });

  it('shows open sequences and steps per second for stateful models only', () => {
    expect(describeStateful(version({}))).toBe('');
    const sequences = version({ sequences: { open: 1, max: 4 } });
    expect(describeStateful(sequences)).toBe('1/4 sequence open');
    const both = version({
      sequences: { open: 3, max: 4 },
      continuousBatching: true,
      stepsPerSecond: 12.34
    });
    expect(describeStateful(both)).toBe('3/4 sequences open · 12.3 steps/s');
    const continuous = version({ continuousBatching: true, stepsPerSecond: 0 });
    expect(describeStateful(continuous)).toBe('0 steps/s');
  });

  it('shows sequences in flight and tokens per second for a language model', () => {
    const lm = version({
      continuousBatching: true,
      stepsPerSecond: 9,
      languageModel: true,
      inFlight: 2,
      tokensPerSecond: 17.25
    });
    expect(describeStateful(lm)).toBe('2 in flight · 17.3 tokens/s');
    const idle = version({
      continuousBatching: true,
      languageModel: true,
      inFlight: 0,
      tokensPerSecond: 0
    });
    expect(describeStateful(idle)).toBe('0 in flight · 0 tokens/s');
    const one = version({
      languageModel: true,
      inFlight: 1,
      tokensPerSecond: 3
    });
    expect(describeStateful(one)).toBe('1 in flight · 3.00 tokens/s');
    // Not continuously batched: no token rate, and no line.
    const whole = version({ languageModel: true, tokensPerSecond: null });
    expect(describeStateful(whole)).toBe('');
    // Another continuously batched model keeps its steps per second.
    const steps = version({
      continuousBatching: true,
      inFlight: 3,
      stepsPerSecond: 2
    });
    expect(describeStateful(steps)).toBe('2.00 steps/s');
  });

  it('says how many models serve and their total rate in the status bar', () => {
    expect(statusText(null)).toBe('Serving: –');
    const two = summary(
      version({ throughputRps: 1.5 }),
      version({ modelName: 'other', throughputRps: 2 })
    );
    expect(statusText(two)).toBe('Serving: 2 models · 3.50 req/s');
    expect(statusText(summary(version()))).toBe('Serving: 1 model · 0 req/s');
  });
});

describe('servedFrom', () => {
  it('names the versions registered from a store file, by name or path', () => {
    const models = [
      version({ modelUrl: 'demo-2.0.mar', modelVersion: '2.0' }),
      version({ modelUrl: '/srv/store/demo-2.0.mar', modelVersion: '3.0' }),
      version({ modelUrl: 'other-demo-2.0.mar', modelVersion: '4.0' })
    ];
    expect(servedFrom('demo-2.0.mar', models)).toEqual([
      'demo/2.0',
      'demo/3.0'
    ]);
    expect(servedFrom('none.mar', models)).toEqual([]);
  });
});
