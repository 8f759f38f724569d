#!/usr/bin/env python3
"""Drops files' pages from the page cache, so that the next read of them comes from the device.

    python3 tests/bench/drop_pages.py FILE...

Each file is flushed first (fsync: dirty pages cannot be dropped), then its whole range is
advised away with posix_fadvise(POSIX_FADV_DONTNEED). Needs no privileges, unlike
/proc/sys/vm/drop_caches, and touches no other file's pages. `fincore FILE` shows what stays.
"""
import os
import sys


def drop(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: drop_pages.py FILE...")
    for p in sys.argv[1:]:
        drop(p)
