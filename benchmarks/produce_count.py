"""The auto-batched producer's client work a message, counted (issue 43, goal 3).

    python benchmarks/produce_count.py count [--tree DIR] [--low 5000] [--high 25000]
    python benchmarks/produce_count.py calls [--tree DIR] [--messages 30000] [--top 25]
    python benchmarks/produce_count.py ops   [--tree DIR] [--messages 3000] [--top 25]
    python benchmarks/produce_count.py serve                  # the fake cluster alone
    python benchmarks/produce_count.py run N --namesrv ADDR   # the client alone
    (each client mode takes --id-step-us US: the ids' clock, below; 0: the real one;
    --plain: the plain send path, below; --backend asyncio|trio)

The client is compare.py's auto-batched produce child (``produce.py``'s
``run_start_send``: one loop of ``start_send`` with a callback, 64 slots, 1 KiB bodies)
with ``batch_in_flight=2``, so that every run makes the batches it makes against a real
broker at 64 in flight (two requests of 32 since round 12, 30 before: benchmarks/
README.md, "Goal 3, rounds 8 and 12"): the per-message share of each request's work is
then the same in every run. It sends to a fake NameServer and broker (``serve``) in a
process of their own, which answer every request at once, so what is counted is the
client's own work, its socket calls included (not the kernel's side of them).

The ids' clock. A message id is formatted whole once a millisecond and, within it, is a
counter's next number (``aiorocket._unique_id``): at full speed ~33 messages share a
millisecond. Under cachegrind (~50x slower) and the tracer (~500x) a millisecond passed
every message or two, so the id's slow path was counted as every message's (round 11).
The client's ids therefore read a clock that advances ``--id-step-us`` (30 µs: ~33 ids a
millisecond, the real client's rate at ~33,000 messages a second) at each reading, a C
call (``itertools.count``) in place of ``time.time_ns`` in the id module alone: every
run switches millisecond every ~33 ids whatever valgrind's slowdown, as the real client
does. ``--id-step-us 0`` keeps the real clock (the figures of rounds 10 and 11).

* ``count``: instructions a message by cachegrind (valgrind), which do not depend on
  the machine's load: (I(high) - I(low)) / (high - low), each run after the same
  1,000-message warm-up; then Python calls a message (``calls``).
* ``calls``: function calls a message by cProfile over ``--messages`` after the
  warm-up, and the functions that make the most of them.
* ``ops``: bytecodes a message per function (a ``sys.settrace`` opcode counter: slow;
  the count is the figure, not the time).

``--tree DIR`` runs the client on another checkout's ``aiorocket`` (by ``PYTHONPATH``:
old and new alternating from one script); the fake cluster always runs this one's.
``--plain`` counts compare.py's ``aiorocket-plain`` produce child instead
(``aio_children.py produce ... plain``: ``auto_batch`` off, 64 tasks each awaiting
``send`` in a loop: a request, an answer and a ``SendResult`` a message; the path of the
exactly-once Spark sink's half messages too).

Not a test: it prints its figures and asserts nothing about them.
"""

from __future__ import annotations

import argparse
import collections
import cProfile
import itertools
import json
import os
import pstats
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path
from types import FrameType
from typing import Any

import anyio

HERE = Path(__file__).resolve().parent
TOPIC = "count_t"
QUEUES = 8
WARMUP = 1_000
SIZE = 1024
IN_FLIGHT = 64

# -- the fake cluster (process of its own: not counted) -----------------------------------


