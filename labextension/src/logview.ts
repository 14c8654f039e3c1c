/**
 * `ModelLogView`: a model version's worker output in a main-area tab, following
 * new lines (`GET serve/logs/{m}/{v}?lines=N` every second while the tab is
 * open; `newLines` keeps only what was not shown yet). It scrolls with the log
 * unless the user scrolled up, or unticked "Follow".
 */

import { Widget } from '@lumino/widgets';

import { query, serveJSON, servePath } from './api';
import { element, setText } from './dom';
import { newLines } from './logs';

const WINDOW = 500; // lines asked for per refresh
const KEEP = 5000; // lines kept on the page
const EVERY_MS = 1000;

export class ModelLogView extends Widget {
  constructor(
    readonly modelName: string,
    readonly modelVersion: string
  ) {
    super();
    this.addClass('jp-ServeLog');
    this.id = `jupyter-serve-log-${modelName}-${modelVersion}`;
    this.title.label = `Log: ${modelName} ${modelVersion}`;
    this.title.closable = true;
    this._follow.type = 'checkbox';
    this._follow.checked = true;
    this.node.append(
      element(
        'div',
        'jp-ServeLog-toolbar',
        {},
        element('label', 'jp-ServeLog-follow', {}, this._follow, ' Follow'),
        this._state
      ),
      this._lines
    );
    this._follow.addEventListener('change', () => this._scroll());
  }

  protected onAfterAttach(): void {
    void this._poll();
  }

  protected onBeforeDetach(): void {
    window.clearTimeout(this._timer);
  }

  dispose(): void {
    window.clearTimeout(this._timer);
    super.dispose();
  }

  private async _poll(): Promise<void> {
    try {
      const path = servePath('logs', this.modelName, this.modelVersion);
      const answer = await serveJSON<{ lines: string[] }>(
        `${path}${query({ lines: WINDOW })}`
      );
      this._append(newLines(this._seen, answer.lines));
      this._seen = answer.lines;
      setText(this._state, `${this._lines.childElementCount} lines`);
    } catch (error) {
      setText(
        this._state,
        `Cannot read the log: ${error instanceof Error ? error.message : String(error)}`
      );
    }
    if (!this.isDisposed && this.isAttached) {
      this._timer = window.setTimeout(() => void this._poll(), EVERY_MS);
    }
  }

  private _append(lines: string[]): void {
    if (lines.length === 0) {
      return;
    }
    const atBottom = this._atBottom();
    const fragment = document.createDocumentFragment();
    for (const line of lines) {
      fragment.append(element('div', 'jp-ServeLog-line', {}, line));
    }
    this._lines.append(fragment);
    while (this._lines.childElementCount > KEEP) {
      this._lines.firstElementChild?.remove();
    }
    if (atBottom) {
      this._scroll();
    }
  }

  private _atBottom(): boolean {
    const box = this._lines;
    return box.scrollHeight - box.scrollTop - box.clientHeight < 24;
  }

  private _scroll(): void {
    if (this._follow.checked) {
      this._lines.scrollTop = this._lines.scrollHeight;
    }
  }

  private _seen: string[] = [];
  private _timer = 0;
  private _follow = element('input');
  private _state = element('span', 'jp-ServeLog-state');
  private _lines = element('div', 'jp-ServeLog-lines', { role: 'log' });
}
