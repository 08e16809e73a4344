"""Host memory: give the heap that PyTorch freed back to the operating system.

glibc keeps freed blocks below its (adaptive, up to 32 MB) mmap threshold in the heap for reuse.
During generation the KV cache grows by concatenation and autocast caches a bf16 copy of every
weight; freed at the end, they stay resident, fragmented, and the training forward that follows
stacks its activations on top (measured: benchmarks/RESULTS.md, target 6). `malloc_trim` after
generation returns them to the OS.
"""

from __future__ import annotations

import ctypes
import functools
import platform
import sys


@functools.cache
def _glibc():
    if sys.platform != "linux" or platform.libc_ver()[0] != "glibc":
        return None
    try:
        return ctypes.CDLL("libc.so.6")
    except OSError:
        return None


def trim_heap() -> bool:
    """Return free heap pages to the OS (glibc only; elsewhere a no-op). True if any were returned."""
    libc = _glibc()
    return bool(libc.malloc_trim(0)) if libc is not None else False
