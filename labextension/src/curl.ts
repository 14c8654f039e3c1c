/**
 * The `curl` command equivalent to a Try-it request. The token is never in it:
 * the command reads it from `$JUPYTER_TOKEN`, which the user sets themselves.
 */

export type TryBody =
  | { kind: 'json'; text: string }
  | { kind: 'text'; text: string }
  | { kind: 'file'; name: string; type: string };

/** Quote `value` for a POSIX shell. */
export function shellQuote(value: string): string {
  return `'${value.replace(/'/g, `'"'"'`)}'`;
}

/** The Content-Type a Try-it body is sent with. */
export function contentTypeOf(body: TryBody): string {
  if (body.kind === 'json') {
    return 'application/json';
  }
  if (body.kind === 'text') {
    return 'text/plain; charset=utf-8';
  }
  return body.type || 'application/octet-stream';
}

/** `curl` sending `body` to `url` (an absolute URL) with the token from the environment. */
export function curlCommand(url: string, body: TryBody): string {
  const data =
    body.kind === 'file'
      ? `@${body.name}`
      : body.text.startsWith('@')
        ? `@-  <<< ${shellQuote(body.text)}`
        : shellQuote(body.text);
  return [
    'curl -X POST',
    '-H "Authorization: token $JUPYTER_TOKEN"',
    `-H ${shellQuote(`Content-Type: ${contentTypeOf(body)}`)}`,
    `--data-binary ${data}`,
    shellQuote(url)
  ].join(' \\\n  ');
}
