"""Handing back the library pages the worker factory touched only while importing torch.

Importing torch reads about 70 MB of its libraries' code and read-only data that
run once: static initialisers and operator registration. The worker factory
(`factory`) runs nothing after its warm-up, so `release_file_pages()` asks the
kernel to reclaim every page of its read-only, private, file-backed mappings
(`madvise(MADV_PAGEOUT)`, Linux 5.4 and later). A worker forked afterwards maps
only the library pages it uses, faulted back on first use from the page cache
(or the disk), where the factory would otherwise hold them all for good.

Anonymous memory (torch's heap, Python's objects) is not touched: that is what the
forked workers share with the factory. Writable mappings are skipped too. On a
kernel without MADV_PAGEOUT, or without `/proc`, nothing happens.
"""

from __future__ import annotations

import ctypes
from collections.abc import Iterable

__all__ = ["MADV_PAGEOUT", "readonly_file_ranges", "release_file_pages"]

MADV_PAGEOUT = 21  # <linux/mman.h>


def readonly_file_ranges(maps_lines: Iterable[str]) -> list[tuple[int, int]]:
    """`(start, end)` of each read-only, private mapping of a file in `/proc/PID/maps` lines."""
    ranges = []
    for line in maps_lines:
        fields = line.split(maxsplit=5)
        if len(fields) < 6 or not fields[5].startswith("/"):
            continue  # anonymous memory, the heap, the stack, [vdso]...
        perms = fields[1]
        if not perms.startswith("r") or "w" in perms or not perms.endswith("p"):
            continue
        start, _, end = fields[0].partition("-")
        ranges.append((int(start, 16), int(end, 16)))
    return ranges


def release_file_pages(maps_path: str = "/proc/self/maps") -> int:
    """Ask the kernel to reclaim this process's read-only file pages; the bytes advised."""
    try:
        with open(maps_path, encoding="utf-8", errors="replace") as maps:
            ranges = readonly_file_ranges(maps)
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:
        return 0
    madvise = libc.madvise
    madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    madvise.restype = ctypes.c_int
    advised = 0
    for start, end in ranges:  # a kernel without MADV_PAGEOUT refuses each with EINVAL
        if madvise(start, end - start, MADV_PAGEOUT) == 0:
            advised += end - start
    return advised
