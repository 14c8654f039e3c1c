/**
 * `TryItView`: a main-area tab that sends a JSON, text or file body to
 * `predictions/{m}/{v}` (or `explanations/...`) and shows the answer: JSON
 * pretty-printed, text, a raster image, a download link for other image types
 * (see `answer.ts`), or, for an explanation that is an image's attributions, a
 * heat map over the input, above the raw answer, which is then collapsed (with a
 * Copy button). A failed request shows TorchServe's message and the server's
 * `cause` (the handler's exception) in the tab and in a notification that the
 * next successful send dismisses; a 404 offers the closest served model version.
 * It also shows (and copies) the equivalent `curl` command, with the token left out
 * (under JupyterHub, `hub.ts`, it reads `$HUB_TOKEN` and says where to get one).
 */

import { Clipboard, Notification } from '@jupyterlab/apputils';
import { PageConfig } from '@jupyterlab/coreutils';
import { Widget } from '@lumino/widgets';

import { notifyError } from './actions';
import { AnswerView, answerView, formatJSON, viewBlob } from './answer';
import { answerServe, errorMessage, serveUrl, servePath } from './api';
import { TryBody, contentTypeOf, curlCommand, tokenVariable } from './curl';
import { button, element, setText } from './dom';
import { CANVAS_WIDTH, drawHeatmap } from './heatcanvas';
import { attributionGrid, inputGrid } from './heatmap';
import { IHubContext, hubContext } from './hub';
import { didYouMean } from './typos';

type Kind = TryBody['kind'];

/** The body box's hint: a sentence, so it never reads as a body already typed. */
export const BODY_HINT =
  'Type a JSON body here, for example [6.5, 3.0, 5.8, 2.2]';

export class TryItView extends Widget {
  constructor(
    readonly modelName: string,
    readonly modelVersion: string,
    private _served: () => Promise<string[]> = async () => []
  ) {
    super();
    this.addClass('jp-ServeTry');
    this.id = `jupyter-serve-try-${modelName}-${modelVersion}`;
    this.title.label = `Try ${modelName} ${modelVersion}`;
    this.title.closable = true;
    this._route.append(
      new Option('predictions', 'predictions'),
      new Option('explanations', 'explanations')
    );
    this._route.name = 'route';
    this._text.name = 'body';
    this._text.rows = 8;
    this._text.placeholder = BODY_HINT;
    this._file.type = 'file';
    this._file.name = 'file';
    this.node.append(
      element(
        'div',
        'jp-ServeTry-target',
        {},
        'POST ',
        this._route,
        ` /${modelName}/${modelVersion}`
      ),
      this._kinds(),
      this._text,
      this._file,
      element(
        'div',
        'jp-ServeTry-buttons',
        {},
        button(
          'Send',
          'jp-ServeTry-send',
          () => void this.send(),
          'Send the request'
        ),
        button(
          'Copy curl',
          'jp-ServeTry-copy',
          () => this._copyCurl(),
          'Copy an equivalent curl command (the token is left out)'
        )
      ),
      element('pre', 'jp-ServeTry-curl'),
      this._status,
      this._error,
      this._downloadRow,
      this._image,
      this._canvas,
      this._raw
    );
    const copy = button(
      'Copy',
      'jp-ServeTry-copyAnswer',
      () => this._copyAnswer(),
      'Copy the answer'
    );
    copy.addEventListener('click', event => event.preventDefault()); // no toggle
    this._raw.append(
      element('summary', 'jp-ServeTry-rawTitle', {}, 'Answer ', copy),
      this._answer
    );
    this._setKind('json');
    this._clearBlob();
    this._error.hidden = true;
    this._canvas.hidden = true;
    this._canvas.width = CANVAS_WIDTH;
    for (const input of [this._text, this._file, this._route]) {
      input.addEventListener(input === this._text ? 'input' : 'change', () =>
        this._showCurl()
      );
    }
  }

  /** Send the body and show the answer. */
  async send(): Promise<void> {
    const body = this._body();
    const init: RequestInit = {
      method: 'POST',
      body: body.kind === 'file' ? (this._file.files?.[0] ?? null) : body.text,
      headers: { 'Content-Type': contentTypeOf(body) }
    };
    setText(this._status, 'Sending…');
    const started = performance.now();
    try {
      const response = await answerServe(this._path(), init);
      const elapsed = Math.round(performance.now() - started);
      await this._show(response, elapsed);
    } catch (error) {
      setText(
        this._status,
        error instanceof Error ? error.message : String(error)
      );
    }
  }

  dispose(): void {
    this._clearBlob();
    this._dismissFailure();
    super.dispose();
  }

  private _kinds(): HTMLElement {
    const group = element('div', 'jp-ServeTry-kinds', { role: 'radiogroup' });
    for (const [kind, label] of [
      ['json', 'JSON'],
      ['text', 'Text'],
      ['file', 'File']
    ] as [Kind, string][]) {
      const radio = element('input', '', {
        type: 'radio',
        name: `kind-${this.id}`,
        value: kind
      });
      radio.addEventListener('change', () => this._setKind(kind));
      this._radios.set(kind, radio);
      group.append(element('label', '', {}, radio, ` ${label}`));
    }
    return group;
  }

  private _setKind(kind: Kind): void {
    this._kind = kind;
    this._radios.get(kind)!.checked = true;
    this._text.hidden = kind === 'file';
    this._file.hidden = kind !== 'file';
    this._showCurl();
  }

  private _path(): string {
    return servePath(this._route.value, this.modelName, this.modelVersion);
  }

