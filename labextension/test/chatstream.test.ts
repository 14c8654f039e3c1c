import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { beforeEach, describe, expect, it, onTestFinished, vi } from 'vitest';

import { answerServe } from '../src/api';
import {
  AnswerClock,
  chatBody,
  chatCurl,
  describeAnswer,
  isAbort,
  openAIError,
  readChunk,
  streamChat
} from '../src/chatstream';
import { SHELLS, curlArgs } from './shell';
import { body } from './streams';

vi.mock('../src/api', async importOriginal => ({
  ...(await importOriginal<typeof import('../src/api')>()),
  answerServe: vi.fn()
}));

const OPTIONS = {
  model: 'tinylm/1.0',
  messages: [{ role: 'user' as const, content: 'Hi' }],
  temperature: 0,
  maxTokens: 12
};

/** A chat.completion.chunk event as the OpenAI routes stream it. */
function event(content: string | null, finish: string | null = null): string {
  const delta =
    content === null ? { role: 'assistant', content: '' } : { content };
  const choice = { index: 0, delta, logprobs: null, finish_reason: finish };
  return `data: ${JSON.stringify({ object: 'chat.completion.chunk', choices: [choice], usage: null })}\n\n`;
}

const USAGE = `data: ${JSON.stringify({ choices: [], usage: { prompt_tokens: 7, completion_tokens: 3, total_tokens: 10 } })}\n\n`;

beforeEach(() => {
  vi.mocked(answerServe).mockReset();
});

describe('the request', () => {
  it('streams with usage, the conversation and the settings in OpenAI names', () => {
    expect(JSON.parse(chatBody(OPTIONS))).toEqual({
      model: 'tinylm/1.0',
      messages: [{ role: 'user', content: 'Hi' }],
      temperature: 0,
      max_tokens: 12,
      stream: true,
      stream_options: { include_usage: true }
    });
  });
});

describe('readChunk', () => {
  it('reads the text, the finish reason and the usage of an event', () => {
    expect(readChunk(event('Hel').slice(6).trim())).toEqual({
      text: 'Hel',
      finishReason: null,
      usage: null
    });
    expect(readChunk(event('', 'length').slice(6).trim()).finishReason).toBe(
      'length'
    );
    expect(readChunk(USAGE.slice(6).trim())).toEqual({
      text: '',
      finishReason: null,
      usage: { promptTokens: 7, completionTokens: 3 }
    });
  });

  it('throws on an error event or data that is not JSON', () => {
    expect(() => readChunk('{"error": {"message": "overloaded"}}')).toThrow(
      'overloaded'
    );
    expect(() => readChunk('{"n"')).toThrow('unreadable event');
  });
});

describe('streamChat', () => {
  it('hands each piece of text on as it comes and ends with the usage', async () => {
    vi.mocked(answerServe).mockResolvedValue(
      new Response(
        body(
          event(null),
          event('Hel'),
          event('lo'),
          event('!'),
          event('', 'length'),
          USAGE,
          'data: [DONE]\n\n'
        ),
        { headers: { 'Content-Type': 'text/event-stream' } }
      )
    );
    const pieces: string[] = [];
    const result = await streamChat(OPTIONS, piece => pieces.push(piece));
    expect(pieces).toEqual(['Hel', 'lo', '!']);
    expect(result).toEqual({
      text: 'Hello!',
      finishReason: 'length',
      usage: { promptTokens: 7, completionTokens: 3 },
      complete: true
    });
    const [path, init] = vi.mocked(answerServe).mock.calls[0];
    expect(path).toBe('v1/chat/completions');
    expect(init?.method).toBe('POST');
    expect(JSON.parse(String(init?.body)).stream).toBe(true);
  });

  it('says so when the stream ends without [DONE]', async () => {
    vi.mocked(answerServe).mockResolvedValue(new Response(body(event('Hel'))));
    const result = await streamChat(OPTIONS, () => undefined);
    expect(result.complete).toBe(false);
    expect(result.text).toBe('Hel');
  });

  it("throws the server's OpenAI error message", async () => {
    const refusal = {
      error: {
        message: "This model's maximum context length is 512 tokens.",
        type: 'invalid_request_error',
        param: 'messages',
        code: 'context_length_exceeded'
      }
    };
    vi.mocked(answerServe).mockResolvedValue(
      new Response(JSON.stringify(refusal), { status: 400 })
    );
    await expect(streamChat(OPTIONS, () => undefined)).rejects.toThrow(
      "400: This model's maximum context length is 512 tokens."
    );
  });
});

