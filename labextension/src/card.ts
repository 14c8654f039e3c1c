/**
 * `ModelCard`: one model version in the Serving panel. It builds its DOM once and
 * then only changes the texts and attributes whose values changed, so a refresh
 * every second never re-renders the panel (and keeps focus and selection).
 * A version with failed workers shows why (the summary's `cause`). The sparkline
 * spans the card's width, with a legend naming each line and its peak, and its
 * tooltip saying the latest values.
 */

import { CommandRegistry } from '@lumino/commands';

import { CommandIDs } from './commandIds';
import { button, element, setAttribute, setText, svgElement } from './dom';
import { ISeries, sparkLegend, sparklinePoints } from './history';
import {
  IModelSummary,
  LANGUAGE_HINT,
  describeMemory,
  describeStateful,
  describeWorkers,
  formatFill,
  formatMs,
  formatRate,
  modelKey
} from './summary';

const SPARK_WIDTH = 120;
const SPARK_HEIGHT = 24;

const FIGURES: [string, string, (model: IModelSummary) => string][] = [
  ['queue', 'queue', model => String(model.queue.pending)],
  ['rps', 'req/s', model => formatRate(model.throughputRps)],
  ['p50', 'p50', model => formatMs(model.latencyMs.p50)],
  ['p99', 'p99', model => formatMs(model.latencyMs.p99)],
  ['fill', 'batch fill', model => formatFill(model.batchFill)]
];

export class ModelCard {
  constructor(
    model: IModelSummary,
    private _commands: CommandRegistry
  ) {
    this.key = modelKey(model);
    const args = { name: model.modelName, version: model.modelVersion };
    this.node = element('li', 'jp-ServeModel', {
      'data-model': model.modelName,
      'data-version': model.modelVersion
    });
    const name = element('span', 'jp-ServeModel-name', {}, model.modelName);
    const version = element(
      'span',
      'jp-ServeModel-version',
      {},
      model.modelVersion
    );
    this._default = element('span', 'jp-ServeModel-default', {
      title: 'the default version'
    });
    this._status = element('span', 'jp-ServeModel-status');
    this._workers = element('div', 'jp-ServeModel-workers');
    this._memory = element('div', 'jp-ServeModel-memory');
    this._stateful = element('div', 'jp-ServeModel-stateful');
    this._stateful.hidden = true;
    this._cause = element('div', 'jp-ServeModel-cause', { role: 'status' });
    this._cause.hidden = true;
    this._throughput = svgElement('polyline', {
      class: 'jp-ServeModel-throughputLine'
    });
    this._latency = svgElement('polyline', {
      class: 'jp-ServeModel-latencyLine'
    });
    this._setDefault = this._action(
      'Set default',
      'set-default',
      CommandIDs.setDefault,
      args
    );
    this.node.append(
      element(
        'div',
        'jp-ServeModel-head',
        {},
        name,
        version,
        this._default,
        this._status
      ),
      this._workers,
      this._memory,
      this._stateful,
      this._cause,
      this._figureList(),
      this._sparkline(),
      this._legend,
      element(
        'div',
        'jp-ServeModel-actions',
        {},
        this._action('Try it', 'try', CommandIDs.tryIt, args),
        this._action('Log', 'log', CommandIDs.openLog, args),
        this._action('Scale', 'scale', CommandIDs.scale, args),
        this._setDefault,
        this._action('Unregister', 'unregister', CommandIDs.unregister, args)
      )
    );
    this.update(model, { throughput: [], latency: [] });
  }

  readonly key: string;
  readonly node: HTMLLIElement;

  /** Show `model`'s new figures and `series` (its history), changing only what differs. */
  update(model: IModelSummary, series: ISeries): void {
    setAttribute(this.node, 'data-status', model.status);
    setAttribute(this.node, 'data-default', String(model.isDefault));
    setText(this._default, model.isDefault ? '★ default' : '');
    this._setDefault.hidden = model.isDefault;
    setText(this._status, model.status);
    setText(this._workers, `workers: ${describeWorkers(model)}`);
    setAttribute(this._workers, 'data-ready', String(model.workerCounts.ready));
    const memory = describeMemory(model);
    setText(this._memory, memory.text);
    setAttribute(this._memory, 'title', memory.title);
    this._memory.hidden = !memory.text;
    const stateful = describeStateful(model);
    setText(this._stateful, stateful);
    setAttribute(
      this._stateful,
      'title',
      model.languageModel && stateful ? LANGUAGE_HINT : ''
    );
    this._stateful.hidden = !stateful;
    for (const [id, , format] of FIGURES) {
      setText(this._figures.get(id)!, format(model));
    }
    const throughput = sparklinePoints(
      series.throughput,
      SPARK_WIDTH,
      SPARK_HEIGHT
    );
    setAttribute(this._throughput, 'points', throughput);
    setAttribute(
      this._latency,
      'points',
      sparklinePoints(series.latency, SPARK_WIDTH, SPARK_HEIGHT)
    );
    const legend = sparkLegend(series);
    setText(this._throughputLegend, legend.throughput);
    setText(this._latencyLegend, legend.latency);
    setText(this._sparkTitle, legend.latest);
    const cause = model.workerCounts.failed > 0 ? (model.cause ?? '') : '';
    setText(this._cause, cause ? `cause: ${cause}` : '');
    this._cause.hidden = !cause;
  }

  private _figureList(): HTMLElement {
    const list = element('dl', 'jp-ServeModel-figures');
    for (const [id, label] of FIGURES) {
      const value = element('dd', 'jp-ServeModel-figure', {
        'data-figure': id
      });
      this._figures.set(id, value);
      list.append(element('div', '', {}, element('dt', '', {}, label), value));
    }
    return list;
  }

  private _sparkline(): SVGSVGElement {
    const svg = svgElement('svg', {
      class: 'jp-ServeModel-sparkline',
      width: String(SPARK_WIDTH),
      height: String(SPARK_HEIGHT),
      viewBox: `0 0 ${SPARK_WIDTH} ${SPARK_HEIGHT}`,
      preserveAspectRatio: 'none'
    });
    svg.append(this._sparkTitle, this._throughput, this._latency);
    return svg;
  }

  private _action(
    label: string,
    name: string,
    command: string,
    args: { name: string; version: string }
  ): HTMLButtonElement {
    return button(
      label,
      `jp-ServeModel-${name}`,
      () => {
        void this._commands.execute(command, args);
      },
      this._commands.caption(command, args) || label
    );
  }

  private _figures = new Map<string, HTMLElement>();
  private _cause: HTMLElement;
  private _sparkTitle = svgElement('title');
  private _throughputLegend = element('span', 'jp-ServeModel-legendRps');
  private _latencyLegend = element('span', 'jp-ServeModel-legendP50');
  private _legend = element(
    'div',
    'jp-ServeModel-legend',
    {},
    this._throughputLegend,
    this._latencyLegend,
    element('span', 'jp-ServeModel-legendSpan', {}, 'last 2 min')
  );
  private _default: HTMLElement;
  private _status: HTMLElement;
  private _workers: HTMLElement;
  private _memory: HTMLElement;
  private _stateful: HTMLElement;
  private _throughput: SVGPolylineElement;
  private _latency: SVGPolylineElement;
  private _setDefault: HTMLButtonElement;
}
