/**
 * Server-sent events as the OpenAI routes stream them (`text/event-stream`:
 * `data: {...}` events, each ended by a blank line, then `data: [DONE]`), read
 * from a fetch body as its bytes arrive. No DOM here: the chat view
 * (`chat.ts`) and the unit tests both use it.
 *
 * The parser follows the HTML standard's event-stream rules for what the
 * routes send: lines end with LF, CRLF or CR; a `data` field (one space after
 * its colon dropped) adds a line to the event's data; a blank line dispatches
 * the event (none when it had no data); comments (`:` first) and other fields
 * (`event`, `id`, `retry`) are skipped. A chunk may end anywhere, even inside a
 * CRLF or a multi-byte character (the decoder keeps the bytes of a split one).
 */

/** The data of the event ending an OpenAI stream. */
export const DONE = '[DONE]';

/** Splits an event stream into the data of its events, chunk by chunk. */
export class EventStreamParser {
  /** The data of the events `text` completes (none while an event is still open). */
  push(text: string): string[] {
    let buffer = this._rest + text;
    if (this._afterCR && buffer.startsWith('\n')) {
      buffer = buffer.slice(1); // the LF of a CRLF split between two chunks
    }
    this._afterCR = false;
    const events: string[] = [];
    const lines = buffer.split(/\r\n|\r|\n/);
    this._rest = lines.pop() ?? '';
    if (buffer.endsWith('\r') && this._rest === '') {
      this._afterCR = true; // an LF may follow in the next chunk
    }
    for (const line of lines) {
      const data = this._line(line);
      if (data !== null) {
        events.push(data);
      }
    }
    return events;
  }

  /** The data of an event the stream ended without its blank line, if any. */
  end(): string[] {
    const events = this.push('\n\n');
    this._rest = '';
    return events;
  }

  /** One whole line: the event's data when it dispatches one, else null. */
  private _line(line: string): string | null {
    if (line === '') {
      const data = this._data;
      this._data = null;
      return data;
    }
    if (line.startsWith(':')) {
      return null; // a comment
    }
    const colon = line.indexOf(':');
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? '' : line.slice(colon + 1);
    if (value.startsWith(' ')) {
      value = value.slice(1);
    }
    if (field === 'data') {
      this._data = this._data === null ? value : `${this._data}\n${value}`;
    }
    return null;
  }

  private _rest = '';
  private _afterCR = false;
  private _data: string | null = null;
}

/**
 * Read `body` to its end (or until `[DONE]`), calling `onData` with each event's data
 * as it arrives. Resolves true when the stream said `[DONE]`, false when it ended
 * without it (cut off); rejects when reading fails (an aborted request: an
 * `AbortError`).
 */
export async function readEvents(
  body: ReadableStream<Uint8Array>,
  onData: (data: string) => void
): Promise<boolean> {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  const parser = new EventStreamParser();
  const handle = (events: string[]): boolean => {
    for (const data of events) {
      if (data === DONE) {
        return true;
      }
      onData(data);
    }
    return false;
  };
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) {
        return handle(parser.push(decoder.decode()).concat(parser.end()));
      }
      if (handle(parser.push(decoder.decode(value, { stream: true })))) {
        return true;
      }
    }
  } finally {
    reader.releaseLock();
  }
}