async def serve() -> None:
    """A NameServer routing ``TOPIC`` to one broker of ``QUEUES`` queues, and that broker,
    answering every send at once; prints the NameServer's address, ends with stdin."""
    from aiorocket.protocol.codes import RequestCode
    from aiorocket.protocol.command import RemotingCommand
    from aiorocket.protocol.message_codec import offset_message_id
    from aiorocket.testing.fake_remoting import FakeRemotingServer, ServerSession

    sends = (RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE)
    total_at = struct.Struct(">i")
    offsets: dict[int, int] = collections.defaultdict(int)
    broker_addr = ""

    async def on_broker(session: ServerSession, cmd: RemotingCommand) -> None:
        broker.received.clear()  # kept by the server for tests: not wanted here
        if cmd.code not in sends:
            await session.send(RemotingCommand.response_to(cmd))
            return
        count, pos, body = 0, 0, cmd.body
        if cmd.code == RequestCode.SEND_BATCH_MESSAGE:
            while pos < len(body):  # the records' TOTALSIZE fields
                pos += total_at.unpack_from(body, pos)[0]
                count += 1
        else:
            count = 1
        queue_id = int(cmd.ext_fields["e"])
        first = offsets[queue_id]
        offsets[queue_id] += count
        ids = ",".join(offset_message_id(broker_addr, 4096 * (first + i)) for i in range(count))
        ext = {
            "msgId": ids, "queueId": str(queue_id), "queueOffset": str(first),
            "MSG_REGION": "DefaultRegion", "TRACE_ON": "true",
        }  # fmt: skip
        await session.send(RemotingCommand.response_to(cmd, ext_fields=ext))

    async def on_namesrv(session: ServerSession, cmd: RemotingCommand) -> None:
        namesrv.received.clear()
        route = {
            "queueDatas": [
                {"brokerName": "broker-a", "readQueueNums": QUEUES, "writeQueueNums": QUEUES,
                 "perm": 6},
            ],
            "brokerDatas": [
                {"cluster": "c", "brokerName": "broker-a", "brokerAddrs": {"0": broker_addr}}
            ],
        }  # fmt: skip
        await session.send(RemotingCommand.response_to(cmd, body=json.dumps(route).encode()))

    broker = FakeRemotingServer(on_broker)
    namesrv = FakeRemotingServer(on_namesrv)
    async with broker, namesrv:
        broker_addr = broker.address
        print(namesrv.address, flush=True)
        await anyio.to_thread.run_sync(sys.stdin.read)  # until the parent closes it


# -- the client (what is counted) ---------------------------------------------------------


