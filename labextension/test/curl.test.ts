import { describe, expect, it } from 'vitest';

import { contentTypeOf, curlCommand, shellQuote } from '../src/curl';

const URL = 'http://127.0.0.1:8888/base/serve/predictions/demo/1.0';

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
        "--data-binary '[6.5, 3.0, 5.8, 2.2]'",
        `'${URL}'`
      ].join(' \\\n  ')
    );
  });

  it('sends a file by name with its type', () => {
    const command = curlCommand(URL, {
      kind: 'file',
      name: 'kitten.png',
      type: 'image/png'
    });
    expect(command).toContain("-H 'Content-Type: image/png'");
    expect(command).toContain('--data-binary @kitten.png');
  });

  it('quotes text for the shell, quotes and @ included', () => {
    expect(shellQuote("it's")).toBe(`'it'"'"'s'`);
    const command = curlCommand(URL, { kind: 'text', text: '@etc' });
    expect(command).toContain("--data-binary @-  <<< '@etc'");
    expect(contentTypeOf({ kind: 'text', text: '' })).toBe(
      'text/plain; charset=utf-8'
    );
    expect(contentTypeOf({ kind: 'file', name: 'x', type: '' })).toBe(
      'application/octet-stream'
    );
  });
});
