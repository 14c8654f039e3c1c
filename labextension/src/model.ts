/**
 * `ServingModel`: the latest `GET serve/summary`, refreshed every few seconds
 * while not paused, with the figure history the sparklines draw. Views listen to
 * `changed`; actions wait on it for workers to come up (`watch`).
 */

import { IDisposable } from '@lumino/disposable';
import { ISignal, Signal } from '@lumino/signaling';

import { serveJSON } from './api';
import { FigureHistory } from './history';
import { IModelSummary, ISummary, modelKey } from './summary';

export const DEFAULT_INTERVAL_SECONDS = 2;

export class ServingModel implements IDisposable {
  constructor(private _fetch: () => Promise<ISummary> = fetchSummary) {}

  /** A new summary arrived. */
  get changed(): ISignal<this, ISummary> {
    return this._changed;
  }

  /** The refresh started or stopped failing (the message, or null once it works again). */
  get errorChanged(): ISignal<this, string | null> {
    return this._errorChanged;
  }

  /** Refreshing was paused or resumed. */
  get pausedChanged(): ISignal<this, boolean> {
    return this._pausedChanged;
  }

  get summary(): ISummary | null {
    return this._summary;
  }

  get error(): string | null {
    return this._error;
  }

  get paused(): boolean {
    return this._paused;
  }

  get isDisposed(): boolean {
    return this._disposed;
  }

  /** Seconds between refreshes; takes effect at once. */
  get interval(): number {
    return this._interval;
  }
  set interval(seconds: number) {
    this._interval = Math.max(0.25, seconds);
    this._schedule();
  }

  /** The model versions of the last summary, by key. */
  find(key: string): IModelSummary | undefined {
    return this._summary?.models.find(model => modelKey(model) === key);
  }

  /** Start refreshing (the first refresh runs now). */
  start(): void {
    void this.refresh();
  }

  pause(): void {
    this._setPaused(true);
  }

  resume(): void {
    this._setPaused(false);
    void this.refresh();
  }

  togglePaused(): void {
    if (this._paused) {
      this.resume();
    } else {
      this.pause();
    }
  }

  /** Refresh now (also while paused: a manual refresh); concurrent calls share one request. */
  refresh(): Promise<void> {
    if (this._inflight === null) {
      this._inflight = this._refresh().finally(() => {
        this._inflight = null;
        this._schedule();
      });
    }
    return this._inflight;
  }

  /**
   * Call `listener` with every new summary until it returns true or the returned
   * function is called; refreshes every second meanwhile, paused or not, so
   * progress shows while workers start.
   */
  watch(listener: (summary: ISummary) => boolean): () => void {
    const onChanged = (_: this, summary: ISummary): void => {
      if (listener(summary)) {
        stop();
      }
    };
    const timer = setInterval(() => void this.refresh(), 1000);
    const stop = (): void => {
      clearInterval(timer);
      this._changed.disconnect(onChanged, this);
    };
    this._changed.connect(onChanged, this);
    void this.refresh();
    return stop;
  }

  dispose(): void {
    if (this._disposed) {
      return;
    }
    this._disposed = true;
    clearTimeout(this._timer);
    Signal.clearData(this);
  }

  private async _refresh(): Promise<void> {
    try {
      const summary = await this._fetch();
      if (this._disposed) {
        return;
      }
      this._summary = summary;
      this.history.record(summary);
      this._setError(null);
      this._changed.emit(summary);
    } catch (error) {
      this._setError(error instanceof Error ? error.message : String(error));
    }
  }

  private _schedule(): void {
    clearTimeout(this._timer);
    if (!this._paused && !this._disposed) {
      this._timer = setTimeout(
        () => void this.refresh(),
        this._interval * 1000
      );
    }
  }

  private _setPaused(paused: boolean): void {
    if (paused === this._paused) {
      return;
    }
    this._paused = paused;
    this._schedule();
    this._pausedChanged.emit(paused);
  }

  private _setError(error: string | null): void {
    if (error !== this._error) {
      this._error = error;
      this._errorChanged.emit(error);
    }
  }

  readonly history = new FigureHistory();
  private _summary: ISummary | null = null;
  private _error: string | null = null;
  private _paused = false;
  private _disposed = false;
  private _interval = DEFAULT_INTERVAL_SECONDS;
  private _timer: ReturnType<typeof setTimeout> | undefined = undefined;
  private _inflight: Promise<void> | null = null;
  private _changed = new Signal<this, ISummary>(this);
  private _errorChanged = new Signal<this, string | null>(this);
  private _pausedChanged = new Signal<this, boolean>(this);
}

/** `GET serve/summary`. */
export function fetchSummary(): Promise<ISummary> {
  return serveJSON<ISummary>('summary');
}
