"""Invariants of issue 44's consumer features (``checker.INVARIANTS`` holds them with
the others): retry delays, pause / resume, the consume rate limit."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiorocket.testing.sim.checker_rates import over_limit

if TYPE_CHECKING:
    from aiorocket.testing.sim.checker import Bounds, Violation
    from aiorocket.testing.sim.history import Event, History

__all__ = ["not_received_while_paused", "rate_within_limit", "retry_after_delay"]

#: what a server's handing a message to the client is called in each workload
_DELIVERIES = ("delivered", "pulled")


def _violation(invariant: str, key: str, detail: str) -> Violation:
    from aiorocket.testing.sim.checker import Violation

    return Violation(invariant, key, detail)


def retry_after_delay(history: History, bounds: Bounds) -> list[Violation]:
    """A message whose handler asked for it back after a delay (``Reconsume(delay=)``,
    ``nack(delay=)``) is not handed to the application again before that delay (rounded
    up to a delay level on remoting pull: the ``due`` the workload recorded), and does
    come back (or is dead-lettered at its last attempt) unless a close came first. Not
    judged: a close, a broker crash or another member in between (the queue's offset
    may not have moved yet: docs/reliability.md's in-flight window). A copy of the
    message delivered before the ask (such a window's duplicate) is not its retry, nor
    is that copy pulled again from an offset no commit had passed."""
    out = []
    events = history.events
    for i, ask in enumerate(events):
        if ask.kind != "handler_failed" or "due" not in ask.info:
            continue
        later = events[i + 1:]
        starts = [n for n, e in enumerate(later) if e.kind == "handler_start" and e.key == ask.key]
        starts = starts[_in_hand(events[:i], ask.key):]
        starts = starts[_pulled_again(events[:i], later, ask.key, starts):]
        between = later[: starts[0] if starts else len(later)]
        if any(e.kind in ("close_start", "broker_crashed") for e in between):
            continue
        nxt = later[starts[0]] if starts else None
        if nxt is None:
            closed = any(e.kind == "close_start" for e in later)
            dead = any(e.kind == "dead_lettered" and e.key == ask.key for e in later)
            if not closed and not dead:
                out.append(_violation("retry_after_delay", ask.key,
                                      f"asked back after {ask.info['retry']}s at {ask.at:.2f}: "
                                      "never came back"))  # fmt: skip
            continue
        if nxt.info.get("member") != ask.info.get("member"):
            continue
        if nxt.at < _first_due(events, i, i + 1 + starts[0]) - 0.001:
            out.append(_violation("retry_after_delay", ask.key,
                                  f"asked back after {ask.info['retry']}s (due "
                                  f"{ask.info['due']}s) at {ask.at:.2f}, handled again at "
                                  f"{nxt.at:.2f}"))  # fmt: skip
    return out


def _first_due(events: list[Event], i: int, j: int) -> float:
    """When the message asked back at ``events[i]`` may be handled again at the earliest
    (by the start at ``events[j]``): at that ask's due time, or sooner where a copy sent
    back before that start (``sent_back``, each due its ask's ``due`` after it was sent)
    was not yet delivered when the message was asked back: the broker keeps every copy
    sent back, through a close or a crash of its own (the model's crash loses offsets
    and locks), and hands them over earliest due first. A copy delivered before the ask
    (at a place, broker / queue / offset, where no copy of the message had been) came
    already, the earliest due of that broker first; one delivered after it may be the
    start's. Copies are told apart by where they were delivered, not by their attempt:
    the model labels a copy with the highest reconsume count of any copy plus one
    (docs/simulator.md). pull_remoting 173081: p-2's retry copy asked back 7 s at 26.65
    and sent back, handled again at 30.01 (the in-flight window) and asked back again;
    the 26.65 copy came at 37.00. 180103: p-10 asked back 31 s (60 s) at 18.63 and sent
    back; broker-a crashed and its queue was pulled again from its stored offset at
    41.91, p-10 asked back again (sent back, "attempt 3"); the 18.63 copy came at 78.91
    and, asked back, the 41.91 one at 101.91. A history that locates no delivery of the
    message (a hand-written one) counts a start of an attempt higher than any before as
    a new copy's delivery."""
    ask = events[i]
    key = ask.key
    mine = [(n, e) for n, e in enumerate(events[:j]) if e.key == key]
    located = any(e.kind in _DELIVERIES and _copy(e) is not None for _, e in mine)
    pending: list[tuple[float, str]] = []  # the copies sent back not yet delivered: due, broker
    seen: set[tuple[str, str, int]] = set()
    last: Event | None = None  # the failure a send-back is of
    top = 0  # the highest attempt started (a history locating no delivery)
    for n, e in mine:
        if e.kind == "handler_failed":
            last = e if "due" in e.info else None
        elif e.kind == "sent_back":
            if last is not None:
                pending.append((e.at + float(last.info["due"]), str(e.info.get("broker", ""))))
            last = None
        elif n > i:
            continue
        elif located and e.kind in _DELIVERIES:
            copy = _copy(e)
            if copy is not None and copy not in seen:
                seen.add(copy)
                _take(pending, copy[0])
        elif not located and e.kind == "handler_start":
            attempt = int(e.info.get("attempt") or 0)
            if attempt > top:
                _take(pending, None)
            top = max(top, attempt)
    return min([ask.at + float(ask.info["due"]), *(due for due, _ in pending)])


def _take(pending: list[tuple[float, str]], broker: str | None) -> None:
    """A new copy delivered (from ``broker``): the earliest due of the copies that broker
    was sent, or of any where it was sent none (a broker the history does not name)."""
    theirs = [c for c in pending if c[1] == broker] or pending
    if theirs:
        pending.remove(min(theirs))


def _in_hand(earlier: list[Event], key: str) -> int:
    """How many copies of ``key`` were delivered with (or after) the one whose attempt
    asked it back and were not started by the ask: a duplicate (another member's
    send-back of it, the original again after a commit that failed: at-least-once) whose
    starts come next and are no retry of the ask (pull_remoting seed 43185: two copies
    pulled in one batch at 76.80, the first asked back, the second handled at once).
    Counted from the delivery of the ask's own attempt on, so a copy a member dropped
    unhandled long before (a close, a revoke) is not. An orderly retry in place is
    started with no new delivery: none."""
    own = next((n for n in range(len(earlier) - 1, -1, -1)
                if earlier[n].kind == "handler_start" and earlier[n].key == key), None)  # fmt: skip
    if own is None:
        return 0
    since = next((earlier[n].at for n in range(own - 1, -1, -1)
                  if earlier[n].kind in _DELIVERIES and earlier[n].key == key), None)  # fmt: skip
    if since is None:
        return 0
    span = [e for e in earlier if e.at >= since and e.key == key]
    delivered = sum(e.kind in _DELIVERIES for e in span)
    return max(0, delivered - sum(e.kind == "handler_start" for e in span))


def _pulled_again(earlier: list[Event], later: list[Event], key: str, starts: list[int]) -> int:
    """How many of the next ``starts`` (in ``later``) handle only a copy of ``key``
    delivered by the ask's time and pulled again from its offset before any commit had
    passed it: the in-flight window's duplicate (docs/reliability.md), not the copy the
    ask sent back. pull_remoting seed 60398: joiner-0's commits timed out, the broker
    dropped it as a member, it gave its queues up and took them back from the stored
    offsets, pulling p-10's retry copy (retry-topic offset 2) again 3 s after asking it
    back; 53038 (orderly): revokes and re-assigns of a queue waiting out p-0's in-place
    31 s retry pulled its offset 0 again. A start after a new copy, or after none (an
    orderly retry in place), is judged."""
    held = {_copy(e) for e in earlier if e.kind == "pulled" and e.key == key} - {None}
    passed: dict[tuple[str, str], int] = {}  # stored commits of each queue, the highest
    for e in earlier:
        if e.kind == "committed":
            queue = (e.info["broker"], e.info["queue"])
            passed[queue] = max(passed.get(queue, 0), e.info["offset"])
    skipped, n = 0, 0
    for s in starts:
        again = False
        for e in later[n:s]:
            if e.kind == "committed":
                queue = (e.info["broker"], e.info["queue"])
                passed[queue] = max(passed.get(queue, 0), e.info["offset"])
            elif e.kind in _DELIVERIES and e.key == key:
                copy = _copy(e)
                if copy is None or copy not in held or passed.get(copy[:2], 0) > copy[2]:
                    return skipped  # a new copy (or one a commit had passed): judged
                again = True
        if not again:
            return skipped
        skipped, n = skipped + 1, s + 1
    return skipped


def _copy(e: Event) -> tuple[str, str, int] | None:
    """Where a pulled copy was: broker, queue, offset (a POP delivery names none)."""
    offset = e.info.get("offset")
    return None if offset is None else (e.info.get("broker", ""), e.info.get("queue", ""), offset)


def not_received_while_paused(history: History, bounds: Bounds) -> list[Violation]:
    """Between ``pause()`` returning and ``resume()``, no message the server handed to
    the client after the pause is handed to the paused consumer's handler (one received
    before it may be: docs/consumer.md, the cache is still handled). A topic's pause
    leaves the group's retry queue running (remoting pull)."""
    out = []
    events = history.events
    latest: dict[str, tuple[int, Event]] = {}
    span: tuple[int, Event] | None = None
    closing: set[object] = set()  # consumers whose close started
    for i, e in enumerate(events):
        if e.kind in _DELIVERIES:
            latest[e.key] = (i, e)
        elif e.kind == "paused":
            # A pause that reached a consumer already closing (the app cancelled at the
            # pause's instant: grpc_receive 7107) pauses nothing that receives: the next
            # consumer, which handles what comes after, was never paused.
            if e.info["consumer"] not in closing:
                span = (i, e)
        elif e.kind in ("resumed", "close_start") and span is not None and \
                e.info.get("consumer") == span[1].info["consumer"]:  # fmt: skip
            span = None
        if e.kind == "close_start":
            closing.add(e.info.get("consumer"))
        elif e.kind == "handler_start" and span is not None:
            start, pause = span
            if e.info.get("member", pause.info["consumer"]) != pause.info["consumer"]:
                continue
            got = latest.get(e.key)
            if got is None or got[0] < start:
                continue
            queue = str(got[1].info.get("queue", ""))
            if pause.info["what"] == "topic" and queue.startswith("%RETRY%"):
                continue
            out.append(_violation("not_received_while_paused", e.key,
                                  f"received at {got[1].at:.2f} and handled at {e.at:.2f} "
                                  f"while paused ({pause.info['what']}) since "
                                  f"{pause.at:.2f}"))  # fmt: skip
    return out


def rate_within_limit(history: History, bounds: Bounds) -> list[Violation]:
    """With ``max_rate``, the messages a consumer receives over any window of ``w``
    seconds are at most ``rate * w + burst`` (docs/consumer.md: a second's worth at once,
    plus a batch per receive loop)."""
    out: list[Violation] = []
    # a consumer's receives: from its rate_limit event to its close_end, by position
    # (the next consumer may start at the same instant)
    events = history.events
    for n, limit in enumerate(events):
        if limit.kind != "rate_limit":
            continue
        rate, burst = limit.info["rate"], limit.info["burst"]
        stop = next((m for m in range(n + 1, len(events)) if events[m].kind == "close_end"
                     and events[m].info.get("consumer") == limit.info["consumer"]),
                    len(events))  # fmt: skip
        times = [e.at for e in events[n:stop] if e.kind in _DELIVERIES]
        over = over_limit(times, rate, burst)
        if over is not None:
            out.append(_violation("rate_within_limit", "",
                                  f"{limit.info['consumer']}: {over} received, over "
                                  f"max_rate={rate} (burst {burst})"))  # fmt: skip
            return out
    return out
