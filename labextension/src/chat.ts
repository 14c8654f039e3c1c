/**
 * `ChatView`: Try-it for a language model (a version whose handler is `causal_lm`):
 * a chat box in a main-area tab. The user types a message; the answer streams in
 * token by token from `serve/v1/chat/completions` (`chatstream.ts`), and its line
 * then says its time to first token and its tokens per second. The conversation's
 * messages go with every request, so the model answers in context; an answer the
 * user stopped keeps the text that came, and a failed one (the server's message
 * shown) leaves its exchange out of the conversation. Stop aborts the request: the
 * server then drops it from its running batch. Temperature (0 by default: the same
 * message gets the same answer) and the most tokens an answer may have are set above
 * the conversation. Enter sends, Shift+Enter starts a new line. Copy curl copies (and
 * shows) the `curl -N` command that streams the answer the next message would get,
 * with the conversation so far: the typed message, else `SAMPLE_MESSAGE`; the token
 * is left out (`curl.ts`).
 */

import { Clipboard, Notification } from '@jupyterlab/apputils';
import { PageConfig } from '@jupyterlab/coreutils';
import { Widget } from '@lumino/widgets';

import { errorText, serveUrl } from './api';
import {
  AnswerClock,
  CHAT_PATH,
  IChatMessage,
  IChatOptions,
  IChatResult,
  chatCurl,
  describeAnswer,
  isAbort,
  modelId,
  streamChat
} from './chatstream';
import { tokenVariable } from './curl';
import { button, element, setText } from './dom';
import { hubContext } from './hub';

/** The answer's length when the user does not say: room for a few sentences. */
export const DEFAULT_MAX_TOKENS = 128;

/** The message a copied curl command asks when none is typed. */
export const SAMPLE_MESSAGE = 'Hello!';

export class ChatView extends Widget {
  constructor(
    readonly modelName: string,
    readonly modelVersion: string
  ) {
    super();
    this.addClass('jp-ServeChat');
    this.id = `jupyter-serve-chat-${modelName}-${modelVersion}`;
    this.title.label = `Chat ${modelName} ${modelVersion}`;
    this.title.closable = true;
    this._input.rows = 3;
    this._input.placeholder = `Message ${modelName} (Enter sends, Shift+Enter: a new line)`;
    this._input.addEventListener('keydown', event => {
      if (event.key === 'Enter' && !event.shiftKey && !event.isComposing) {
        event.preventDefault();
        void this.send();
      }
    });
    this._stop.disabled = true;
    this._error.hidden = true;
    this.node.append(
      element(
        'div',
        'jp-ServeChat-target',
        {},
        `POST serve/${CHAT_PATH} · model ${modelId(modelName, modelVersion)}`
      ),
      this._settings(),
      this._log,
      this._error,
      this._input,
      element(
        'div',
        'jp-ServeChat-buttons',
        {},
        this._send,
        this._stop,
        this._clear,
        this._copy
      ),
      this._curl,
      this._status
    );
    this._curl.hidden = true;
  }

  /** The conversation so far (what the next request sends before the new message). */
  get messages(): readonly IChatMessage[] {
    return this._messages;
  }

  /** Send the typed message and stream the answer; nothing while one streams. */
  async send(): Promise<void> {
    const text = this._input.value.trim();
    if (!text || this._abort !== null) {
      return;
    }
    this._input.value = '';
    const asked: IChatMessage = { role: 'user', content: text };
    const conversation = this._messages; // "New chat" while streaming starts another
    const question = this._bubble('user', text);
    const answer = this._bubble('assistant', '');
    const content = answer.querySelector('.jp-ServeChat-content')!;
    const stats = element('div', 'jp-ServeChat-stats');
    answer.append(stats);
    const abort = new AbortController();
    this._streaming(abort);
    const clock = new AnswerClock(performance.now());
    setText(this._status, 'Waiting for the first token…');
    this._showError('');
    let result: IChatResult | null = null;
    let ending = '';
    try {
      result = await streamChat(
        this._options([...conversation, asked]),
        piece => {
          clock.text(performance.now());
          content.append(piece);
          setText(this._status, 'Answering…');
          this._log.scrollTop = this._log.scrollHeight;
        },
        abort.signal
      );
      ending = result.complete ? '' : 'cut off';
    } catch (error) {
      if (!isAbort(error, abort.signal)) {
        ending = 'failed';
        this._showError(errorText(error));
      } else {
        ending = 'stopped';
      }
    } finally {
      this._streaming(null);
    }
    const said = content.textContent ?? '';
    const kept = ending !== 'failed' && said !== '';
    if (kept) {
      conversation.push(asked, { role: 'assistant', content: said });
    }
    for (const bubble of [question, answer]) {
      bubble.setAttribute('data-kept', String(kept));
    }
    answer.setAttribute('data-ending', ending || 'done');
    setText(stats, describeAnswer(clock, result, ending));
    setText(this._status, kept ? '' : 'Left out of the conversation.');
  }

