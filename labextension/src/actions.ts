/**
 * What the panel's buttons, the palette and the file browser's "Serve this model"
 * do: TorchServe's management calls, with JupyterLab notifications for progress
 * (workers starting) and for failures (TorchServe's own message).
 */

import { Dialog, Notification, showDialog } from '@jupyterlab/apputils';
import { PageConfig, PathExt, URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';

import {
  ServeRequestError,
  query,
  requestJupyter,
  requestServe,
  servePath
} from './api';
import {
  IRegisterDefaults,
  IRegisterOptions,
  askRegisterOptions
} from './forms';
import { ServingModel } from './model';
import { IModelSummary, ISummary, modelKey } from './summary';

/** Archive names the server registers (jupyter_serve/registry/sources.py). */
export const ARCHIVE = /\.(mar|zip|tgz|tar\.gz)$/i;

export interface IActionContext {
  model: ServingModel;
  defaults: () => IRegisterDefaults;
  openLog: (name: string, version: string) => void;
}

/** Show a failed action as an error notification carrying the server's message. */
export function reportError(what: string, error: unknown): void {
  const message = error instanceof Error ? error.message : String(error);
  Notification.error(`${what}: ${message}`, { autoClose: 10000 });
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
 * it fails (error, with a button opening its log) or it is unregistered.
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
  const update = (
    message: string,
    type: Notification.TypeOptions,
    done = false
  ): void => {
    if (message !== shown || done) {
      shown = message;
      const actions = type === 'error' ? [logAction(ctx, key)] : [];
      Notification.update({
        id,
        message,
        type,
        autoClose: done ? 6000 : false,
        actions
      });
    }
  };
  ctx.model.watch((summary: ISummary) => {
    const model = summary.models.find(version => modelKey(version) === key);
    if (model === undefined) {
      update(`${key} is no longer registered`, 'warning', true);
      return true;
    }
    const counts = model.workerCounts;
    if (counts.target === target && counts.ready === target) {
      update(
        `${label}: ${counts.ready}/${target} workers ready`,
        'success',
        true
      );
      return true;
    }
    if (model.status === 'failed') {
      update(
        `${label}: the workers failed to start; see the log`,
        'error',
        true
      );
      return true;
    }
    update(
      `${label}: ${counts.ready}/${target} workers ready, ${counts.starting} starting`,
      'in-progress'
    );
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

/** POST models: register `url` without waiting, then follow the new version's workers. */
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
    synchronous: false
  });
  const response = await requestServe(`models${params}`, { method: 'POST' });
  const message = await statusOf(response);
  await ctx.model.refresh();
  const added = (ctx.model.summary?.models ?? []).filter(
    model => !before.has(modelKey(model))
  );
  if (response.status === 202 && added.length > 0) {
    for (const model of added) {
      followWorkers(
        ctx,
        modelKey(model),
        model.workerCounts.target,
        `Serving ${modelKey(model)}`
      );
    }
  } else {
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
  const name = await uploadToStore(path);
  if (name !== null) {
    await registerUrl(ctx, name, options);
  }
}

/** Copy a file of the Jupyter root into the model store; its store name, or null if cancelled. */
export async function uploadToStore(path: string): Promise<string | null> {
  const name = PathExt.basename(path);
  const id = Notification.emit(
    `Uploading ${name} to the model store…`,
    'in-progress',
    {
      autoClose: false
    }
  );
  let bytes: Blob | null = null;
  try {
    bytes = await (await fetchFile(path)).blob();
    const stored = await putArchive(name, bytes, false);
    const message = stored.created
      ? `Uploaded ${name} to the model store`
      : `The model store has ${name}`;
    // A fresh toast, not an update: an upload can end before the in-progress toast is
    // shown (the first toast of a page loads its toaster lazily), and an update arriving
    // then is lost, leaving the spinner up.
    Notification.dismiss(id);
    Notification.success(message, { autoClose: 3000 });
    return stored.url;
  } catch (error) {
    Notification.dismiss(id);
    const taken = error instanceof ServeRequestError && error.status === 409;
    if (!taken || bytes === null) {
      throw error;
    }
    if (!(await confirmReplace(name))) {
      return null;
    }
    return (await putArchive(name, bytes, true)).url;
  }
}

function fetchFile(path: string): Promise<Response> {
  const settings = ServerConnection.makeSettings();
  const url = URLExt.join(settings.baseUrl, 'files', URLExt.encodeParts(path));
  return requestJupyter(url, { method: 'GET' }, settings);
}

/** Whether the store made a new file, and the name it saved it under (its NFC form). */
interface IStored {
  created: boolean;
  url: string;
}

async function putArchive(
  name: string,
  bytes: Blob,
  overwrite: boolean
): Promise<IStored> {
  const response = await requestServe(
    `model-store/${encodeURIComponent(name)}${query({ overwrite: overwrite || undefined })}`,
    {
      method: 'PUT',
      body: bytes,
      headers: { 'Content-Type': 'application/octet-stream' }
    }
  );
  const answer = (await response.json()) as { url?: unknown };
  const url = typeof answer.url === 'string' ? answer.url : name;
  return { created: response.status === 201, url };
}

async function confirmReplace(name: string): Promise<boolean> {
  const result = await showDialog({
    title: 'Replace the archive?',
    body: `The model store already has a different ${name}. Replace it?`,
    buttons: [Dialog.cancelButton(), Dialog.warnButton({ label: 'Replace' })]
  });
  return result.button.accept;
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
