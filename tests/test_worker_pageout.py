"""`worker.pageout`: which mappings the factory hands back, and that the kernel takes them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from jupyter_serve.worker.pageout import readonly_file_ranges

MAPS = """\
55d4c6a00000-55d4c6a2b000 r--p 00000000 08:01 1049 /usr/bin/python3.11
55d4c6a2b000-55d4c6cf0000 r-xp 0002b000 08:01 1049 /usr/bin/python3.11
55d4c6ff0000-55d4c6ff5000 rw-p 003f0000 08:01 1049 /usr/bin/python3.11
55d4c7200000-55d4c7800000 rw-p 00000000 00:00 0 [heap]
7f1a00000000-7f1a02000000 rw-p 00000000 00:00 0
7f1a10000000-7f1a12d00000 r-xp 00400000 08:01 777 /venv/torch/lib/libtorch_cpu.so
7f1a20000000-7f1a20001000 r--s 00000000 08:01 778 /dev/shm/shared-segment
7f1a30000000-7f1a30002000 ---p 00000000 08:01 777 /venv/torch/lib/libtorch_cpu.so
7ffd1c000000-7ffd1c021000 rw-p 00000000 00:00 0 [stack]
7ffd1c1f0000-7ffd1c1f2000 r-xp 00000000 00:00 0 [vdso]
"""

# Maps a private file read-only, touches every page, hands the pages back; prints the
# file-backed resident KiB (`RssFile`) before and after.
PROBE = """
import mmap, sys
from jupyter_serve.worker.pageout import release_file_pages

def rss_file():
    for line in open("/proc/self/status"):
        if line.startswith("RssFile:"):
            return int(line.split()[1])

with open(sys.argv[1], "rb") as f:
    view = mmap.mmap(f.fileno(), 0, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ)
total = sum(view[i] for i in range(0, len(view), mmap.PAGESIZE))
before = rss_file()
advised = release_file_pages()
print(before, rss_file(), advised)
"""


def test_only_read_only_private_file_mappings_are_taken() -> None:
    assert readonly_file_ranges(MAPS.splitlines()) == [
        (0x55D4C6A00000, 0x55D4C6A2B000),
        (0x55D4C6A2B000, 0x55D4C6CF0000),
        (0x7F1A10000000, 0x7F1A12D00000),
    ]


def test_the_kernel_takes_back_the_pages_of_a_file_only_this_process_maps(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data.bin"
    data.write_bytes(bytes(range(256)) * (64 * 1024))  # 16 MiB no other process maps
    probe = subprocess.run(
        [sys.executable, "-c", PROBE, str(data)], capture_output=True, text=True, check=True
    )
    before, after, advised = (int(word) for word in probe.stdout.split())
    assert advised >= 16 << 20
    assert before - after >= 15 * 1024  # KiB: the 16 MiB file's pages, less a page or two
