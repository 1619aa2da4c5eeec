"""keep_freed_memory: big tensors come from the reusable heap, not from fresh mappings."""

import subprocess
import sys

import pytest

from formers.cpu_allocator import _glibc, keep_freed_memory

# Prints the bytes glibc holds in mmap'd blocks while a 64 MiB tensor is alive.
PROBE = """
import ctypes, sys
import torch
from formers.cpu_allocator import _glibc, keep_freed_memory

class MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]

libc = _glibc()
libc.mallinfo2.restype = MallInfo2
if sys.argv[1] == "tuned":
    assert keep_freed_memory()
before = libc.mallinfo2().hblkhd
big = torch.empty(16 * 1024 * 1024)  # 64 MiB
print(libc.mallinfo2().hblkhd - before)
"""

needs_glibc = pytest.mark.skipif(
    _glibc() is None or not hasattr(_glibc(), "mallinfo2"), reason="glibc >= 2.33 only"
)


def mapped_bytes_for_a_big_tensor(mode: str) -> int:
    out = subprocess.run(
        [sys.executable, "-c", PROBE, mode], capture_output=True, text=True, check=True
    )
    return int(out.stdout.split()[-1])


@needs_glibc
def test_a_big_tensor_is_mapped_by_default_and_comes_from_the_heap_once_tuned():
    assert mapped_bytes_for_a_big_tensor("default") >= 64 * 1024 * 1024
    assert mapped_bytes_for_a_big_tensor("tuned") == 0


def test_the_switch_turns_it_off(monkeypatch):
    monkeypatch.setenv("FORMERS_KEEP_FREED_MEMORY", "0")
    assert keep_freed_memory() is False
