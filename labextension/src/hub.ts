/**
 * Whether the page runs in a JupyterHub single-user server, and where that hub
 * hands out API tokens. JupyterHub's single-user extension puts `hubPrefix`,
 * `hubHost`, `hubUser` and `hubServerName` into the page config
 * (tests/test_hub_e2e.py checks a real single-user server's page); outside a hub
 * they are absent, which `PageConfig.getOption` answers with ''.
 */

/** What the panel tells a hub user: the hub's token page. */
export interface IHubContext {
  /** The absolute URL of the hub's token page (`{hubHost}{hubPrefix}token`). */
  tokenPage: string;
}

/** The hub this page runs under, or null outside a hub. */
export function hubContext(
  getOption: (name: string) => string,
  origin: string
): IHubContext | null {
  const prefix = getOption('hubPrefix');
  if (!prefix) {
    return null;
  }
  const page = new URL(`${getOption('hubHost')}${prefix}token`, origin);
  page.username = '';
  page.password = '';
  page.search = '';
  page.hash = '';
  return { tokenPage: page.href };
}
