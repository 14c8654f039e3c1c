import { describe, expect, it } from 'vitest';

import { DONE, EventStreamParser, readEvents } from '../src/sse';
import { body } from './streams';

describe('EventStreamParser', () => {
  it('gives the data of each event a blank line ends', () => {
    const parser = new EventStreamParser();
    expect(parser.push('data: {"a": 1}\n\ndata: {"b": 2}\n\n')).toEqual([
      '{"a": 1}',
      '{"b": 2}'
    ]);
  });

  it('waits for the blank line, across chunks cut anywhere', () => {
    const parser = new EventStreamParser();
    const stream = 'data: first\n\ndata: second\n\ndata: [DONE]\n\n';
    const seen: string[] = [];
    for (const char of stream) {
      seen.push(...parser.push(char));
    }
    expect(seen).toEqual(['first', 'second', DONE]);
    expect(parser.push('data: open')).toEqual([]);
    expect(parser.push('\n')).toEqual([]);
    expect(parser.push('\n')).toEqual(['open']);
  });

  it('takes CRLF and CR line ends, a CRLF split between chunks included', () => {
    const parser = new EventStreamParser();
    expect(parser.push('data: one\r')).toEqual([]);
    expect(parser.push('\n\r')).toEqual(['one']); // "\r\n" then "\r": one blank line
    expect(parser.push('\ndata: two\r\r')).toEqual(['two']);
  });

  it('joins data lines, keeps spaces after the first, skips comments and other fields', () => {
    const parser = new EventStreamParser();
    const text =
      ': a comment\nevent: chunk\nid: 7\ndata:x\ndata:  y\nretry: 10\n\n\n';
    expect(parser.push(text)).toEqual(['x\n y']);
  });

  it('dispatches nothing for an event without data', () => {
    const parser = new EventStreamParser();
    expect(parser.push('event: ping\n\n: keep-alive\n\n')).toEqual([]);
  });

  it('ends an event the stream left open', () => {
    const parser = new EventStreamParser();
    expect(parser.push('data: last')).toEqual([]);
    expect(parser.end()).toEqual(['last']);
    expect(parser.end()).toEqual([]);
  });
});

describe('readEvents', () => {
  it('reads every event up to [DONE], even a character split between reads', async () => {
    const bytes = new TextEncoder().encode('data: "é"\n\n');
    const seen: string[] = [];
    const done = await readEvents(
      body(
        'data: {"n": 1}\n',
        '\ndata: {"n": 2}\n\n',
        bytes.slice(0, 8), // inside the two bytes of é
        bytes.slice(8),
        'data: [DONE]\n\n'
      ),
      data => seen.push(data)
    );
    expect(done).toBe(true);
    expect(seen).toEqual(['{"n": 1}', '{"n": 2}', '"é"']);
  });

  it('says when the stream ended without [DONE] (cut off)', async () => {
    const seen: string[] = [];
    const done = await readEvents(body('data: {"n": 1}\n\ndata: {"n"'), data =>
      seen.push(data)
    );
    expect(done).toBe(false);
    expect(seen).toEqual(['{"n": 1}', '{"n"']);
  });

  it('fails as the body fails (a stopped request)', async () => {
    const failing = new ReadableStream<Uint8Array>({
      start(controller) {
        controller.enqueue(new TextEncoder().encode('data: 1\n\n'));
        controller.error(new DOMException('stopped', 'AbortError'));
      }
    });
    await expect(readEvents(failing, () => undefined)).rejects.toThrow(
      'stopped'
    );
  });
});