  /** The `curl -N` command for the next message (module docstring); shown, and copied. */
  copyCurl(): string {
    const text = this._input.value.trim() || SAMPLE_MESSAGE;
    const asked: IChatMessage = { role: 'user', content: text };
    const url = new URL(serveUrl(CHAT_PATH), window.location.href).href;
    const hub = hubContext(PageConfig.getOption, window.location.origin);
    const command = chatCurl(
      url,
      this._options([...this._messages, asked]),
      hub
    );
    setText(this._curl, command);
    this._curl.hidden = false;
    Clipboard.copyToSystem(command);
    Notification.info(
      `Copied the curl command (set ${tokenVariable(hub)} first)`,
      { autoClose: 3000 }
    );
    return command;
  }

  /** Stop the answer streaming now, if any. */
  stop(): void {
    this._abort?.abort();
  }

  /** Start a new conversation. */
  clear(): void {
    this.stop();
    this._messages = [];
    this._log.replaceChildren();
    this._curl.hidden = true;
    this._showError('');
    setText(this._status, '');
  }

  dispose(): void {
    this.stop();
    super.dispose();
  }

  private _settings(): HTMLElement {
    this._temperature.type = 'number';
    this._temperature.name = 'temperature';
    Object.assign(this._temperature, { min: '0', max: '2', step: '0.1' });
    this._temperature.value = '0';
    this._maxTokens.type = 'number';
    this._maxTokens.name = 'max_tokens';
    Object.assign(this._maxTokens, { min: '1', step: '1' });
    this._maxTokens.value = String(DEFAULT_MAX_TOKENS);
    return element(
      'div',
      'jp-ServeChat-settings',
      {},
      element('label', '', {}, 'temperature ', this._temperature),
      element('label', '', {}, 'max tokens ', this._maxTokens)
    );
  }

  /** A message in the log; its text goes in `.jp-ServeChat-content` (as text, never HTML). */
  private _bubble(role: IChatMessage['role'], text: string): HTMLElement {
    const bubble = element(
      'div',
      'jp-ServeChat-message',
      { 'data-role': role },
      element('div', 'jp-ServeChat-content', {}, text)
    );
    this._log.append(bubble);
    this._log.scrollTop = this._log.scrollHeight;
    return bubble;
  }

  /** Switch the buttons between streaming (`abort` set) and waiting for a message. */
  private _streaming(abort: AbortController | null): void {
    this._abort = abort;
    this._send.disabled = abort !== null;
    this._stop.disabled = abort === null;
    this.node.toggleAttribute('data-streaming', abort !== null);
  }

  private _showError(text: string): void {
    setText(this._error, text);
    this._error.hidden = !text;
  }

  /** The request for `messages` with the settings above the conversation. */
  private _options(messages: IChatMessage[]): IChatOptions {
    return {
      model: modelId(this.modelName, this.modelVersion),
      messages,
      temperature: this._number(this._temperature, 0),
      maxTokens: Math.round(this._number(this._maxTokens, DEFAULT_MAX_TOKENS))
    };
  }

  private _number(input: HTMLInputElement, fallback: number): number {
    const value = input.valueAsNumber;
    return Number.isFinite(value) ? value : fallback;
  }

  private _messages: IChatMessage[] = [];
  private _abort: AbortController | null = null;
  private _log = element('div', 'jp-ServeChat-log', { 'aria-live': 'polite' });
  private _error = element('div', 'jp-ServeChat-error', { role: 'alert' });
  private _input = element('textarea', 'jp-mod-styled jp-ServeChat-input');
  private _temperature = element('input', 'jp-mod-styled');
  private _maxTokens = element('input', 'jp-mod-styled');
  private _status = element('div', 'jp-ServeChat-status');
  private _curl = element('pre', 'jp-ServeChat-curl');
  private _send = button(
    'Send',
    'jp-ServeChat-send',
    () => void this.send(),
    'Send the message'
  );
  private _stop = button(
    'Stop',
    'jp-ServeChat-stop',
    () => this.stop(),
    'Stop the answer (the server frees its place)'
  );
  private _clear = button(
    'New chat',
    'jp-ServeChat-clear',
    () => this.clear(),
    'Start a new conversation'
  );
  private _copy = button(
    'Copy curl',
    'jp-ServeChat-copy',
    () => void this.copyCurl(),
    'Copy a curl command streaming the answer to the next message (the token is left out)'
  );
}
