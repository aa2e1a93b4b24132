"""Invariants of the lite and pull consumer workloads (``checker.INVARIANTS`` holds
them with the others): the subscriptions a lite consumer keeps, the application left
running, and duplicates only from the in-flight window."""

from __future__ import annotations

import math
from collections import defaultdict
from typing import TYPE_CHECKING

from aiorocket.testing.sim.history import Event, History

if TYPE_CHECKING:
    from aiorocket.testing.sim.checker import Bounds, Violation

__all__ = ["app_not_interrupted", "duplicates_within_window", "lite_resubscribed",
           "lite_subscription_agrees"]


def _violation(invariant: str, key: str, detail: str) -> Violation:
    from aiorocket.testing.sim.checker import Violation

    return Violation(invariant, key, detail)


#: seconds a lite client has, once on a new connection to a broker whose notice it
#: lost, to learn what that broker dropped (one request to each broker)
LITE_LEARN = 5.0


def lite_subscription_agrees(history: History, bounds: Bounds) -> list[Violation]:
    """A lite topic the broker dropped for this client (its notice: another member of
    an exclusive group took it) is not kept by the client, nor taken back by its resync
    (only a new ``subscribe_lite`` asks for it again). A notice that never reached the
    client (``lite_notice_lost``: written into a silenced connection) cannot be obeyed
    until the client is on a new connection to that broker: kept until then, and for
    ``LITE_LEARN`` after, is not judged; taken back, it is (the client asks what the
    brokers hold before it resyncs: ``aiorocket.consumer.pop.remoting_lite``)."""
    out = []
    # (client, lite topic) -> when and where its last eviction's notice was lost (None:
    # the notice went out)
    lost: dict[tuple[str, str], tuple[float, str] | None] = {}
    for e in history.events:
        if e.kind in ("lite_evicted", "lite_notice_lost"):
            where = (e.at, e.info["broker"]) if e.kind == "lite_notice_lost" else None
            lost[(e.info["client"], e.info["lite_topic"])] = where
        elif e.kind == "lite_taken_back":
            out.append(_violation("lite_subscription_agrees", e.info["lite_topic"],
                                  f"taken back from the other member by {e.info['client']}'s "
                                  f"resync at {e.at:.2f} ({e.info['broker']})"))  # fmt: skip
        elif e.kind == "lite_view":
            for t in e.info["kept"]:
                where = lost.get((e.info.get("client", ""), t))
                if where is not None and not _reconnected(history, *where, e.at - LITE_LEARN):
                    continue
                out.append(_violation("lite_subscription_agrees", t, f"still in "
                                      f"{e.info['consumer']}'s lite_topics after the broker "
                                      "dropped it"))  # fmt: skip
    return out


def _reconnected(history: History, since: float, broker: str, before: float) -> bool:
    """A request came on a new connection to ``broker`` between ``since`` and ``before``."""
    return any(since <= e.at <= before and e.info.get("broker") == broker
               for e in history.of("reconnected"))  # fmt: skip


def lite_resubscribed(history: History, bounds: Bounds) -> list[Violation]:
    """The Proxy dropped a lite consumer's lite subscriptions with its Telemetry stream
    (5.5.0: a connection dropped, a Proxy restart): the client sends its whole set again
    (a COMPLETE_ADD, taken or refused) within ``bounds.resubscribe`` of its settings on a
    new stream, or, when the Proxy dropped them only after that (``live``: it handled
    the old stream's end late), within ``bounds.resubscribe_late`` of the drop (else it
    is served nothing until its next periodic resync, 30 s); unless its close started
    by then, before the drop or after it (seed 301: a close waiting for a hung handler
    when the connections dropped: the client resyncs while it closes, but a closing
    consumer receives nothing, and its close ended it before the next resync was due)."""
    out = []
    events = history.events
    ends = [e.at for e in history.of("end")]
    # client id -> when its close started (or, interrupted, ended): the workloads that
    # drop lite subscriptions name the client in these events
    closed: dict[str, float] = {}
    for e in events:
        if e.kind in ("close_start", "close_end") and "client" in e.info:
            closed.setdefault(e.info["client"], e.at)
    for i, drop in enumerate(events):
        if drop.kind != "lite_dropped":
            continue
        client = drop.info["client"]
        later = events[i + 1:]
        if drop.info.get("live"):
            since, bound, what = drop.at, bounds.resubscribe_late, "while it was connected"
        else:
            back = next((e for e in later if e.kind == "client_settings"
                         and e.info["client"] == client), None)  # fmt: skip
            if back is None:
                continue  # it did not come back (closed)
            since, bound = back.at, bounds.resubscribe
            what = f"its settings back at {back.at:.2f}"
        due = since + bound
        if closed.get(client, math.inf) <= due or (ends and ends[-1] <= due):
            continue
        if not any(e.kind == "lite_ctl" and e.info["client"] == client and
                   e.info["action"] == "COMPLETE_ADD" and e.at <= due for e in later):  # fmt: skip
            out.append(_violation("lite_resubscribed", "", f"{client}'s lite subscriptions "
                                  f"dropped at {drop.at:.2f}, {what}, not sent again "
                                  f"within {bound}s"))  # fmt: skip
    return out


def app_not_interrupted(history: History, bounds: Bounds) -> list[Violation]:
    """The application's code inside ``async with consumer`` runs until it leaves: no
    failure in the consumer's background work (a resync, a heartbeat) cancels it."""
    return [_violation("app_not_interrupted", "", f"{e.info['consumer']}: the application's "
                       f"code was cancelled by the consumer at {e.at:.2f}")
            for e in history.of("app_interrupted")]  # fmt: skip


def duplicates_within_window(history: History, bounds: Bounds) -> list[Violation]:
    """docs/reliability.md: duplicates come only from the in-flight window. A message
    handled successfully is delivered again only if, when it was delivered again, no
    commit covering its offset had reached the broker more than ``bounds.handover``
    seconds before (what a member owning the queue committed, the broker crash that lost
    it notwithstanding: the client knows its own commits).

    A commit the broker refused or never stored (``commit_failed``: an error answer, a
    timeout) is no ``committed`` and bounds nothing: at-least-once lets every message it
    covered come again, and an orderly revoke's "the next owner starts after the last
    message handled here" (docs/consumer.md) holds only once a commit was stored (its
    retries given up: ``orderly_handover_uncommitted``). One stored whose answer was lost
    (``lost_answer``) is ``committed`` and bounds like any other."""
    commits: dict[tuple[str, str], list[Event]] = defaultdict(list)
    for e in history.of("committed"):
        commits[(e.info["broker"], e.info["queue"])].append(e)
    ok: set[str] = set()
    out = []
    for e in history.events:
        if e.kind == "handler_ok":
            ok.add(e.key)
        elif e.kind == "pulled" and e.key in ok:
            queue = (e.info["broker"], e.info["queue"])
            covered = [c for c in commits[queue] if c.info["offset"] > e.info["offset"]
                       and c.at < e.at - bounds.handover]  # fmt: skip
            if covered:
                out.append(_violation(
                    "duplicates_within_window", e.key,
                    f"pulled again at {e.at:.2f} (offset {e.info['offset']} of {queue}), "
                    f"after the group committed {covered[0].info['offset']} at "
                    f"{covered[0].at:.2f}"))  # fmt: skip
                ok.discard(e.key)  # one violation per message
    return out
