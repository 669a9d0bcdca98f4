"""Files the project writes are never readable by other users of the machine.

``0600`` (the owner only) for state, records and logs; ``0640`` (the owner's group may read)
for exports an auditor's group collects. The mode is given when the file is created, so there is
no moment in which it is wider; an existing file keeps its mode.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import BinaryIO

PRIVATE = 0o600
GROUP_READABLE = 0o640
PRIVATE_DIR = 0o700
GROUP_READABLE_DIR = 0o750
#: for processes the project starts: whatever they create is at most 0640 / 0750
UMASK = 0o027


def open_append(path: Path, mode: int = PRIVATE) -> BinaryIO:
    """``path`` opened for appending bytes, created with ``mode`` if missing."""
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, mode)
    return os.fdopen(descriptor, "ab")


def open_new(path: Path, mode: int = PRIVATE) -> BinaryIO:
    """``path`` truncated (or created with ``mode``) for writing bytes."""
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    return os.fdopen(descriptor, "wb")


def write_private(path: Path, text: str, mode: int = PRIVATE) -> None:
    with open_new(path, mode) as handle:
        handle.write(text.encode())


def write_secret(path: Path, text: str) -> None:
    """``text`` into ``path``, 0600 from the start, and an existing file narrowed to 0600 too
    (a secret's file must never stay wider than its owner)."""
    write_private(path, text)
    os.chmod(path, PRIVATE)


def touch(path: Path, mode: int = PRIVATE) -> None:
    """Create ``path`` empty with ``mode`` if it does not exist (before a library opens it)."""
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT, mode))


def make_dirs(path: Path, mode: int = PRIVATE_DIR) -> None:
    """``path`` and its missing parents, each new one with ``mode``."""
    path.mkdir(mode=mode, parents=True, exist_ok=True)
