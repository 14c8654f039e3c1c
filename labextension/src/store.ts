/**
 * The model store seen from the panel: an archive of the Jupyter root copied into
 * it (`PUT serve/model-store/{file}`, asking before replacing a different file of
 * the same name, and saying which served versions came from it), and the names it
 * holds when the Jupyter root contains it, so "Register…" can check a name first.
 */

import { Dialog, Notification, showDialog } from '@jupyterlab/apputils';
import { PathExt, URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';

import { ServeRequestError, query, requestJupyter, requestServe } from './api';
import { IModelSummary, servedFrom } from './summary';
import { didYouMean } from './typos';

/**
 * Where the model store is by default: `model_store` under the server's root
 * (jupyter_serve/server/app_config.py). A store configured elsewhere is not listed.
 */
export const DEFAULT_STORE = 'model_store';

/** The names in the default model store, or null when the contents API cannot list it. */
export async function storeNames(): Promise<string[] | null> {
  const settings = ServerConnection.makeSettings();
  const url = URLExt.join(settings.baseUrl, 'api/contents', DEFAULT_STORE);
  try {
    const response = await requestJupyter(`${url}?content=1`, {}, settings);
    const listing = (await response.json()) as { content?: unknown };
    if (!Array.isArray(listing.content)) {
      return null;
    }
    return listing.content
      .map(item => (item as { name?: unknown }).name)
      .filter((name): name is string => typeof name === 'string');
  } catch {
    return null;
  }
}

/** Copy a file of the Jupyter root into the model store; its store name, or null if cancelled. */
export async function uploadToStore(
  path: string,
  served: readonly IModelSummary[]
): Promise<string | null> {
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
    if (!(await confirmReplace(name, servedFrom(name, served)))) {
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

async function confirmReplace(name: string, users: string[]): Promise<boolean> {
  const using = users.length
    ? ` Registered from it: ${users.join(', ')}.`
    : ' No served version was registered from it.';
  const result = await showDialog({
    title: 'Replace the archive?',
    body: `The model store already has a different ${name}.${using} Replace it?`,
    buttons: [Dialog.cancelButton(), Dialog.warnButton({ label: 'Replace' })]
  });
  return result.button.accept;
}

/**
 * Why `url` names no file of the model store, or '' when it does or cannot be
 * checked here (a path or URL, which the server checks, or a store the Jupyter
 * root does not hold).
 */
export async function missingFromStore(url: string): Promise<string> {
  if (url.includes('/')) {
    return '';
  }
  const names = await storeNames();
  if (names === null || names.includes(url)) {
    return '';
  }
  return `the model store has no ${url}${didYouMean(url, names)}`;
}
