/**
 * What the panel's buttons, the palette and the file browser's "Serve this model"
 * do: TorchServe's management calls, with JupyterLab notifications for progress
 * (workers starting) and for failures (TorchServe's message and the server's cause).
 *
 * The panel registers as a REST client does with `synchronous=true`: the answer
 * comes once the workers are ready, or is the failure (500 with the handler's
 * exception as its cause) with nothing left registered; one worker asked is one
 * worker started. A progress notification is never updated into its final state
 * but dismissed for a fresh one: an update sent before the toaster is shown (it
 * loads lazily) is lost, which left "starting workers…" up after a failure.
 */

import {
  Dialog,
  Notification,
  showDialog,
  showErrorMessage
} from '@jupyterlab/apputils';
import { PageConfig } from '@jupyterlab/coreutils';

import {
  ServeRequestError,
  errorText,
  query,
  requestServe,
  servePath
} from './api';
import {
  IRegisterDefaults,
  IRegisterOptions,
  askRegisterOptions
} from './forms';
import { ServingModel } from './model';
import { uploadToStore } from './store';
import { IModelSummary, ISummary, modelKey } from './summary';

/** Archive names the server registers (jupyter_serve/server/registry/sources.py). */
export const ARCHIVE = /\.(mar|zip|tgz|tar\.gz)$/i;

export interface IActionContext {
  model: ServingModel;
  defaults: () => IRegisterDefaults;
  openLog: (name: string, version: string) => void;
}

/** Show a failed action as an error notification carrying the server's message. */
export function reportError(what: string, error: unknown): void {
  notifyError(`${what}: ${errorText(error)}`);
}

/** JupyterLab cuts a toast's message at this length. */
const TOAST_LENGTH = 140;

/** An error notification; a message too long for a toast gets a Details button. */
export function notifyError(message: string): string {
  const details = {
    label: 'Details',
    callback: () => void showErrorMessage('Serving', message)
  };
  return Notification.error(message, {
    autoClose: 10000,
    actions: message.length > TOAST_LENGTH ? [details] : []
  });
}

async function statusOf(response: Response): Promise<string> {
  try {
    const body = (await response.json()) as { status?: unknown };
    return typeof body.status === 'string' ? body.status : '';
  } catch {
    return '';
  }
}

/**
 * Follow a version's workers in one notification until `target` are ready (success),
 * they fail (error, with the cause from the log and a button opening it) or the
 * version is unregistered; the final state is a fresh notification.
 */
export function followWorkers(
  ctx: IActionContext,
  key: string,
  target: number,
  label: string
): void {
  const id = Notification.emit(`${label}: starting workers…`, 'in-progress', {
    autoClose: false
  });
  let shown = '';
  const finish = (message: string, type: Notification.TypeOptions): void => {
    Notification.dismiss(id);
    const actions = type === 'error' ? [logAction(ctx, key)] : [];
    Notification.emit(message, type, { autoClose: 10000, actions });
  };
  ctx.model.watch((summary: ISummary) => {
    const model = summary.models.find(version => modelKey(version) === key);
    if (model === undefined) {
      finish(`${key} is no longer registered`, 'warning');
      return true;
    }
    const counts = model.workerCounts;
    if (counts.target === target && counts.ready === target) {
      finish(`${label}: ${counts.ready}/${target} workers ready`, 'success');
      return true;
    }
    if (model.status === 'failed') {
      const cause = model.cause ? ` (cause: ${model.cause})` : '; see the log';
      finish(`${label}: the workers failed to start${cause}`, 'error');
      return true;
    }
    const message = `${label}: ${counts.ready}/${target} workers ready, ${counts.starting} starting`;
    if (message !== shown) {
      shown = message;
      Notification.update({
        id,
        message,
        type: 'in-progress',
        autoClose: false
      });
    }
    return false;
  });
}

function logAction(ctx: IActionContext, key: string): Notification.IAction {
  const [name, version] = splitKey(key);
  return { label: 'Open log', callback: () => ctx.openLog(name, version) };
}

/** (name, version) of a `name/version` key (a version holds no slash). */
export function splitKey(key: string): [string, string] {
  const cut = key.lastIndexOf('/');
  return [key.slice(0, cut), key.slice(cut + 1)];
}

