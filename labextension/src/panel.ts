/**
 * `ServingPanel`: the left side panel. A header (pause/resume, refresh, register,
 * totals), a banner when the server cannot be read, and one `ModelCard` per
 * model version, kept by key across refreshes: new versions get a card, gone
 * ones lose theirs, the others only update their figures.
 */

import { CommandRegistry } from '@lumino/commands';
import { Widget } from '@lumino/widgets';

import { ModelCard } from './card';
import { CommandIDs } from './commandIds';
import { button, element, setText } from './dom';
import { ServingModel } from './model';
import { ISummary, formatRate, modelKey, plural } from './summary';

export const PANEL_ID = 'jupyter-serve-panel';

export class ServingPanel extends Widget {
  constructor(
    private _model: ServingModel,
    private _commands: CommandRegistry
  ) {
    super();
    this.id = PANEL_ID;
    this.addClass('jp-ServePanel');
    this.title.caption = 'Serving: models served by jupyter_serve';
    this._pause = button(
      'Pause',
      'jp-ServePanel-pause',
      () => _model.togglePaused(),
      'Pause or resume the live refresh'
    );
    const refresh = button(
      'Refresh',
      'jp-ServePanel-refresh',
      () => void _model.refresh(),
      'Refresh now'
    );
    const register = button(
      'Register…',
      'jp-ServePanel-register',
      () => {
        void this._commands.execute(CommandIDs.register);
      },
      'Register a model from the model store or a path'
    );
    this.node.append(
      element(
        'header',
        'jp-ServePanel-header',
        {},
        element('h2', 'jp-ServePanel-title', {}, 'Serving'),
        element(
          'div',
          'jp-ServePanel-tools',
          {},
          this._pause,
          refresh,
          register
        )
      ),
      this._totals,
      this._banner,
      this._empty,
      this._list
    );
    this._banner.hidden = true;
    this._empty.textContent =
      'No model is serving. Right-click a .mar or a model folder in the file browser and choose "Serve this model", or use Register….';
    _model.changed.connect(this._onSummary, this);
    _model.errorChanged.connect(this._onError, this);
    _model.pausedChanged.connect(this._onPaused, this);
    if (_model.summary) {
      this._onSummary(_model, _model.summary);
    }
  }

  /** The card of a version, if shown (for tests and commands). */
  card(key: string): ModelCard | undefined {
    return this._cards.get(key);
  }

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    this._model.changed.disconnect(this._onSummary, this);
    this._model.errorChanged.disconnect(this._onError, this);
    this._model.pausedChanged.disconnect(this._onPaused, this);
    super.dispose();
  }

  private _onSummary(model: ServingModel, summary: ISummary): void {
    const seen = new Set<string>();
    summary.models.forEach((version, index) => {
      const key = modelKey(version);
      seen.add(key);
      let card = this._cards.get(key);
      if (card === undefined) {
        card = new ModelCard(version, this._commands);
        this._cards.set(key, card);
      }
      card.update(version, model.history.series(key));
      if (this._list.children[index] !== card.node) {
        this._list.insertBefore(card.node, this._list.children[index] ?? null);
      }
    });
    for (const [key, card] of [...this._cards]) {
      if (!seen.has(key)) {
        card.node.remove();
        this._cards.delete(key);
      }
    }
    this._empty.hidden = summary.models.length > 0;
    const totals = summary.totals;
    setText(
      this._totals,
      `${plural(totals.models, 'model')} · ${plural(totals.workersReady, 'worker')} ready · ${formatRate(totals.throughputRps)} req/s`
    );
  }

  private _onError(_: ServingModel, error: string | null): void {
    this._banner.hidden = error === null;
    setText(
      this._banner,
      error === null ? '' : `Cannot read the server: ${error}`
    );
  }

  private _onPaused(_: ServingModel, paused: boolean): void {
    setText(this._pause, paused ? 'Resume' : 'Pause');
    this._pause.setAttribute('aria-pressed', String(paused));
    this.toggleClass('jp-mod-paused', paused);
  }

  private _cards = new Map<string, ModelCard>();
  private _pause: HTMLButtonElement;
  private _totals = element('div', 'jp-ServePanel-totals', {
    'aria-live': 'polite'
  });
  private _banner = element('div', 'jp-ServePanel-error', { role: 'alert' });
  private _empty = element('p', 'jp-ServePanel-empty');
  private _list = element('ul', 'jp-ServePanel-models');
}
