/**
 * Every request of the extension goes through `requestServe`: JupyterLab's
 * `ServerConnection` (login cookie + XSRF header, the page's base URL), so the
 * panel works behind JupyterHub and with any `base_url`, and no token is ever
 * read or written by this code. A TorchServe error body
 * `{"code", "type", "message"}` becomes a `ServeRequestError` carrying its message,
 * and the one-line `cause` jupyter_serve adds beside it when it knows why
 * (jupyter_serve/wire/errors.py), shown as `message (cause: ...)` (`detail`).
 */

import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';

/** Where jupyter_serve's routes live below the Jupyter server's base URL. */
export const SERVE_PREFIX = 'serve';

export class ServeRequestError extends Error {
  constructor(
    message: string,
    readonly status: number,
    readonly type: string = '',
    readonly cause: string = ''
  ) {
    super(message);
    this.name = 'ServeRequestError';
  }

  /** The message, and the cause when the server gave one. */
  get detail(): string {
    return describe(this.message, this.cause);
  }
}

/** `message (cause: why)`, as jupyter_serve/kernel/failures.py writes a failure. */
export function describe(message: string, cause: string): string {
  return cause ? `${message} (cause: ${cause})` : message;
}

/** What an error says, with its cause when it has one. */
export function errorText(error: unknown): string {
  if (error instanceof ServeRequestError) {
    return error.detail;
  }
  return error instanceof Error ? error.message : String(error);
}

/** The absolute URL of a path under `{base_url}serve/`. */
export function serveUrl(
  path: string,
  settings: ServerConnection.ISettings = ServerConnection.makeSettings()
): string {
  return URLExt.join(settings.baseUrl, SERVE_PREFIX, path);
}

/** TorchServe's message from an error answer, else the status line. */
export async function errorMessage(
  response: Response
): Promise<ServeRequestError> {
  const text = await response.text();
  try {
    const body = JSON.parse(text) as Record<string, unknown>;
    if (typeof body.message === 'string') {
      const type = typeof body.type === 'string' ? body.type : '';
      const cause = typeof body.cause === 'string' ? body.cause : '';
      return new ServeRequestError(body.message, response.status, type, cause);
    }
  } catch {
    // not JSON: fall through to the status line
  }
  const reason = text.trim() || response.statusText || 'request failed';
  return new ServeRequestError(`${response.status} ${reason}`, response.status);
}

/** Send a request to `{base_url}{path}` (any Jupyter route); throws on a non-2xx answer. */
export async function requestJupyter(
  url: string,
  init: RequestInit = {},
  settings: ServerConnection.ISettings = ServerConnection.makeSettings()
): Promise<Response> {
  let response: Response;
  try {
    response = await ServerConnection.makeRequest(url, init, settings);
  } catch (error) {
    throw new ServeRequestError(
      `The server did not answer: ${String(error)}`,
      0
    );
  }
  if (!response.ok) {
    throw await errorMessage(response);
  }
  return response;
}

/** Send a request to `{base_url}serve/{path}`; throws `ServeRequestError` on a non-2xx answer. */
export async function requestServe(
  path: string,
  init: RequestInit = {},
  settings: ServerConnection.ISettings = ServerConnection.makeSettings()
): Promise<Response> {
  return requestJupyter(serveUrl(path, settings), init, settings);
}

/** `requestServe` and the answer's JSON. */
export async function serveJSON<T>(
  path: string,
  init: RequestInit = {}
): Promise<T> {
  const response = await requestServe(path, init);
  return (await response.json()) as T;
}

/** A query string from parameters (undefined values left out). */
export function query(
  params: Record<string, string | number | boolean | undefined>
): string {
  const search = new URLSearchParams();
  for (const [key, value] of Object.entries(params)) {
    if (value !== undefined) {
      search.set(key, String(value));
    }
  }
  const text = search.toString();
  return text ? `?${text}` : '';
}

/** `models/{m}/{v}`-style paths with each part escaped. */
export function servePath(...parts: string[]): string {
  return parts.map(part => encodeURIComponent(part)).join('/');
}

/** Send a request to `{base_url}serve/{path}` and return any answer, error statuses included. */
export async function answerServe(
  path: string,
  init: RequestInit = {}
): Promise<Response> {
  const settings = ServerConnection.makeSettings();
  try {
    return await ServerConnection.makeRequest(
      serveUrl(path, settings),
      init,
      settings
    );
  } catch (error) {
    throw new ServeRequestError(
      `The server did not answer: ${String(error)}`,
      0
    );
  }
}
