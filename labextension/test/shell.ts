/** Runs a copied command in real shells, `curl` being a function that prints its argv. */

import { execFileSync } from 'node:child_process';

/** The shells a copied command must work in: bash without its start files, and dash. */
export const SHELLS = [['bash', '--norc', '--noprofile'], ['dash']];

/** The argv `command` gives `curl` in `shell`, `curl` being a function that prints it. */
export function curlArgs(
  shell: string[],
  command: string,
  cwd: string
): string[] {
  const script = `curl() { printf '%s\\0' "$@"; }\n${command}\n`;
  const out = execFileSync(shell[0], [...shell.slice(1), '-c', script], {
    cwd,
    env: {
      PATH: process.env.PATH ?? '',
      JUPYTER_TOKEN: 'from-env',
      HUB_TOKEN: 'from-hub-env'
    },
    stdio: ['ignore', 'pipe', 'pipe']
  });
  return out.toString('utf8').split('\0').slice(0, -1);
}
