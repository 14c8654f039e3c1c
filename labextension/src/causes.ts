/**
 * Why a version's workers failed, for its card and the scale notification: the
 * server's summary has worker counts but no reason, so the reason is read from
 * the version's log (`GET serve/logs/{m}/{v}`, `failureCause` in logs.ts) once
 * per failure, and forgotten when the version has no failed worker any more.
 */

import { query, serveJSON, servePath } from './api';
import { failureCause } from './logs';
import { IModelSummary, ISummary, modelKey } from './summary';

const LINES = 300; // enough for a few tracebacks

/** The cause of `model`'s failed workers, from its log; null when unknown. */
export async function versionCause(
  model: Pick<IModelSummary, 'modelName' | 'modelVersion'>
): Promise<string | null> {
  const path = servePath('logs', model.modelName, model.modelVersion);
  try {
    const answer = await serveJSON<{ lines?: unknown }>(
      `${path}${query({ lines: LINES })}`
    );
    const lines = Array.isArray(answer.lines) ? answer.lines.map(String) : [];
    return failureCause(lines);
  } catch {
    return null;
  }
}

/** The causes of the failed versions of the latest summary. */
export class FailureCauses {
  /** `found` is told each cause as it arrives. */
  constructor(private _found: (key: string, cause: string) => void) {}

  /** Look up the versions that started failing; forget those that recovered. */
  update(summary: ISummary): void {
    const failing = new Set<string>();
    for (const model of summary.models) {
      if (model.workerCounts.failed === 0) {
        continue;
      }
      const key = modelKey(model);
      failing.add(key);
      if (!this._asked.has(key)) {
        this._asked.add(key);
        void versionCause(model).then(cause => {
          if (cause !== null && this._asked.has(key)) {
            this._causes.set(key, cause);
            this._found(key, cause);
          }
        });
      }
    }
    for (const key of [...this._asked]) {
      if (!failing.has(key)) {
        this._asked.delete(key);
        this._causes.delete(key);
      }
    }
  }

  /** The known cause of a failing version, else the empty string. */
  get(key: string): string {
    return this._causes.get(key) ?? '';
  }

  private _asked = new Set<string>();
  private _causes = new Map<string, string>();
}
