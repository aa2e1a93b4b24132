"""Broadcasting offsets in a local file, written atomically with a backup.

Every broadcasting consumer owns all queues, so the broker cannot hold one offset per
queue for the group; each consumer instance keeps its own in
``<dir>/<instance>/<group>/offsets.json``. A write goes to a temporary file that is
fsynced and renamed over the main file, after the previous main file was kept as
``offsets.json.bak``; so at every instant one of the two is complete. Loading falls
back to the backup (with a warning) and, when neither is usable, to no offsets at all
(the consumer then starts from its consume-from-where setting).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import anyio

from aiorocket._log import get_logger
from aiorocket.message import MessageQueue

__all__ = [
    "FORMAT_VERSION",
    "LocalFileOffsetStore",
    "default_offset_dir",
]

FORMAT_VERSION = 1


def default_offset_dir() -> Path:
    return Path(os.environ.get("AIOROCKET_OFFSET_DIR", Path.home() / ".aiorocket" / "offsets"))


def _key(mq: MessageQueue) -> str:
    return f"{mq.broker_name}@{mq.queue_id}@{mq.topic}"


def _parse(text: str) -> dict[str, int]:
    obj: Any = json.loads(text)
    if not isinstance(obj, dict) or not isinstance(obj.get("offsets"), dict):
        raise ValueError("not an aiorocket offsets file")
    out: dict[str, int] = {}
    for k, v in obj["offsets"].items():
        if not isinstance(v, int) or isinstance(v, bool) or v < 0:
            raise ValueError(f"bad offset for {k!r}: {v!r}")
        out[str(k)] = v
    return out


class LocalFileOffsetStore:
    def __init__(self, directory: Path, instance: str, group: str) -> None:
        self.path = directory / instance / group / "offsets.json"
        self.backup = self.path.with_name("offsets.json.bak")
        self._offsets: dict[str, int] | None = None
        self._dirty = False
        self._log = get_logger("consumer.local_offsets", group=group, path=str(self.path))

    def _load_sync(self) -> dict[str, int]:
        for candidate in (self.path, self.backup):
            try:
                offsets = _parse(candidate.read_text(encoding="utf-8"))
            except FileNotFoundError:
                if candidate is self.path and self.backup.exists():
                    self._log.warning("offsets_file_missing_using_backup")
                continue
            except (OSError, ValueError, UnicodeDecodeError) as exc:
                self._log.warning("offsets_file_unusable", file=str(candidate), error=str(exc))
                continue
            if candidate is self.backup:
                self._log.warning("offsets_loaded_from_backup")
            return offsets
        return {}

    async def load(self) -> None:
        if self._offsets is None:
            self._offsets = await anyio.to_thread.run_sync(self._load_sync)

    async def read(self, mq: MessageQueue) -> int | None:
        await self.load()
        assert self._offsets is not None
        return self._offsets.get(_key(mq))

    async def persist(self, mq: MessageQueue, offset: int) -> None:
        await self.load()
        assert self._offsets is not None
        if self._offsets.get(_key(mq)) != offset:
            self._offsets[_key(mq)] = offset
            self._dirty = True

    def _write_sync(self, snapshot: dict[str, int]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f"offsets.json.tmp{os.getpid()}")
        data = json.dumps(
            {"version": FORMAT_VERSION, "offsets": snapshot}, indent=1, sort_keys=True
        )
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        if self.path.exists():
            os.replace(self.path, self.backup)
        os.replace(tmp, self.path)
        if os.name == "posix":  # make the rename durable; Windows cannot open a directory
            dir_fd = os.open(self.path.parent, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)

    async def flush(self) -> None:
        if not self._dirty or self._offsets is None:
            return
        self._dirty = False
        try:
            await anyio.to_thread.run_sync(self._write_sync, dict(self._offsets))
        except OSError:
            self._dirty = True
            raise