  private _body(): TryBody {
    if (this._kind === 'file') {
      const file = this._file.files?.[0];
      return {
        kind: 'file',
        name: file?.name ?? 'FILE',
        type: file?.type ?? ''
      };
    }
    return { kind: this._kind, text: this._text.value };
  }

  private _curl(): string {
    const url = new URL(serveUrl(this._path()), window.location.href).href;
    return curlCommand(url, this._body(), this._hub());
  }

  /** The hub this page runs under (its proxy is then the page's own origin), or null. */
  private _hub(): IHubContext | null {
    return hubContext(PageConfig.getOption, window.location.origin);
  }

  private _showCurl(): void {
    const target = this.node.querySelector('.jp-ServeTry-curl');
    if (target) {
      setText(target, this._curl());
    }
  }

  private _copyCurl(): void {
    const command = this._curl();
    this._showCurl();
    Clipboard.copyToSystem(command);
    const variable = tokenVariable(this._hub());
    Notification.info(`Copied the curl command (set ${variable} first)`, {
      autoClose: 3000
    });
  }

  private async _show(response: Response, elapsed: number): Promise<void> {
    this._showCurl();
    const type = response.headers.get('Content-Type') ?? '';
    setText(
      this._status,
      `${response.status} ${response.statusText} · ${type || 'no Content-Type'} · ${elapsed} ms`
    );
    this._status.setAttribute('data-status', String(response.status));
    this._clearBlob();
    this._canvas.hidden = true;
    this._raw.open = true;
    if (!response.ok) {
      await this._showFailure(response);
      return;
    }
    this._dismissFailure();
    const view = answerView(type);
    if (view.kind !== 'text') {
      this._showBlob(await response.blob(), view);
      setText(
        this._answer,
        view.kind === 'image'
          ? ''
          : `${view.type} answers are not shown here, only raster images: download this one.`
      );
      return;
    }
    const text = await response.text();
    const json = parseJSON(text);
    setText(this._answer, json === undefined ? text : formatJSON(json));
    if (this._route.value === 'explanations' && json !== undefined) {
      await this._showHeatmap(json);
    }
  }

  /** TorchServe's message and the server's cause, here and in a notification. */
  private async _showFailure(response: Response): Promise<void> {
    const error = await errorMessage(response);
    const key = `${this.modelName}/${this.modelVersion}`;
    const hint =
      response.status === 404 ? didYouMean(key, await this._served()) : '';
    const text = error.detail + hint;
    this._dismissFailure();
    setText(this._answer, text);
    setText(this._error, text);
    this._error.hidden = false;
    this._failure = notifyError(`${this.modelName}: ${text}`);
  }

  /** The last failure's notification and message go once a send succeeds. */
  private _dismissFailure(): void {
    if (this._failure) {
      Notification.dismiss(this._failure);
      this._failure = '';
    }
    this._error.hidden = true;
    setText(this._error, '');
  }

  private _copyAnswer(): void {
    Clipboard.copyToSystem(this._answer.textContent ?? '');
    Notification.info('Copied the answer', { autoClose: 3000 });
  }

  /** Drop the last answer's blob: URL and hide the image and the download link. */
  private _clearBlob(): void {
    if (this._blobUrl) {
      URL.revokeObjectURL(this._blobUrl);
      this._blobUrl = '';
    }
    this._image.removeAttribute('src');
    this._image.hidden = true;
    this._download.removeAttribute('href');
    this._downloadRow.hidden = true;
  }

  /** Show `bytes` as `view` says: an inline raster image or a download link. */
  private _showBlob(bytes: Blob, view: AnswerView): void {
    this._clearBlob();
    if (view.kind === 'text') {
      return;
    }
    this._blobUrl = URL.createObjectURL(viewBlob(bytes, view));
    if (view.kind === 'image') {
      this._image.src = this._blobUrl;
      this._image.hidden = false;
    } else {
      this._download.href = this._blobUrl;
      this._download.download = view.fileName;
      this._downloadRow.hidden = false;
    }
  }

  private async _showHeatmap(answer: unknown): Promise<void> {
    const like = this._kind === 'file' ? null : inputGrid(this._text.value);
    const grid = attributionGrid(answer, like);
    const file = this._kind === 'file' ? this._file.files?.[0] : undefined;
    if (
      grid !== null &&
      (await drawHeatmap(this._canvas, grid, { file, like }))
    ) {
      this._canvas.hidden = false;
      this._raw.open = false; // the map first; the numbers stay one click away
    }
  }

  private _kind: Kind = 'json';
  private _radios = new Map<Kind, HTMLInputElement>();
  private _route = element('select', 'jp-mod-styled jp-ServeTry-route');
  private _text = element('textarea', 'jp-mod-styled jp-ServeTry-body');
  private _file = element('input', 'jp-ServeTry-file');
  private _status = element('div', 'jp-ServeTry-status');
  private _answer = element('pre', 'jp-ServeTry-answer');
  private _raw = element('details', 'jp-ServeTry-raw', { open: '' });
  private _error = element('div', 'jp-ServeTry-error', { role: 'alert' });
  private _failure = '';
  private _image = element('img', 'jp-ServeTry-image', { alt: 'the answer' });
  private _download = element(
    'a',
    'jp-Button jp-mod-styled jp-mod-small jp-ServeTry-download',
    {},
    'Download the answer'
  );
  private _downloadRow = element(
    'div',
    'jp-ServeTry-buttons',
    {},
    this._download
  );
  private _blobUrl = '';
  private _canvas = element('canvas', 'jp-ServeTry-heatmap', {
    'aria-label': 'explanation heat map'
  });
}

function parseJSON(text: string): unknown {
  try {
    return JSON.parse(text) as unknown;
  } catch {
    return undefined;
  }
}
