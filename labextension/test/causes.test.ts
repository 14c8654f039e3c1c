import { describe, expect, it } from 'vitest';

import { failureCause } from '../src/logs';

const line = (worker: string, message: string): string =>
  `2026-01-01T00:00:00.000Z [broken/${worker}] ${message}`;

describe('failureCause', () => {
  it('is the exception line ending the newest traceback', () => {
    const lines = [
      line('9001', 'Worker forked, pid 12, gpu None'),
      line('9001', 'Traceback (most recent call last):'),
      line('9001', '  File "handler.py", line 1, in <module>'),
      line('9001', '    import missing'),
      line('9001', "ModuleNotFoundError: No module named 'missing'"),
      line('9001', ''),
      line('9001', "Load failed: Loading model 'broken' failed: ..."),
      line('9001', 'Worker exited with code -15')
    ];
    expect(failureCause(lines)).toBe(
      "ModuleNotFoundError: No module named 'missing'"
    );
  });

  it('keeps the workers apart when their lines interleave', () => {
    const lines = [
      line('9001', 'Traceback (most recent call last):'),
      line('9002', 'ready'),
      line('9001', '  File "x.py", line 2'),
      line('9001', 'ValueError: bad weights')
    ];
    expect(failureCause(lines)).toBe('ValueError: bad weights');
  });

  it('falls back to the load failure note, and is null for a clean log', () => {
    expect(failureCause([line('9001', 'Load failed: out of memory')])).toBe(
      'out of memory'
    );
    expect(failureCause([line('9001', 'Worker forked, pid 1')])).toBeNull();
    expect(failureCause(['not a log line'])).toBeNull();
  });
});