/** POST models with `synchronous=true`: the workers are ready when it answers (module doc). */
export async function registerUrl(
  ctx: IActionContext,
  url: string,
  options: IRegisterOptions
): Promise<void> {
  const before = new Set((ctx.model.summary?.models ?? []).map(modelKey));
  const params = query({
    url,
    model_name: options.modelName || undefined,
    initial_workers: options.workers,
    batch_size: options.batchSize,
    max_batch_delay: options.maxBatchDelay,
    synchronous: true
  });
  const id = Notification.emit(
    `Serving ${url}: starting workers…`,
    'in-progress',
    { autoClose: false }
  );
  let message: string;
  try {
    message = await statusOf(
      await requestServe(`models${params}`, { method: 'POST' })
    );
  } finally {
    Notification.dismiss(id);
  }
  await ctx.model.refresh();
  const added = (ctx.model.summary?.models ?? []).filter(
    model => !before.has(modelKey(model))
  );
  for (const model of added) {
    const { ready, target } = model.workerCounts;
    Notification.success(
      `Serving ${modelKey(model)}: ${ready}/${target} workers ready`,
      { autoClose: 6000 }
    );
  }
  if (added.length === 0) {
    Notification.success(message || 'Registered', { autoClose: 6000 });
  }
}

/** The absolute path on the server of a file browser path (JupyterLab's `serverRoot`). */
export function serverPath(path: string): string | null {
  const root = PageConfig.getOption('serverRoot');
  if (!root) {
    return null;
  }
  return root.endsWith('/') ? `${root}${path}` : `${root}/${path}`;
}

/**
 * "Serve this model" on a file browser item. The server registers the path
 * itself when it may read it there (the model store, a `jupyter_serve_work`
 * folder, or anywhere with `allow_local_paths`); an archive elsewhere is
 * uploaded into the model store first (`PUT serve/model-store/{file}`) and
 * registered by name. A folder elsewhere gets the server's refusal.
 */
export async function serveContentsItem(
  ctx: IActionContext,
  path: string,
  isDir: boolean
): Promise<void> {
  const what = isDir ? `the model folder ${path}` : path;
  const options = await askRegisterOptions(what, ctx.defaults());
  if (options === null) {
    return;
  }
  try {
    await registerContentsItem(ctx, path, isDir, options);
  } catch (error) {
    reportError(`Serving ${path} failed`, error);
  }
}

async function registerContentsItem(
  ctx: IActionContext,
  path: string,
  isDir: boolean,
  options: IRegisterOptions
): Promise<void> {
  const absolute = serverPath(path);
  const uploadable = !isDir && ARCHIVE.test(path);
  if (absolute !== null) {
    try {
      await registerUrl(ctx, absolute, options);
      return;
    } catch (error) {
      const refused =
        error instanceof ServeRequestError && error.status === 404;
      if (!(refused && uploadable)) {
        throw error;
      }
    }
  }
  if (!uploadable) {
    throw new ServeRequestError(
      `${path} is not an archive the server can register`,
      400
    );
  }
  const name = await uploadToStore(path, ctx.model.summary?.models ?? []);
  if (name !== null) {
    await registerUrl(ctx, name, options);
  }
}

/** PUT models/{m}/{v}?min_worker=N&max_worker=N, then follow the workers to N. */
export async function scaleVersion(
  ctx: IActionContext,
  model: Pick<IModelSummary, 'modelName' | 'modelVersion'>,
  workers: string
): Promise<void> {
  const path = servePath('models', model.modelName, model.modelVersion);
  await requestServe(
    `${path}${query({ min_worker: workers, max_worker: workers })}`,
    {
      method: 'PUT'
    }
  );
  followWorkers(
    ctx,
    modelKey(model),
    Number(workers),
    `Scaling ${modelKey(model)} to ${workers}`
  );
}

/** PUT models/{m}/{v}/set-default. */
export async function setDefaultVersion(
  ctx: IActionContext,
  model: Pick<IModelSummary, 'modelName' | 'modelVersion'>
): Promise<void> {
  const path = servePath(
    'models',
    model.modelName,
    model.modelVersion,
    'set-default'
  );
  const message = await statusOf(await requestServe(path, { method: 'PUT' }));
  Notification.success(message || `${modelKey(model)} is the default version`, {
    autoClose: 6000
  });
  await ctx.model.refresh();
}

/** DELETE models/{m}/{v} after the user confirmed; false when they did not. */
export async function unregisterVersion(
  ctx: IActionContext,
  model: Pick<IModelSummary, 'modelName' | 'modelVersion'>
): Promise<boolean> {
  const key = modelKey(model);
  const answer = await showDialog({
    title: 'Unregister model',
    body: `Stop the workers of ${key} and unregister it?`,
    buttons: [Dialog.cancelButton(), Dialog.warnButton({ label: 'Unregister' })]
  });
  if (!answer.button.accept) {
    return false;
  }
  const path = servePath('models', model.modelName, model.modelVersion);
  const message = await statusOf(
    await requestServe(path, { method: 'DELETE' })
  );
  Notification.success(message || `${key} unregistered`, { autoClose: 6000 });
  await ctx.model.refresh();
  return true;
}