async def client(namesrv: str, count: int, profile: Any = None, plain: bool = False) -> None:
    if plain:
        await plain_client(namesrv, count, profile)
        return
    from produce import run_start_send

    from aiorocket.producer import Producer

    body = bytes(range(256)) * (SIZE // 256)
    settings: dict[str, Any] = {
        "max_in_flight": IN_FLIGHT, "auto_batch": True, "batch_in_flight": 2,
        # valgrind and the tracer run the client 50-500x slower: no send may time out,
        # and no wait for a full batch may end by the clock (10 ms pass within a batch's
        # 30 messages there, where they take ~0.5 ms): the sweeper would wake per batch
        "send_timeout": 3600.0, "batch_max_delay": 60.0,
    }  # fmt: skip
    async with Producer("count_producer", namesrv, **settings) as producer:
        await run_start_send(producer, TOPIC, body, WARMUP)
        assert producer.batcher is not None
        b0, m0 = producer.batcher.batches, producer.batcher.batched_messages
        if profile is not None:
            profile()
        _, latencies = await run_start_send(producer, TOPIC, body, count)
        if profile is not None:
            profile()
        b, m = producer.batcher.batches - b0, producer.batcher.batched_messages - m0
    if len(latencies) != count:
        raise SystemExit(f"{len(latencies)} of {count} sends answered")
    print(f"batches {b}, mean {m / max(b, 1):.2f} messages", file=sys.stderr)


async def plain_client(namesrv: str, count: int, profile: Any = None) -> None:
    """``--plain``: compare.py's ``aiorocket-plain`` produce child (``aio_children.py
    produce ... plain``: ``auto_batch`` off, ``IN_FLIGHT`` tasks each awaiting ``send`` in
    a loop, ``produce.py``'s ``run_workers``): a request, an answer and a ``SendResult``
    a message."""
    from aiorocket.message import Message
    from aiorocket.producer import Producer

    body = bytes(range(256)) * (SIZE // 256)
    settings: dict[str, Any] = {
        "max_in_flight": IN_FLIGHT, "auto_batch": False, "send_timeout": 3600.0,
    }  # fmt: skip

    async def run(producer: Producer, n: int) -> int:
        """``run_workers``'s loop, with exactly ``n`` sends (not ``n // 64 * 64``)."""
        left, answered = [n], [0]

        async def worker() -> None:
            while left[0] > 0:
                left[0] -= 1
                await producer.send(Message(TOPIC, body))
                answered[0] += 1

        async with anyio.create_task_group() as tg:
            for _ in range(IN_FLIGHT):
                tg.start_soon(worker)
        return answered[0]

    async with Producer("count_producer", namesrv, **settings) as producer:
        await run(producer, WARMUP)
        if profile is not None:
            profile()
        answered = await run(producer, count)
        if profile is not None:
            profile()
    if answered != count:
        raise SystemExit(f"{answered} of {count} sends answered")


def pace_the_id_clock(step_us: float) -> None:
    """The id module's clock advances ``step_us`` a reading (module docstring); the rest
    of ``time`` is the real one's."""
    if not step_us:
        return
    import aiorocket._unique_id as unique_id

    clock = types.SimpleNamespace(**{k: getattr(time, k) for k in dir(time) if k[0] != "_"})
    clock.time_ns = itertools.count(time.time_ns(), round(step_us * 1000)).__next__
    setattr(unique_id, "time", clock)  # noqa: B010 - not a name the module exports


def run_client(
    namesrv: str, count: int, profile: Any = None, id_step_us: float = 0.0,
    plain: bool = False, backend: str = "asyncio",
) -> None:  # fmt: skip
    pace_the_id_clock(id_step_us)
    anyio.run(client, namesrv, count, profile, plain, backend=backend)


# -- the counts ---------------------------------------------------------------------------


class Cluster:
    """``serve`` in a child process, for as long as the ``with``."""

    def __enter__(self) -> str:
        env = {**os.environ, "PYTHONPATH": str(HERE.parent)}
        self.proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "serve"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env,
        )  # fmt: skip
        assert self.proc.stdout is not None
        return self.proc.stdout.readline().strip()

    def __exit__(self, *exc: object) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


def client_env(tree: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": f"{tree}{os.pathsep}{HERE}"}


def client_flags(args: argparse.Namespace) -> list[str]:
    """The client's own options, for its child process."""
    flags = ["--id-step-us", str(args.id_step_us), "--backend", args.backend]
    return flags + ["--plain"] * args.plain


def cachegrind(tree: Path, namesrv: str, n: int, out_dir: str, flags: list[str]) -> int:
    out = os.path.join(out_dir, f"cg.{n}")
    subprocess.run(
        ["valgrind", "-q", "--tool=cachegrind", "--cache-sim=no", f"--cachegrind-out-file={out}",
         sys.executable, str(Path(__file__).resolve()), "run", str(n), "--namesrv", namesrv,
         *flags],
        env=client_env(tree), check=True, stdout=subprocess.DEVNULL,
    )  # fmt: skip
    match = re.search(r"^summary: (\d+)", Path(out).read_text(), re.MULTILINE)
    assert match is not None
    return int(match.group(1))


def in_child(tree: Path, mode: str, args: argparse.Namespace) -> None:
    """``mode`` (calls, ops) in a child on ``tree``'s aiorocket, against a fresh cluster."""
    with Cluster() as namesrv:
        cmd = [sys.executable, str(Path(__file__).resolve()), f"_{mode}", namesrv,
               str(args.messages), str(args.top), *client_flags(args)]  # fmt: skip
        subprocess.run(cmd, env=client_env(tree), check=True)


def count(args: argparse.Namespace) -> None:
    tree = Path(args.tree).resolve()
    clock = f"{args.id_step_us} us a reading" if args.id_step_us else "the real one"
    path = "plain (auto_batch off, 64 tasks awaiting send)" if args.plain else "auto-batched"
    print(f"client: {tree} ({_head(tree)}); {path}, {args.backend}; the ids' clock: {clock}")
    if shutil.which("valgrind") is None:
        print("no valgrind: instructions not counted")
    else:
        with tempfile.TemporaryDirectory(prefix="produce_count") as out_dir:
            counts = {}
            for n in (args.low, args.high):
                with Cluster() as namesrv:  # a fresh one: the same offsets, ids, routes
                    counts[n] = cachegrind(tree, namesrv, n, out_dir, client_flags(args))
            per = (counts[args.high] - counts[args.low]) / (args.high - args.low)
            print(f"instructions a message: {per:,.0f} "
                  f"(I({args.high:,}) {counts[args.high]:,} - I({args.low:,}) "
                  f"{counts[args.low]:,})")  # fmt: skip
    args.messages = 30_000
    in_child(tree, "calls", args)


def _head(tree: Path) -> str:
    done = subprocess.run(["git", "-C", str(tree), "rev-parse", "--short", "HEAD"],
                          capture_output=True, text=True)  # fmt: skip
    dirty = subprocess.run(["git", "-C", str(tree), "status", "--porcelain", "aiorocket"],
                           capture_output=True, text=True).stdout.strip()  # fmt: skip
    return done.stdout.strip() + (" + uncommitted" if dirty else "")


def calls_here(namesrv: str, messages: int, top: int, **client: Any) -> None:
    prof = cProfile.Profile()
    on = iter([prof.enable, prof.disable])
    run_client(namesrv, messages, lambda: next(on)(), **client)
    stats = pstats.Stats(prof)
    total = sum(cc for cc, _nc, _tt, _ct, _callers in stats.stats.values())  # type: ignore[attr-defined]
    print(f"Python calls a message: {total / messages:.2f} (cProfile, {messages:,} messages)")
    rows = sorted(stats.stats.items(), key=lambda kv: -kv[1][0])  # type: ignore[attr-defined]
    for (file, line, name), (cc, _nc, tt, _ct, _callers) in rows[:top]:
        where = f"{Path(file).name}:{line}" if line else file
        print(f"  {cc / messages:6.2f}  {tt / messages * 1e6:6.2f} us  {name} ({where})")


def ops_here(namesrv: str, messages: int, top: int, **client: Any) -> None:
    counts: collections.Counter[str] = collections.Counter()

    def tracer(frame: FrameType, event: str, arg: object) -> Any:
        frame.f_trace_opcodes = True
        frame.f_trace_lines = False
        if event == "opcode":
            code = frame.f_code
            counts[f"{code.co_name} ({Path(code.co_filename).name}:{code.co_firstlineno})"] += 1
        return tracer

    tracing = iter([tracer, None])  # on for the counted run, then off

    def switch() -> None:
        sys.settrace(next(tracing))

    run_client(namesrv, messages, switch, **client)
    print(f"bytecodes a message: {sum(counts.values()) / messages:.1f} ({messages:,} messages)")
    for name, n in counts.most_common(top):
        print(f"  {n / messages:7.1f}  {name}")


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="mode", required=True)
    sub.add_parser("serve")
    id_step = {"type": float, "default": 30.0, "help": "µs the ids' clock advances a reading"}

    def client_args(s: argparse.ArgumentParser) -> None:
        s.add_argument("--id-step-us", **id_step)  # type: ignore[arg-type]
        s.add_argument(
            "--plain",
            action="store_true",
            help="the plain send path (auto_batch off, 64 tasks awaiting send)",
        )
        s.add_argument("--backend", choices=["asyncio", "trio"], default="asyncio")

    r = sub.add_parser("run")
    r.add_argument("n", type=int)
    r.add_argument("--namesrv", required=True)
    client_args(r)
    for mode, messages in (("count", 30_000), ("calls", 30_000), ("ops", 3_000)):
        s = sub.add_parser(mode)
        s.add_argument("--tree", default=str(HERE.parent), help="the checkout to count")
        s.add_argument("--messages", type=int, default=messages)
        s.add_argument("--top", type=int, default=25)
        client_args(s)
        if mode == "count":
            s.add_argument("--low", type=int, default=5_000)
            s.add_argument("--high", type=int, default=25_000)
    for mode in ("_calls", "_ops"):
        s = sub.add_parser(mode)
        s.add_argument("namesrv")
        s.add_argument("messages", type=int)
        s.add_argument("top", type=int)
        client_args(s)
    return p.parse_args(argv)


def client_options(args: argparse.Namespace) -> dict[str, Any]:
    return {"id_step_us": args.id_step_us, "plain": args.plain, "backend": args.backend}


def main() -> None:
    args = parse()
    if args.mode == "serve":
        anyio.run(serve)
    elif args.mode == "run":
        run_client(args.namesrv, args.n, **client_options(args))
    elif args.mode == "count":
        count(args)
    elif args.mode in ("calls", "ops"):
        in_child(Path(args.tree).resolve(), args.mode, args)
    elif args.mode == "_calls":
        calls_here(args.namesrv, args.messages, args.top, **client_options(args))
    else:
        ops_here(args.namesrv, args.messages, args.top, **client_options(args))


if __name__ == "__main__":
    main()
