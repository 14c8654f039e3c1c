/**
 * What `GET serve/summary` answers (jupyter_serve/server/http/summary.py), and how the
 * panel writes its figures. Pure data: nothing here touches the DOM or the network.
 */

/** The panel's status word for one model version. */
export type VersionStatus =
  'healthy' | 'loading' | 'degraded' | 'failed' | 'stopped';

export interface IWorkerSummary {
  id: string;
  status: string;
  device: string;
  pid: number | null;
  /** Resident size (RSS), as TorchServe's describe reports it. */
  memoryUsage: number | null;
  /** The worker's own share (PSS): what one more worker costs. */
  memoryOwn?: number | null;
}

export interface IWorkerCounts {
  target: number;
  ready: number;
  starting: number;
  failed: number;
}

export interface IModelSummary {
  modelName: string;
  modelVersion: string;
  isDefault: boolean;
  status: VersionStatus;
  torchserveStatus: string;
  minWorkers: number;
  maxWorkers: number;
  batchSize: number;
  maxBatchDelay: number;
  deviceType: string;
  modelUrl: string;
  workers: IWorkerSummary[];
  workerCounts: IWorkerCounts;
  /** Why the failed workers failed (their newest failed load), else null. */
  cause?: string | null;
  queue: { pending: number; remainingCapacity: number };
  requests: number;
  throughputRps: number;
  latencyMs: { p50: number | null; p99: number | null };
  batchFill: number | null;
  /** TorchServe's continuousBatching: requests join and leave a running batch. */
  continuousBatching?: boolean;
  /** Handler calls answered per second (a continuous batch's steps). */
  stepsPerSecond?: number;
  /** Sequence batching's open sequences and their limit; null for other models. */
  sequences?: { open: number; max: number } | null;
  /** Requests running in the continuous batches; null without continuous batching. */
  inFlight?: number | null;
  /** A language model's handler (`causal_lm`): Try-it is then a chat (`chat.ts`). */
  languageModel?: boolean;
  /** A continuously batched language model's tokens per second, else null. */
  tokensPerSecond?: number | null;
}

export interface ITotals {
  models: number;
  versions: number;
  workersReady: number;
  throughputRps: number;
  requests: Record<string, number>;
}

export interface ISummary {
  models: IModelSummary[];
  totals: ITotals;
}

/** The key of one model version, unique in a summary. */
export function modelKey(model: {
  modelName: string;
  modelVersion: string;
}): string {
  return `${model.modelName}/${model.modelVersion}`;
}

/** Requests per second, with a precision that suits its size. */
export function formatRate(value: number | null | undefined): string {
  if (value === null || value === undefined || !Number.isFinite(value)) {
    return '–';
  }
  if (value === 0) {
    return '0';
  }
  return value >= 100
    ? value.toFixed(0)
    : value >= 10
      ? value.toFixed(1)
      : value.toFixed(2);
}

/** A latency in milliseconds, or a dash before the first request. */
export function formatMs(value: number | null | undefined): string {
  if (value === null || value === undefined || !Number.isFinite(value)) {
    return '–';
  }
  return value >= 100 ? `${value.toFixed(0)} ms` : `${value.toFixed(1)} ms`;
}

/** How full the batches were, as a percentage. */
export function formatFill(value: number | null | undefined): string {
  if (value === null || value === undefined || !Number.isFinite(value)) {
    return '–';
  }
  return `${Math.round(value * 100)}%`;
}

/** "2 ready · 1 starting · 0 failed" with the devices the workers run on. */
export function describeWorkers(model: IModelSummary): string {
  const counts = model.workerCounts;
  const devices = [...new Set(model.workers.map(worker => worker.device))];
  const on = devices.length ? ` (${devices.join(', ')})` : '';
  return `${counts.ready} ready · ${counts.starting} starting · ${counts.failed} failed${on}`;
}

/** What the memory figure counts (the tooltip of the card's memory line). */
export const OWN_MEMORY_HINT =
  "Each worker's own memory: its private pages plus its share of the pages it " +
  'shares with the worker factory and the other workers (torch, mapped weights), ' +
  'which is what one more worker costs (PSS). Resident sizes (RSS), which count ' +
  'the shared pages in full: ';

/** The version's memory line and its tooltip: each worker's own share, in MiB. */
export function describeMemory(model: IModelSummary): {
  text: string;
  title: string;
} {
  const measured = model.workers.filter(worker => (worker.memoryOwn ?? 0) > 0);
  if (!measured.length) {
    return { text: '', title: '' };
  }
  const own = measured.map(worker => mebibytes(worker.memoryOwn ?? 0));
  const rss = measured.map(worker => mebibytes(worker.memoryUsage ?? 0));
  return {
    text: `memory: ${own.join(' + ')} MiB own`,
    title: `${OWN_MEMORY_HINT}${rss.join(' + ')} MiB.`
  };
}

/**
 * The line of a stateful model: its open sequences (sequence batching) and its steps
 * per second (continuous batching), or, for a continuously batched language model,
 * its sequences in flight (`LANGUAGE_HINT`) and tokens per second; empty for other
 * models. It must fit one line at JupyterLab's default sidebar width.
 */
export function describeStateful(model: IModelSummary): string {
  const parts: string[] = [];
  if (model.sequences) {
    const { open, max } = model.sequences;
    parts.push(`${open}/${max} ${open === 1 ? 'sequence' : 'sequences'} open`);
  }
  if (model.languageModel && typeof model.tokensPerSecond === 'number') {
    parts.push(
      `${model.inFlight ?? 0} in flight`,
      `${formatRate(model.tokensPerSecond)} tokens/s`
    );
  } else if (model.continuousBatching) {
    parts.push(`${formatRate(model.stepsPerSecond ?? 0)} steps/s`);
  }
  return parts.join(' · ');
}

/** The tooltip of a language model's line (`describeStateful`). */
export const LANGUAGE_HINT =
  'Sequences in flight: the requests its continuous batches are generating now ' +
  '(queued ones are the queue figure). Tokens/s: the tokens its steps generated, ' +
  'per second over the last minute (each step gives each running request a token).';

function mebibytes(bytes: number): string {
  return (bytes / 2 ** 20).toFixed(0);
}

/** "1 model", "2 models". */
export function plural(count: number, noun: string): string {
  return `${count} ${noun}${count === 1 ? '' : 's'}`;
}

/** The status-bar text: models serving and their total request rate. */
export function statusText(summary: ISummary | null): string {
  if (summary === null) {
    return 'Serving: –';
  }
  const models = plural(summary.totals.models, 'model');
  return `Serving: ${models} · ${formatRate(summary.totals.throughputRps)} req/s`;
}

/** The versions registered from the model store file `name` (by their `modelUrl`). */
export function servedFrom(
  name: string,
  models: readonly IModelSummary[]
): string[] {
  return models
    .filter(
      model => model.modelUrl === name || model.modelUrl.endsWith(`/${name}`)
    )
    .map(modelKey);
}
