"""The request-reply invariants (issue 44; workload ``reply_workload``): a request
returns its own reply or raises a typed error within its timeout, never another
request's reply; a reply pushed in time is not missed; no waiter is left behind once
the requests returned (or were cancelled) and after close."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from aiorocket.testing.sim.checker import Bounds, Violation
    from aiorocket.testing.sim.history import History

__all__ = ["no_waiter_left", "reply_is_its_own", "reply_not_missed", "request_within_bound"]

#: virtual seconds a request may take past its timeout (none: the clock is virtual)
SLACK = 0.05


def reply_is_its_own(history: History, bounds: Bounds) -> list[Violation]:
    """A request's reply is the one to it: its body names the request, its correlation
    id is the one the broker stored the request with."""
    from aiorocket.testing.sim.checker import Violation

    stored: dict[str, set[str]] = {}
    for e in history.of("request_stored"):
        stored.setdefault(e.key, set()).add(e.info["correlation"])
    out = []
    for e in history.of("request_ok"):
        body, correlation = e.info["body"], e.info["correlation"]
        if body != f"reply:{e.key}" or correlation not in stored.get(e.key, ()):
            out.append(Violation("reply_is_its_own", e.key, f"returned {body!r} "
                                 f"(correlation {correlation}), another's reply"))  # fmt: skip
    return out


def request_within_bound(history: History, bounds: Bounds) -> list[Violation]:
    """Every request returned, raised a typed error, or was cancelled, within its own
    timeout."""
    from aiorocket.testing.sim.checker import Violation

    kinds = ("request_ok", "request_failed", "request_cancelled", "request_hung")
    ends = {e.key: e for e in history.events if e.kind in kinds}
    out = []
    for start in history.of("request_start"):
        end, timeout = ends.get(start.key), start.info["timeout"]
        if end is None or end.kind == "request_hung":
            out.append(Violation("request_within_bound", start.key,
                                 f"no outcome {timeout}s + {SLACK}s after it began"))  # fmt: skip
        elif end.kind == "request_failed" and not end.info["typed"]:
            out.append(Violation("request_within_bound", start.key,
                                 f"untyped error {end.info['error']}"))  # fmt: skip
        elif end.at - start.at > timeout + SLACK:
            took = end.at - start.at
            out.append(Violation("request_within_bound", start.key, f"{end.kind} after "
                                 f"{took:.2f}s, past its timeout {timeout}s"))  # fmt: skip
    return out


def reply_not_missed(history: History, bounds: Bounds) -> list[Violation]:
    """A reply the broker pushed well within its request's timeout (and before any
    cancellation) is returned, not a timeout."""
    from aiorocket.testing.sim.checker import Violation

    starts = {e.key: e for e in history.of("request_start")}
    pushed: dict[str, float] = {}
    for e in history.of("reply_pushed"):
        pushed.setdefault(e.key, e.at)
    out = []
    for e in history.of("request_failed"):
        start, at = starts.get(e.key), pushed.get(e.key)
        if start is None or at is None or not e.info.get("timed_out"):
            continue
        if at + SLACK < start.at + start.info["timeout"]:
            out.append(Violation("reply_not_missed", e.key, f"its reply was pushed at "
                                 f"{at - start.at:.2f}s of {start.info['timeout']}s; "
                                 f"it raised {e.info['error']}"))  # fmt: skip
    return out


def no_waiter_left(history: History, bounds: Bounds) -> list[Violation]:
    """Once every request returned or was cancelled, and after close, the producer
    waits for no reply."""
    from aiorocket.testing.sim.checker import Violation

    return [Violation("no_waiter_left", "", f"{e.info['count']} requests still wait for "
                      f"a reply ({e.info['where']})")
            for e in history.of("waiters_left") if e.info["count"]]  # fmt: skip
