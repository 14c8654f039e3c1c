import { existsSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { describe, expect, it, onTestFinished } from 'vitest';

import {
  contentTypeOf,
  curlCommand,
  shellQuote,
  tokenVariable,
  withoutCredentials
} from '../src/curl';
import { IHubContext } from '../src/hub';
import { SHELLS, curlArgs } from './shell';

const URL = 'http://127.0.0.1:8888/base/serve/predictions/demo/1.0';

const ADVERSARIAL = [
  'kitten$(touch x).jpg',
  'kitten`touch x`.jpg',
  "it's'; touch x; '.png",
  '-rf.png',
  '-',
  'a\nb; touch x\n.png',
  'ctrl-c\u0003touch x\r\n.png',
  'esc\u001b[201~touch x\n.png',
  'rlo\u202egpj.exe',
  'tab\there $HOME "q" \\.png'
];

describe('curlCommand', () => {
  it('sends JSON with its content type and the token from the environment', () => {
    const command = curlCommand(URL, {
      kind: 'json',
      text: '[6.5, 3.0, 5.8, 2.2]'
    });
    expect(command).toBe(
      [
        'curl -X POST',
        '-H "Authorization: token $JUPYTER_TOKEN"',
        "-H 'Content-Type: application/json'",
        "--data-raw '[6.5, 3.0, 5.8, 2.2]'",
        `'${URL}'`
      ].join(' \\\n  ')
    );
  });

  it('sends a file by its quoted name with its type', () => {
    const command = curlCommand(URL, {
      kind: 'file',
      name: 'kitten$(touch x).jpg',
      type: 'image/jpeg'
    });
    expect(command).toContain("-H 'Content-Type: image/jpeg'");
    expect(command).toContain("--data-binary '@kitten$(touch x).jpg'");
  });

  it('sends inline text with --data-raw, so a leading @ names no file', () => {
    const command = curlCommand(URL, { kind: 'text', text: '@/etc/passwd' });
    expect(command).toContain("--data-raw '@/etc/passwd'");
    expect(contentTypeOf({ kind: 'text', text: '' })).toBe(
      'text/plain; charset=utf-8'
    );
    expect(contentTypeOf({ kind: 'file', name: 'x', type: '' })).toBe(
      'application/octet-stream'
    );
  });

  it('reads a file named - as ./-, not standard input', () => {
    const command = curlCommand(URL, { kind: 'file', name: '-', type: '' });
    expect(command).toContain("--data-binary '@./-'");
  });

  it('never writes a credential: the token comes from $JUPYTER_TOKEN', () => {
    const command = curlCommand(
      'http://me:secret@127.0.0.1:8888/serve/predictions/m?token=abc123&x=1',
      { kind: 'json', text: '{}' }
    );
    expect(command).toContain('"Authorization: token $JUPYTER_TOKEN"');
    expect(command).not.toMatch(/secret|abc123|me:/);
    expect(command).toContain(
      "'http://127.0.0.1:8888/serve/predictions/m?x=1'"
    );
    expect(withoutCredentials(URL)).toBe(URL);
  });

  it('asks curl not to buffer a streamed answer', () => {
    const body = { kind: 'json' as const, text: '{}' };
    const command = curlCommand(URL, body, null, { stream: true });
    expect(command.split(' \\\n  ')[0]).toBe('curl -N -X POST');
    expect(curlCommand(URL, body).split(' \\\n  ')[0]).toBe('curl -X POST');
  });

  it('keeps the content type to one header line', () => {
    const command = curlCommand(URL, {
      kind: 'file',
      name: 'a.bin',
      type: 'x/y\r\nX-Evil: 1'
    });
    expect(command).toContain("-H 'Content-Type: x/y X-Evil: 1'");
  });
});

describe('curlCommand under JupyterHub', () => {
  const HUB: IHubContext = { tokenPage: 'https://hub.example/hub/token' };
  const HUB_URL = 'https://hub.example/user/ann/serve/predictions/demo';

  it('reads $HUB_TOKEN, after a line naming the token page and inference keys', () => {
    const command = curlCommand(HUB_URL, { kind: 'json', text: '[1]' }, HUB);
    expect(command).toBe(
      [
        '# HUB_TOKEN: a token from https://hub.example/hub/token or an inference key of this server',
        [
          'curl -X POST',
          '-H "Authorization: token $HUB_TOKEN"',
          "-H 'Content-Type: application/json'",
          "--data-raw '[1]'",
          `'${HUB_URL}'`
        ].join(' \\\n  ')
      ].join('\n')
    );
    expect(command).not.toContain('JUPYTER_TOKEN');
    expect(tokenVariable(HUB)).toBe('HUB_TOKEN');
    expect(tokenVariable(null)).toBe('JUPYTER_TOKEN');
  });

  it('keeps the note to one comment line whatever the token page holds', () => {
    const odd = { tokenPage: 'https://hub.example/x\ntouch y\u202e' };
    const command = curlCommand(HUB_URL, { kind: 'text', text: '' }, odd);
    expect(command.split('\n')[0]).toBe(
      '# HUB_TOKEN: a token from https://hub.example/xtouch y or an inference key of this server'
    );
    expect(command.split('\n')[1]).toBe('curl -X POST \\');
  });

  for (const shell of SHELLS) {
    it(`runs in ${shell[0]} with the hub token from the environment`, () => {
      const cwd = mkdtempSync(join(tmpdir(), 'curl-hub-'));
      onTestFinished(() => rmSync(cwd, { recursive: true, force: true }));
      const command = curlCommand(HUB_URL, { kind: 'text', text: 'hi' }, HUB);
      expect(curlArgs(shell, command, cwd)).toEqual([
        '-X',
        'POST',
        '-H',
        'Authorization: token from-hub-env',
        '-H',
        'Content-Type: text/plain; charset=utf-8',
        '--data-raw',
        'hi',
        HUB_URL
      ]);
    });
  }
});

describe('shellQuote', () => {
  it("single-quotes, an embedded quote written '\\''", () => {
    expect(shellQuote("it's")).toBe(`'it'\\''s'`);
    expect(shellQuote('')).toBe("''");
    expect(shellQuote('a\nb')).toBe("'a\nb'");
  });

  it('spells terminal and direction controls with printf, never literally', () => {
    expect(shellQuote('a\u001bb')).toBe(`'a'"$(printf '\\033')"'b'`);
    expect(shellQuote('\u202e')).toBe(`"$(printf '\\342\\200\\256')"`);
    const quoted = shellQuote(ADVERSARIAL.join(''));
    expect(quoted).not.toMatch(/(?!\n)[\p{Cc}\p{Cf}]/u);
  });

  for (const shell of SHELLS) {
    it(`gives ${shell[0]} every adversarial file name as one word, running nothing`, () => {
      const cwd = mkdtempSync(join(tmpdir(), 'curl-quote-'));
      onTestFinished(() => rmSync(cwd, { recursive: true, force: true }));
      for (const name of ADVERSARIAL) {
        const command = curlCommand(URL, { kind: 'file', name, type: '' });
        const args = curlArgs(shell, command, cwd);
        const file = name === '-' ? './-' : name;
        expect(args).toEqual([
          '-X',
          'POST',
          '-H',
          'Authorization: token from-env',
          '-H',
          'Content-Type: application/octet-stream',
          '--data-binary',
          `@${file}`,
          URL
        ]);
        const inline = curlCommand(URL, { kind: 'text', text: name });
        expect(curlArgs(shell, inline, cwd)[7]).toBe(name);
      }
      expect(readdirSync(cwd)).toEqual([]);
      expect(existsSync(join(cwd, 'x'))).toBe(false);
    });
  }
});
