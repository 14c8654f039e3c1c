/** Summaries as `GET serve/summary` answers them, for the unit tests. */

import { IModelSummary, ISummary } from '../src/summary';

export function version(overrides: Partial<IModelSummary> = {}): IModelSummary {
  return {
    modelName: 'demo',
    modelVersion: '1.0',
    isDefault: true,
    status: 'healthy',
    torchserveStatus: 'Healthy',
    minWorkers: 1,
    maxWorkers: 1,
    batchSize: 8,
    maxBatchDelay: 20,
    deviceType: 'cpu',
    modelUrl: 'demo.mar',
    workers: [
      { id: '9000', status: 'READY', device: 'cpu', pid: 12, memoryUsage: 1 }
    ],
    workerCounts: { target: 1, ready: 1, starting: 0, failed: 0 },
    queue: { pending: 0, remainingCapacity: 100 },
    requests: 0,
    throughputRps: 0,
    latencyMs: { p50: null, p99: null },
    batchFill: null,
    ...overrides
  };
}

export function summary(...models: IModelSummary[]): ISummary {
  return {
    models,
    totals: {
      models: new Set(models.map(m => m.modelName)).size,
      versions: models.length,
      workersReady: models.reduce((sum, m) => sum + m.workerCounts.ready, 0),
      throughputRps: models.reduce((sum, m) => sum + m.throughputRps, 0),
      requests: { '2XX': 0, '4XX': 0, '5XX': 0 }
    }
  };
}
