/**
 * The `curl` command equivalent to a Try-it request, safe to paste into a POSIX
 * shell whatever the data holds:
 *
 * - every part that comes from data (the URL, a header value, an inline body, a
 *   file name) is one single-quoted shell word, an embedded `'` written `'\''`;
 * - characters that act on a terminal or hide text rather than show a glyph
 *   (Unicode Cc, Cf, Zl, Zp: ESC, Ctrl-C, a right-to-left override...) are never
 *   written literally: each is spelled `"$(printf '\ooo')"` (its UTF-8 bytes in
 *   octal), still inside the same word; a newline stays literal, which inside
 *   single quotes is part of the word in every POSIX shell;
 * - an inline body goes through `--data-raw` (no `@file` meaning) and a file
 *   through `--data-binary @NAME`, with `./` before a name curl would read as
 *   standard input (`-`);
 * - no credential: the token is read from `$JUPYTER_TOKEN`, which the user sets
 *   themselves, and any user:password or `token` query parameter in the URL is
 *   dropped. Under JupyterHub (`hub.ts`) no such token exists: the command reads
 *   `$HUB_TOKEN` instead, after a comment line naming the hub's token page and
 *   inference keys, the two things the user can set it to.
 */

import { IHubContext } from './hub';

export type TryBody =
  | { kind: 'json'; text: string }
  | { kind: 'text'; text: string }
  | { kind: 'file'; name: string; type: string };

/** The variable the command reads the token from: the user sets it, never the panel. */
export function tokenVariable(hub: IHubContext | null): string {
  return hub ? 'HUB_TOKEN' : 'JUPYTER_TOKEN';
}

/** The one header that authenticates: from the environment, never a literal token. */
export function authHeader(hub: IHubContext | null): string {
  return `-H "Authorization: token $${tokenVariable(hub)}"`;
}

/** Under a hub, the comment line saying where `$HUB_TOKEN` comes from. */
export function hubNote(hub: IHubContext): string {
  const page = hub.tokenPage.replace(/[\p{Cc}\p{Cf}\p{Zl}\p{Zp}]/gu, '');
  return `# HUB_TOKEN: a token from ${page} or an inference key of this server`;
}

/** A character shown literally would act on a terminal or hide text (newline excepted). */
const UNSHOWN = /((?!\n)[\p{Cc}\p{Cf}\p{Zl}\p{Zp}])/u;

/** Quote `value` as one POSIX shell word (module docstring). */
export function shellQuote(value: string): string {
  const pieces = value.split(UNSHOWN);
  const word = pieces
    .map((piece, index) =>
      index % 2 ? printfWord(piece) : singleQuoted(piece)
    )
    .join('');
  return word || "''";
}

function singleQuoted(text: string): string {
  return text ? `'${text.replace(/'/g, `'\\''`)}'` : '';
}

/** `"$(printf '\ooo...')"`: the UTF-8 bytes of `char`, written by the shell itself. */
function printfWord(char: string): string {
  const octal = Array.from(
    new TextEncoder().encode(char),
    byte => `\\${byte.toString(8).padStart(3, '0')}`
  ).join('');
  return `"$(printf '${octal}')"`;
}

/** `url` without anything that could be a credential: user:password, a `token` parameter. */
export function withoutCredentials(url: string): string {
  const parsed = new URL(url);
  parsed.username = '';
  parsed.password = '';
  parsed.searchParams.delete('token');
  return parsed.href;
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

/** The curl option and argument sending `body`. */
function dataOption(body: TryBody): string {
  if (body.kind !== 'file') {
    return `--data-raw ${shellQuote(body.text)}`;
  }
  const name = body.name === '-' ? './-' : body.name;
  return `--data-binary ${shellQuote(`@${name}`)}`;
}

/**
 * `curl` sending `body` to `url` (an absolute URL) with the token from the
 * environment; under `hub`, `$HUB_TOKEN` after a line saying where to get one.
 * `stream`: the answer streams (server-sent events), so curl shows each piece as
 * it comes (`-N`, no output buffering).
 */
export function curlCommand(
  url: string,
  body: TryBody,
  hub: IHubContext | null = null,
  { stream = false }: { stream?: boolean } = {}
): string {
  const type = contentTypeOf(body).replace(/[\r\n]+/g, ' ');
  const command = [
    stream ? 'curl -N -X POST' : 'curl -X POST',
    authHeader(hub),
    `-H ${shellQuote(`Content-Type: ${type}`)}`,
    dataOption(body),
    shellQuote(withoutCredentials(url))
  ].join(' \\\n  ');
  return hub ? `${hubNote(hub)}\n${command}` : command;
}
