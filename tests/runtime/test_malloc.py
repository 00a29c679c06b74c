"""The heap settings for loops of large allocations: freed memory is reused inside the
context and returned to the OS when it closes (glibc); elsewhere nothing changes."""

import os
import sys

import numpy as np
import pytest

from miaudit.runtime import malloc


def _rss_bytes() -> int:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.skipif(not sys.platform.startswith("linux") or malloc._libc() is None,
                    reason="glibc heap behaviour")
def test_blocks_are_reused_inside_and_returned_after():
    # free pages earlier tests left in the heap would hold part of the block without raising
    # the RSS: hand them back first (in the whole suite the rise was 149 MiB, not 200)
    malloc.release_freed_memory()
    before = _rss_bytes()
    with malloc.keep_freed_memory():
        for _ in range(3):  # the same 200 MiB block, freed and allocated again
            block = np.ones(200 * 2**20 // 8)
            del block
        assert _rss_bytes() - before > 150 * 2**20  # kept in the heap, not unmapped
    assert _rss_bytes() - before < 50 * 2**20  # returned when the context closed


def test_without_glibc_the_context_only_runs_its_body(monkeypatch):
    monkeypatch.setattr(malloc, "_libc", lambda: None)
    ran = []
    with malloc.keep_freed_memory():
        ran.append(True)
    malloc.release_freed_memory()
    assert ran == [True]
