"""The broadcasting offset file: atomic writes, a backup, and every fallback."""

from __future__ import annotations

from pathlib import Path

import pytest

from aiorocket.consumer.local_offsets import LocalFileOffsetStore
from aiorocket.message import MessageQueue

pytestmark = pytest.mark.anyio

Q0 = MessageQueue("t", "b", 0)
Q1 = MessageQueue("t", "b", 1)


async def test_round_trip_and_backup(tmp_path: Path) -> None:
    store = LocalFileOffsetStore(tmp_path, "inst", "g")
    assert await store.read(Q0) is None
    await store.persist(Q0, 5)
    await store.flush()
    assert store.path.exists() and not store.backup.exists()
    await store.persist(Q0, 7)
    await store.persist(Q1, 1)
    await store.flush()
    assert store.backup.exists()
    again = LocalFileOffsetStore(tmp_path, "inst", "g")
    assert (await again.read(Q0), await again.read(Q1)) == (7, 1)
    # No temporary files are left behind.
    assert sorted(p.name for p in store.path.parent.iterdir()) == [
        "offsets.json",
        "offsets.json.bak",
    ]


@pytest.mark.parametrize("damage", ["corrupt", "missing", "wrong-shape", "negative"])
async def test_falls_back_to_backup(tmp_path: Path, damage: str) -> None:
    store = LocalFileOffsetStore(tmp_path, "inst", "g")
    await store.persist(Q0, 5)
    await store.flush()
    await store.persist(Q0, 9)
    await store.flush()  # main: 9, backup: 5
    if damage == "corrupt":
        store.path.write_bytes(b"\xff\xfe garbage")
    elif damage == "missing":
        store.path.unlink()
    elif damage == "wrong-shape":
        store.path.write_text('{"offsets": [1, 2]}')
    else:
        store.path.write_text('{"version": 1, "offsets": {"b@0@t": -4}}')
    assert await LocalFileOffsetStore(tmp_path, "inst", "g").read(Q0) == 5


async def test_both_unusable_means_no_offsets(tmp_path: Path) -> None:
    store = LocalFileOffsetStore(tmp_path, "inst", "g")
    store.path.parent.mkdir(parents=True)
    store.path.write_text("nope")
    store.backup.write_text("nope either")
    assert await LocalFileOffsetStore(tmp_path, "inst", "g").read(Q0) is None


async def test_unchanged_offsets_are_not_rewritten(tmp_path: Path) -> None:
    store = LocalFileOffsetStore(tmp_path, "inst", "g")
    await store.persist(Q0, 5)
    await store.flush()
    mtime = store.path.stat().st_mtime_ns
    await store.persist(Q0, 5)
    await store.flush()
    assert store.path.stat().st_mtime_ns == mtime and not store.backup.exists()
