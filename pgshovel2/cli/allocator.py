"""The relay's memory allocator: jemalloc where the machine has it, else the C library's malloc.

The relay makes and frees about a dozen blocks per Kafka message (key, value, position, librdkafka's
message and its six headers), and librdkafka's broker thread frees what the relay's thread
allocated. glibc's malloc spends much of the relay's CPU on that pattern: in a profile of small
transactions, malloc and free took 27 % of the relay's main thread. jemalloc serves it for
10-25 % less relay CPU per change (docs/operations.rst, "Memory allocator").

An allocator is chosen before the process allocates anything, so the relay chooses it by
re-executing itself (same PID, arguments and streams) with jemalloc in ``LD_PRELOAD``: see
:func:`exec_env`.
"""

import ctypes.util
import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

import click

MODES = ("auto", "jemalloc", "system")
# narenas:1: every thread shares one arena, as librdkafka's threads free the relay thread's blocks;
# the decay settings give freed pages back within half a second: a 1M-row transaction's peak RSS
# stayed at glibc's (docs/operations.rst).
JEMALLOC_CONF = "narenas:1,tcache_max:4096,dirty_decay_ms:500,muzzy_decay_ms:0"
INSTALL_HINT = "Debian and Ubuntu: apt install libjemalloc2; RHEL: dnf install jemalloc"


def find_jemalloc() -> str | None:
    """The file name of the machine's jemalloc library (e.g. ``libjemalloc.so.2``, found by the
    dynamic linker's cache), or None."""
    return ctypes.util.find_library("jemalloc")


def running() -> str:
    """The allocator this process runs with: ``jemalloc`` when its library is mapped, else ``system``."""
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        return "system"
    return "jemalloc" if "libjemalloc" in maps else "system"


def exec_env(mode: str, env: Mapping[str, str], find: Callable[[], str | None] | None = None,
             current: Callable[[], str] | None = None) -> dict[str, str] | None:
    """The environment to re-execute the relay in for mode (one of :data:`MODES`), or None to
    run on as is: already jemalloc; ``system``; ``auto`` where jemalloc is not installed or
    LD_PRELOAD is set already (the operator's preload is left alone). The new environment has
    jemalloc first in LD_PRELOAD and :data:`JEMALLOC_CONF` as MALLOC_CONF unless env sets one.
    Raises click.UsageError for mode ``jemalloc`` without the library. find and current:
    :func:`find_jemalloc` and :func:`running` unless given."""
    if mode == "system" or (current or running)() == "jemalloc":
        return None
    preload = env.get("LD_PRELOAD", "").strip()
    if mode == "auto" and preload:
        return None
    library = (find or find_jemalloc)()
    if library is not None and library in preload.split():  # preloaded, yet not mapped: ld.so refused it
        if mode == "jemalloc":
            raise click.UsageError(f"--allocator jemalloc: {library} is in LD_PRELOAD but did not load")
        return None
    if library is None:
        if mode == "jemalloc":
            raise click.UsageError(f"--allocator jemalloc: the jemalloc library is not installed ({INSTALL_HINT})")
        return None
    new = dict(env)
    new["LD_PRELOAD"] = f"{library} {preload}".strip()
    new.setdefault("MALLOC_CONF", JEMALLOC_CONF)
    return new


def describe(mode: str, env: Mapping[str, str], current: Callable[[], str] | None = None) -> str:
    """The allocator this process runs with (current: :func:`running` unless given), and why not
    jemalloc when it is not (for the log)."""
    if (current or running)() == "jemalloc":
        return "jemalloc"
    if mode == "system":
        return "system (--allocator system)"
    if env.get("LD_PRELOAD", "").strip():
        return f"system (LD_PRELOAD={env['LD_PRELOAD']!r} is set and left as it is)"
    return f"system (jemalloc is not installed: {INSTALL_HINT})"


def reexec(mode: str) -> None:
    """Re-execute this process (sys.orig_argv) under the allocator of mode when :func:`exec_env`
    says so; returns only when it does not. Raises click.UsageError (see exec_env) or OSError
    when the interpreter cannot be executed."""
    env = exec_env(mode, os.environ)
    if env is None:
        return
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, sys.orig_argv, env)