describe('openAIError', () => {
  it('keeps a body that is not OpenAI JSON as it is', async () => {
    const error = await openAIError(
      new Response('Bad gateway', { status: 502 })
    );
    expect(error.status).toBe(502);
    expect(error.message).toBe('502: Bad gateway');
  });
});

describe('isAbort', () => {
  it('knows a stopped request by its signal or its error', () => {
    const stopped = new AbortController();
    stopped.abort();
    expect(isAbort(new Error('network'), stopped.signal)).toBe(true);
    expect(isAbort(new DOMException('stopped', 'AbortError'))).toBe(true);
    expect(isAbort(new Error('network'), new AbortController().signal)).toBe(
      false
    );
  });
});

describe('AnswerClock', () => {
  it('times the first token from sending, the rate from the first token to the last', () => {
    const clock = new AnswerClock(1000);
    expect(clock.ttftMs).toBeNull();
    expect(clock.tokensPerSecond()).toBeNull();
    clock.text(1250); // 250 ms to the first token
    expect(clock.tokensPerSecond()).toBeNull(); // one token: no rate yet
    clock.text(1300);
    clock.text(1350);
    expect(clock.ttftMs).toBe(250);
    expect(clock.tokensPerSecond()).toBe(20); // 2 more tokens in 100 ms
    expect(clock.tokensPerSecond(11)).toBe(100); // the server's count
  });

  it('writes the stats line of an answer', () => {
    const clock = new AnswerClock(0);
    for (const now of [42, 52, 62, 72]) {
      clock.text(now);
    }
    const usage = { promptTokens: 7, completionTokens: 4 };
    expect(describeAnswer(clock, { usage, finishReason: 'length' })).toBe(
      'TTFT 42.0 ms · 100 tokens/s · 4 tokens · length'
    );
    expect(describeAnswer(clock, null, 'stopped')).toBe(
      'TTFT 42.0 ms · 100 tokens/s · 4 tokens · stopped'
    );
    expect(describeAnswer(new AnswerClock(0), null, 'failed')).toBe(
      'TTFT – · – tokens/s · 0 tokens · failed'
    );
  });
});

describe('chatCurl', () => {
  const CHAT_URL = 'http://127.0.0.1:8888/base/serve/v1/chat/completions';
  const TRICKY = {
    ...OPTIONS,
    messages: [
      { role: 'user' as const, content: "it's $(touch x) `touch x`\n\u001b[2J" }
    ]
  };

  for (const shell of SHELLS) {
    it(`streams the request the chat would send, in ${shell[0]}, running nothing`, () => {
      const cwd = mkdtempSync(join(tmpdir(), 'chat-curl-'));
      onTestFinished(() => rmSync(cwd, { recursive: true, force: true }));
      const args = curlArgs(shell, chatCurl(CHAT_URL, TRICKY), cwd);
      expect(args).toEqual([
        '-N',
        '-X',
        'POST',
        '-H',
        'Authorization: token from-env',
        '-H',
        'Content-Type: application/json',
        '--data-raw',
        chatBody(TRICKY),
        CHAT_URL
      ]);
      expect(JSON.parse(args[8]).stream).toBe(true);
      expect(readdirSync(cwd)).toEqual([]);
    });
  }

  it('reads $HUB_TOKEN under a hub', () => {
    const hub = { tokenPage: 'https://hub.example/hub/token' };
    const command = chatCurl(CHAT_URL, OPTIONS, hub);
    expect(command).toContain('$HUB_TOKEN');
    expect(command).not.toContain('JUPYTER_TOKEN');
  });
});
