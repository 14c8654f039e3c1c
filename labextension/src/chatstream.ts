/**
 * One streamed chat answer from `{base_url}serve/v1/chat/completions`
 * (jupyter_serve/server/http/openai.py), and its figures.
 *
 * `streamChat` sends the conversation with `stream: true` and
 * `stream_options.include_usage` through JupyterLab's `ServerConnection` (login
 * cookie and XSRF header, as every request of the extension: `api.ts`), reads the
 * server-sent events as they arrive (`sse.ts`) and hands each piece of text to
 * its caller. An `AbortSignal` stops it: the browser closes the connection, and
 * the server drops the request from its running batch at the next step.
 *
 * `AnswerClock` times an answer: its time to first token (from sending to the
 * first piece of text) and its tokens per second, counted from the first token
 * to the last, so the prompt's prefill does not lower the rate: (tokens - 1)
 * over that time. The token count is the server's (`usage.completion_tokens`),
 * else the pieces of text received.
 */

import { ServeRequestError, answerServe, servePath } from './api';
import { curlCommand } from './curl';
import { IHubContext } from './hub';
import { readEvents } from './sse';
import { formatMs, formatRate } from './summary';

/** The route below `{base_url}serve/`. */
export const CHAT_PATH = 'v1/chat/completions';

export interface IChatMessage {
  role: 'system' | 'user' | 'assistant';
  content: string;
}

export interface IChatOptions {
  /** `name/version`, as the OpenAI routes name a served version. */
  model: string;
  messages: IChatMessage[];
  temperature: number;
  maxTokens: number;
}

export interface IUsage {
  promptTokens: number;
  completionTokens: number;
}

/** What a stream's event says: a piece of text, why the answer ended, the usage. */
export interface IChunk {
  text: string;
  finishReason: string | null;
  usage: IUsage | null;
}

/** How an answer ended: the server's finish reason, the usage, whether `[DONE]` came. */
export interface IChatResult {
  text: string;
  finishReason: string | null;
  usage: IUsage | null;
  complete: boolean;
}

/** The request's JSON body. */
export function chatBody(options: IChatOptions): string {
  return JSON.stringify({
    model: options.model,
    messages: options.messages,
    temperature: options.temperature,
    max_tokens: options.maxTokens,
    stream: true,
    stream_options: { include_usage: true }
  });
}

/**
 * The `curl -N` command streaming the answer `options` ask for from `url` (the chat
 * route's absolute URL), the token from the environment (`curl.ts`).
 */
export function chatCurl(
  url: string,
  options: IChatOptions,
  hub: IHubContext | null = null
): string {
  const body = { kind: 'json' as const, text: chatBody(options) };
  return curlCommand(url, body, hub, { stream: true });
}

/** The OpenAI routes' name of a served version. */
export function modelId(name: string, version: string): string {
  return `${name}/${version}`;
}

/** One event's data as a chunk; an `error` object (or data that is not JSON) throws. */
export function readChunk(data: string): IChunk {
  let event: Record<string, any>;
  try {
    event = JSON.parse(data) as Record<string, any>;
  } catch {
    throw new ServeRequestError(
      `The stream sent an unreadable event: ${data}`,
      0
    );
  }
  if (event.error) {
    throw new ServeRequestError(String(event.error.message ?? event.error), 0);
  }
  const choice = Array.isArray(event.choices) ? event.choices[0] : undefined;
  const content = choice?.delta?.content;
  const usage = event.usage;
  return {
    text: typeof content === 'string' ? content : '',
    finishReason:
      typeof choice?.finish_reason === 'string' ? choice.finish_reason : null,
    usage:
      usage && typeof usage.completion_tokens === 'number'
        ? {
            promptTokens: Number(usage.prompt_tokens ?? 0),
            completionTokens: usage.completion_tokens
          }
        : null
  };
}

/** An OpenAI error answer (`{"error": {"message", ...}}`) as a `ServeRequestError`. */
export async function openAIError(
  response: Response
): Promise<ServeRequestError> {
  const text = await response.text();
  let message = text.trim() || response.statusText || 'request failed';
  let type = '';
  try {
    const error = (JSON.parse(text) as { error?: Record<string, unknown> })
      .error;
    if (error && typeof error.message === 'string') {
      message = error.message;
      type = typeof error.type === 'string' ? error.type : '';
    }
  } catch {
    // not JSON: the text as is
  }
  return new ServeRequestError(
    `${response.status}: ${message}`,
    response.status,
    type
  );
}

/**
 * Send the conversation and stream its answer: `onText` gets each piece of text as
 * it arrives. Throws a `ServeRequestError` for a refusal (the server's message) and
 * the fetch's `AbortError` when `signal` stops it.
 */
export async function streamChat(
  options: IChatOptions,
  onText: (text: string) => void,
  signal?: AbortSignal
): Promise<IChatResult> {
  const response = await answerServe(servePath(...CHAT_PATH.split('/')), {
    method: 'POST',
    body: chatBody(options),
    headers: {
      'Content-Type': 'application/json',
      Accept: 'text/event-stream'
    },
    signal
  });
  if (!response.ok) {
    throw await openAIError(response);
  }
  if (response.body === null) {
    throw new ServeRequestError('The answer has no body', response.status);
  }
  const result: IChatResult = {
    text: '',
    finishReason: null,
    usage: null,
    complete: false
  };
  result.complete = await readEvents(response.body, data => {
    const chunk = readChunk(data);
    result.finishReason = chunk.finishReason ?? result.finishReason;
    result.usage = chunk.usage ?? result.usage;
    if (chunk.text) {
      result.text += chunk.text;
      onText(chunk.text);
    }
  });
  return result;
}

/** Whether `error` is a stopped request (the fetch's, or ours around it). */
export function isAbort(error: unknown, signal?: AbortSignal): boolean {
  return (
    signal?.aborted === true ||
    (error instanceof Error && error.name === 'AbortError')
  );
}

/** An answer's times, in milliseconds of `performance.now()` (module docstring). */
export class AnswerClock {
  constructor(readonly sent: number) {}

  /** A piece of text arrived at `now`. */
  text(now: number): void {
    if (this.first === null) {
      this.first = now;
    }
    this.last = now;
    this.pieces += 1;
  }

  /** Milliseconds from sending to the first piece of text; null before it. */
  get ttftMs(): number | null {
    return this.first === null ? null : this.first - this.sent;
  }

  /** Tokens per second from the first token to the last; null with fewer than two. */
  tokensPerSecond(tokens: number = this.pieces): number | null {
    if (this.first === null || this.last === null || tokens < 2) {
      return null;
    }
    const seconds = (this.last - this.first) / 1000;
    return seconds > 0 ? (tokens - 1) / seconds : null;
  }

  first: number | null = null;
  last: number | null = null;
  pieces = 0;
}

/** "TTFT 42.0 ms · 180 tokens/s · 12 tokens · length": an answer's stats line. */
export function describeAnswer(
  clock: AnswerClock,
  result: Pick<IChatResult, 'usage' | 'finishReason'> | null,
  ending = ''
): string {
  const tokens = result?.usage?.completionTokens ?? clock.pieces;
  const parts = [
    `TTFT ${formatMs(clock.ttftMs)}`,
    `${formatRate(clock.tokensPerSecond(tokens))} tokens/s`,
    `${tokens} ${tokens === 1 ? 'token' : 'tokens'}`
  ];
  const why = ending || result?.finishReason || '';
  if (why) {
    parts.push(why);
  }
  return parts.join(' · ');
}
