"""Where encrypted token records live (ciphertext only; the broker encrypts). Local files are
written atomically (temp file + ``os.replace``), so a reader never sees half a record."""

from __future__ import annotations

import asyncio
import contextlib
import os
import tempfile
from pathlib import Path
from typing import Protocol, runtime_checkable

from compliance_api.tokens.errors import TokenStoreError
from compliance_api.tokens.keys import CustomerKey


@runtime_checkable
class TokenStore(Protocol):
    """Ciphertext by customer key; shared by every process that must share the token."""

    async def read(self, key: CustomerKey) -> bytes | None: ...

    async def write(self, key: CustomerKey, ciphertext: bytes) -> None: ...

    async def delete(self, key: CustomerKey) -> bool:
        """Remove the record; True if there was one."""


class LocalFileTokenStore:
    """``<state_dir>/tokens/<hash of key>.token`` files, private to the user (0700 / 0600)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def path_for(self, key: CustomerKey) -> Path:
        return self.directory / f"{key.slug}.token"

    async def read(self, key: CustomerKey) -> bytes | None:
        return await asyncio.to_thread(self._read, self.path_for(key))

    async def write(self, key: CustomerKey, ciphertext: bytes) -> None:
        await asyncio.to_thread(self._write, self.path_for(key), ciphertext)

    async def delete(self, key: CustomerKey) -> bool:
        return await asyncio.to_thread(self._delete, self.path_for(key))

    @staticmethod
    def _read(path: Path) -> bytes | None:
        try:
            return path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise TokenStoreError(f"cannot read token store {path}: {exc.strerror}") from None

    def _write(self, path: Path, ciphertext: bytes) -> None:
        try:
            self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd, temp = tempfile.mkstemp(dir=self.directory, prefix=".", suffix=".tmp")
        except OSError as exc:
            raise TokenStoreError(f"cannot write token store {path}: {exc.strerror}") from None
        try:
            with os.fdopen(fd, "wb") as handle:
                os.fchmod(handle.fileno(), 0o600)
                handle.write(ciphertext)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(temp, path)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.unlink(temp)
            raise TokenStoreError(f"cannot write token store {path}: {exc.strerror}") from None

    @staticmethod
    def _delete(path: Path) -> bool:
        try:
            path.unlink()
        except FileNotFoundError:
            return False
        return True
