import { describe, expect, it } from 'vitest';

import { hubContext } from '../src/hub';

/** A fake `PageConfig.getOption`: '' for a missing option, as the real one answers. */
function options(config: Record<string, string>): (name: string) => string {
  return name => config[name] ?? '';
}

/** The options JupyterHub's single-user extension sets (tests/test_hub_e2e.py). */
const HUB = {
  hubPrefix: '/hub/',
  hubHost: '',
  hubUser: 'ann',
  hubServerName: ''
};

describe('hubContext', () => {
  it('is null outside a hub', () => {
    expect(hubContext(options({}), 'http://127.0.0.1:8888')).toBeNull();
  });

  it("names the hub's token page on the page's own origin", () => {
    expect(hubContext(options(HUB), 'https://hub.example')).toEqual({
      tokenPage: 'https://hub.example/hub/token'
    });
  });

  it('uses the hub host when the hub has its own', () => {
    const config = { ...HUB, hubHost: 'https://login.example' };
    expect(hubContext(options(config), 'https://u.example')?.tokenPage).toBe(
      'https://login.example/hub/token'
    );
  });

  it('keeps no credential or query from the hub host', () => {
    const config = { ...HUB, hubHost: 'https://me:secret@login.example' };
    const page = hubContext(options(config), 'https://u.example')?.tokenPage;
    expect(page).toBe('https://login.example/hub/token');
  });
});
