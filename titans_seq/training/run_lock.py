"""An exclusive lock on a run folder: one training run writes a folder at a time.

Two runs writing the same folder would interleave their logs and overwrite each other's
config, checkpoints and summary. The lock is an operating-system lock on the first byte of
`<run>/.lock` (`flock` on POSIX, `msvcrt.locking` on Windows); the rest of the file records
the holder's pid, host and start time for the message a second run gets. The operating
system drops the lock when its holder dies, however it dies, so a lock left by a killed run
is simply taken over.
"""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path

from ..errors import UserError

LOCK_FILE = ".lock"

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None
    import msvcrt


class RunFolderBusy(UserError, RuntimeError):
    """Another live run holds the run folder."""


class RunLock:
    """`with RunLock(run_dir): ...` holds the folder's lock for the block (the folder is
    created when missing). `acquire` raises RunFolderBusy naming the holder."""

    def __init__(self, run_dir: Path | str):
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / LOCK_FILE
        self._handle = None

    @property
    def held(self) -> bool:
        return self._handle is not None

    def acquire(self) -> RunLock:
        if self._handle is not None:
            return self
        self.run_dir.mkdir(parents=True, exist_ok=True)
        handle = open(self.path, "a+")
        try:
            _lock(handle)
        except OSError:
            handle.seek(1)
            holder = _parse(handle.read())
            handle.close()
            raise RunFolderBusy(self._busy_message(holder)) from None
        # byte 0 is the locked one; the holder's record follows it
        handle.seek(1)
        handle.truncate()
        handle.write(json.dumps(_me()))
        handle.flush()
        self._handle = handle
        return self

    def release(self) -> None:
        """Unlock. The file stays: removing it would let a process that opened it before the
        removal and one that creates it anew both hold "the" lock."""
        if self._handle is None:
            return
        _unlock(self._handle)
        self._handle.close()
        self._handle = None

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()

    def _busy_message(self, holder: dict) -> str:
        who = f"pid {holder['pid']}" if "pid" in holder else "another process"
        if holder.get("host") and holder["host"] != socket.gethostname():
            who += f" on {holder['host']}"
        if "started" in holder:
            who += f", since {holder['started']}"
        return (
            f"run folder {self.run_dir} is in use by another run ({who}): wait for it to end, "
            f"or choose another train.out_dir"
        )


def _lock(handle) -> None:
    """Lock byte 0 of `handle` without waiting; OSError when another process holds it."""
    handle.seek(0)
    if handle.read(1) == "":
        handle.write(" ")  # the byte to lock (msvcrt locks existing bytes only)
        handle.flush()
    if fcntl is not None:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    else:
        handle.seek(0)
        msvcrt.locking(handle.fileno(), msvcrt.LK_NBLCK, 1)


def _unlock(handle) -> None:
    if fcntl is not None:
        fcntl.flock(handle, fcntl.LOCK_UN)
    else:
        handle.seek(0)
        msvcrt.locking(handle.fileno(), msvcrt.LK_UNLCK, 1)


def _me() -> dict:
    return {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
    }


def _parse(text: str) -> dict:
    try:
        holder = json.loads(text)
    except json.JSONDecodeError:
        return {}
    return holder if isinstance(holder, dict) else {}
