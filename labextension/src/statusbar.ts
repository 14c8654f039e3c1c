/** `ServingStatus`: the status-bar item (models serving, total req/s); a click opens the panel. */

import { Widget } from '@lumino/widgets';

import { ServingModel } from './model';
import { ISummary, statusText } from './summary';
import { setText } from './dom';

export class ServingStatus extends Widget {
  constructor(
    private _model: ServingModel,
    onClick: () => void
  ) {
    super();
    this.addClass('jp-ServeStatus');
    this.node.title =
      'Models served by jupyter_serve: click to open the Serving panel';
    this.node.setAttribute('role', 'button');
    this.node.addEventListener('click', onClick);
    setText(this.node, statusText(_model.summary));
    _model.changed.connect(this._onSummary, this);
  }

  dispose(): void {
    this._model.changed.disconnect(this._onSummary, this);
    super.dispose();
  }

  private _onSummary(_: ServingModel, summary: ISummary): void {
    setText(this.node, statusText(summary));
  }
}
