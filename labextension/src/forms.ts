/**
 * The register form shown by "Serve this model": model name, workers, batch
 * size and max batch delay, as TorchServe's register parameters.
 */

import { Dialog, showDialog } from '@jupyterlab/apputils';
import { Widget } from '@lumino/widgets';

import { element } from './dom';

/** What the user typed; numbers stay text, so the server checks them and names a mistake. */
export interface IRegisterOptions {
  modelName: string;
  workers: string;
  batchSize: string;
  maxBatchDelay: string;
}

/** Defaults of the form (the settings' `defaultWorkers`...). */
export interface IRegisterDefaults {
  workers: number;
  batchSize: number;
  maxBatchDelay: number;
}

class RegisterForm
  extends Widget
  implements Dialog.IBodyWidget<IRegisterOptions>
{
  constructor(what: string, defaults: IRegisterDefaults) {
    super();
    this.addClass('jp-ServeRegisterForm');
    this.node.append(
      element('p', '', {}, `Serve ${what}`),
      this._row('Model name', this._name, 'as in the archive'),
      this._row('Workers', this._number(this._workers, defaults.workers, 0)),
      this._row('Batch size', this._number(this._batch, defaults.batchSize, 1)),
      this._row(
        'Max batch delay (ms)',
        this._number(this._delay, defaults.maxBatchDelay, 0)
      )
    );
    this._name.name = 'model_name';
    this._workers.name = 'initial_workers';
    this._batch.name = 'batch_size';
    this._delay.name = 'max_batch_delay';
  }

  getValue(): IRegisterOptions {
    return {
      modelName: this._name.value.trim(),
      workers: this._workers.value.trim(),
      batchSize: this._batch.value.trim(),
      maxBatchDelay: this._delay.value.trim()
    };
  }

  private _row(
    label: string,
    input: HTMLInputElement,
    placeholder = ''
  ): HTMLElement {
    if (placeholder) {
      input.placeholder = placeholder;
    }
    input.classList.add('jp-mod-styled');
    return element(
      'label',
      'jp-ServeRegisterForm-row',
      {},
      element('span', '', {}, label),
      input
    );
  }

  private _number(
    input: HTMLInputElement,
    value: number,
    min: number
  ): HTMLInputElement {
    input.type = 'number';
    input.min = String(min);
    input.step = '1';
    input.value = String(value);
    return input;
  }

  private _name = element('input');
  private _workers = element('input');
  private _batch = element('input');
  private _delay = element('input');
}

/** Ask for the register parameters; null when cancelled. */
export async function askRegisterOptions(
  what: string,
  defaults: IRegisterDefaults
): Promise<IRegisterOptions | null> {
  const result = await showDialog({
    title: 'Serve this model',
    body: new RegisterForm(what, defaults),
    buttons: [Dialog.cancelButton(), Dialog.okButton({ label: 'Serve' })],
    focusNodeSelector: 'input[name="initial_workers"]'
  });
  return result.button.accept ? result.value : null;
}
