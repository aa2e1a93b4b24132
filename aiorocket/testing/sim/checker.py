"""The contract as invariants over a run's history (``History``).

Each invariant is a function ``(history, bounds) -> list[Violation]``; the checker runs
them all on every run. They read only events, so a planted history shows that each
catches what it names (tests/unit/test_simulator.py).
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass

from aiorocket.testing.sim.checker_cancel import cancelled_txn_resolved
from aiorocket.testing.sim.checker_features import (
    not_received_while_paused,
    rate_within_limit,
    retry_after_delay,
)
from aiorocket.testing.sim.checker_more import (
    app_not_interrupted,
    duplicates_within_window,
    lite_resubscribed,
    lite_subscription_agrees,
)
from aiorocket.testing.sim.checker_net import (
    past_late_spans,
    receives_after_settings,
    reconnects_after_half_open,
)
from aiorocket.testing.sim.checker_rates import send_rate_within_limit, topic_rate_within_limit
from aiorocket.testing.sim.checker_reply import (
    no_waiter_left,
    reply_is_its_own,
    reply_not_missed,
    request_within_bound,
)
from aiorocket.testing.sim.dedup_sim import handled_once_with_dedup
from aiorocket.testing.sim.history import Event, History

__all__ = ["INVARIANTS", "Bounds", "Violation", "check"]


@dataclass(slots=True, frozen=True)
class Bounds:
    """How long the client may take for what the contract promises, in run seconds."""

    #: a message the handler finished with is acked within this
    ack: float = 3.0
    #: a received message is handed to the application (or released, dead-lettered,
    #: settled) within this
    hand_on: float = 5.0
    #: a consumer receives again within this once a restarted Proxy answers and messages
    #: wait (issue 38 item 14's aim: a second)
    resume: float = 1.0
    #: a queue handed from one member to another may be read by both this long (one
    #: rebalance): a commit newer than this does not bound duplicates yet
    handover: float = 2.0
    #: a client whose connection went silent (half-open) sends a request on a new one
    #: within this: the pull runs' heartbeat interval (5 s) + request timeout (3 s) + 2
    reconnect: float = 10.0
    #: ... when the application paused consumption in that window: no pull goes out, so
    #: after the heartbeat that timed out the next request is the next heartbeat:
    #: 2 x heartbeat interval (5 s) + request timeout (3 s) + 2
    reconnect_paused: float = 15.0
    #: a lite consumer whose subscriptions the Proxy dropped with its Telemetry stream
    #: sends them again within this of its settings on the new stream
    resubscribe: float = 2.0
    #: ... and within this of a drop the Proxy made only after those settings (it handled
    #: the old stream's end late): RESYNC_AFTER_RECONNECT's widest gap (3 s to 7 s) + 1 s
    resubscribe_late: float = 5.0


@dataclass(slots=True, frozen=True)
class Violation:
    invariant: str
    key: str
    detail: str

    def __str__(self) -> str:
        return f"{self.invariant}: {self.key} {self.detail}".rstrip()


def _by_key(history: History) -> dict[str, list[Event]]:
    out: dict[str, list[Event]] = defaultdict(list)
    for e in history.events:
        if e.key:
            out[e.key].append(e)
    for events in out.values():
        events.sort(key=lambda e: e.at)
    return out


def _end(history: History) -> float:
    ends = history.of("end")
    return ends[-1].at if ends else max((e.at for e in history.events), default=0.0)


def _closes(history: History) -> list[float]:
    return [e.at for e in history.of("close_start")]


def none_lost(history: History, bounds: Bounds) -> list[Violation]:
    """Every stored message is acked, or dead-lettered as the policy says (after the
    application had it, or as undecodable), by the end of the run."""
    handed = history.keys("handler_start")
    undecodable = {e.key for e in history.of("stored") if e.info.get("undecodable")}
    dead = history.keys("dead_lettered")
    out = [Violation("none_lost", k, "stored, never acked nor dead-lettered")
           for k in sorted(history.keys("stored") - history.keys("acked") - dead)]  # fmt: skip
    out += [Violation("none_lost", k, "dead-lettered, never handed to the application")
            for k in sorted(dead - handed - undecodable - history.keys("acked"))]  # fmt: skip
    return out


#: a refused ack this close to the close's end was its last try (``pop.acks.LAST_TRY``:
#: 1 s before the bound; the release after it) or later. Seed 7202's defect (no try in
#: the last 2.8 s of the close) stays caught.
_LAST_TRY_SLACK = 1.5


def acked_after_success(history: History, bounds: Bounds) -> list[Violation]:
    """A message whose handler returned is acked before the server gives up on that
    delivery (revives it, or the run ends), unless a close came within ``bounds.ack``.
    If its broker refused acks after the handler returned (``ack_refused``), an ack that
    lands while the next close runs is in time: the client retries a refused ack after
    a growing pause (0.1 s doubling, for issue 38 item 7), renewing the message, and the
    close sends the acks still owed (docs: the close's step 5).

    An ack sent to a paused broker (SIGSTOP: between ``broker_paused`` and
    ``broker_resumed``) lands only when it resumes, however early the client sent it:
    an ``acked`` whose request reached its broker (``sent``) while that broker was paused,
    and before the end of the first close after the handler returned, is in time
    (lite_remoting seed 20153). Any other ack still has to land by the limit above.

    Through the Proxy, the time it refused acks (``ack_refused`` ``until``) or read
    nothing from the client's connections (``half_open`` to ``reconnected``) does not
    count in the ``bounds.ack``: no ack lands then, however the client tries. After such
    a silence the client ends the Proxy's hold on what it gave it (NotifyClientTermination,
    docs/grpc.md), which "also releases what the consumer is still handling", a success
    whose ack is owed included: that message comes back, a duplicate the contract allows
    (grpc_receive seed 42000)."""
    out = []
    closes, end = _closes(history), _end(history)
    pauses = _pauses(history)
    blocked = _proxy_blocked(history)
    # a close under way when the handler returned: its ack may be cut (then released)
    spans = list(zip(closes, [e.at for e in history.of("close_end")], strict=False))
    refused: dict[object, list[float]] = defaultdict(list)
    for e in history.of("ack_refused"):
        refused[e.info.get("broker")].append(e.at)
    for key, events in _by_key(history).items():
        for ok in (e for e in events if e.kind == "handler_ok"):
            if any(start <= ok.at <= stop for start, stop in spans):
                continue
            if ok.info.get("by_offset"):
                # a pull consumer's message is settled by the group's offset, which waits
                # for every earlier message of its queue: duplicates_within_window and
                # none_lost judge those
                continue
            attempt = ok.info.get("attempt")
            later = [e for e in events if e.at >= ok.at]
            revived = [e for e in later if e.kind == "revived"
                       and e.info.get("attempt") in (None, attempt)]  # fmt: skip
            broker = next((e.info.get("broker") for e in reversed(events)
                           if e.kind == "delivered" and e.at <= ok.at), None)  # fmt: skip
            cut = [c for c in closes if c >= ok.at]
            close = next(((start, stop) for start, stop in spans if start >= ok.at), None)
            if close is not None and any(ok.at <= t <= close[0] for t in refused[broker]):
                cut = [close[1]]  # its acks were refused: the close sends those still owed
                if any(e.kind == "released" and close[0] <= e.at <= close[1] for e in later) and (
                    any(close[1] - _LAST_TRY_SLACK <= t <= close[1] for t in refused[broker])
                ):
                    # refused to the close's last try (pop.acks.LAST_TRY, 1 s before its
                    # bound), then released by it: none_lost judges it
                    continue
            limit = min([end, *(e.at for e in revived[:1]), *cut])
            if any(e.kind in ("acked", "dead_lettered") and e.at <= limit for e in later):
                continue
            if close is not None and any(_sent_while_paused(e, close[1], pauses) for e in later):
                continue
            if broker is None and limit - ok.at - _covered(blocked, ok.at, limit) <= bounds.ack:
                continue  # through the Proxy: it refused acks or was silent meanwhile
            if limit - ok.at > bounds.ack:
                what = "redelivered" if revived and revived[0].at == limit else "held"
                out.append(Violation("acked_after_success", key,
                                     f"handled OK at {ok.at:.2f} (attempt {attempt}), not "
                                     f"acked; {what} at {limit:.2f}"))  # fmt: skip
                break
    return out


def _pauses(history: History) -> dict[object, list[tuple[float, float]]]:
    """Each broker's paused spans (a pause not resumed by the run's end lasts to it)."""
    out: dict[object, list[tuple[float, float]]] = defaultdict(list)
    for e in history.events:
        if e.kind == "broker_paused":
            out[e.info.get("broker")].append((e.at, float("inf")))
        elif e.kind == "broker_resumed" and out[e.info.get("broker")]:
            start, _ = out[e.info.get("broker")][-1]
            out[e.info.get("broker")][-1] = (start, e.at)
    return out


def _proxy_blocked(history: History) -> list[tuple[float, float]]:
    """The spans in which the Proxy took no ack: refusing them, or its client's
    connections silent (half-open) until a call came on a new one."""
    out = [(e.at, float(e.info["until"])) for e in history.of("ack_refused")
           if e.info.get("broker") == "proxy" and "until" in e.info]  # fmt: skip
    back = [e.at for e in history.of("reconnected") if e.info.get("broker") == "proxy"]
    for e in history.of("half_open"):
        if e.info.get("broker") == "proxy":
            out.append((e.at, min([t for t in back if t >= e.at], default=_end(history))))
    return out


def _covered(spans: list[tuple[float, float]], start: float, stop: float) -> float:
    """How much of ``start``..``stop`` the ``spans`` cover (overlaps counted once)."""
    total, reach = 0.0, start
    for a, b in sorted((max(a, start), min(b, stop)) for a, b in spans):
        if b > max(a, reach):
            total += b - max(a, reach)
            reach = b
    return total


def _sent_while_paused(e: Event, by: float,
                       pauses: dict[object, list[tuple[float, float]]]) -> bool:  # fmt: skip
    """Whether ``e`` is an ack that reached its broker by ``by`` while it was paused."""
    sent = e.info.get("sent")
    if e.kind != "acked" or sent is None or sent > by:
        return False
    return any(start <= sent < stop for start, stop in pauses.get(e.info.get("broker"), ()))


def received_handed_on(history: History, bounds: Bounds) -> list[Violation]:
    """Every delivery the client received is handed to the application, released,
    dead-lettered or settled within ``bounds.hand_on`` (or by a close), or kept
    invisible by the client's own renewals, or joins a call of it already running. A
    release the server refused (``release_refused``) counts as released: the contract
    (docs/consumer.md, "Pause and resume") is that "one whose release fails comes back
    after its invisible time", which ``none_lost`` judges (pop_remoting 32153). One
    of a FIFO lane (a lite topic: the ``lane`` its handler calls name) waits
    behind the lane's running handler: its bound counts from that call's end. A copy of
    a message handled whose ack is still owed (refused so far) is acked by the client,
    not handled again (``aiorocket.consumer.pop.in_hand``): its ack goes with the owed
    one's retries, past this bound when the server refuses them (grpc_restart 82012,
    82017); ``none_lost`` judges it. (Not
    judged: a delivery whose connection closed under its receive, ``lost_on_wire``
    after it; nor one whose broker went silent, half-open, before it was handed on or
    came back: a renewal on the silent connection costs a request timeout, which with
    refused renewals can outlast the renewal margin; ``none_lost`` still judges it.)"""
    out = []
    closes, end = _closes(history), _end(history)
    silenced: dict[object, list[float]] = defaultdict(list)
    for e in history.of("half_open"):
        silenced[e.info["broker"]].append(e.at)
    lanes, calls = _lane_calls(history, end)
    for key, events in _by_key(history).items():
        for d in (e for e in events if e.kind == "delivered"):
            limit = min([end, *(c for c in closes if c >= d.at)])
            # a message of a FIFO lane (a lite topic) waits behind the lane's running
            # handler: its hand-on is due once that call (and those it waits on) ended
            due = _lane_free(calls.get(lanes.get(key)), key, d.at, bounds.hand_on)
            if limit - due <= bounds.hand_on:
                continue
            after = [e for e in events if e.at >= d.at and e is not d]
            if next((e.kind for e in after if e.kind in ("delivered", "lost_on_wire")),
                    None) == "lost_on_wire":  # fmt: skip
                continue  # its connection closed before the client read it (lite_proxy)
            window = [e for e in events if d.at <= e.at <= due + bounds.hand_on
                      and e is not d]  # fmt: skip
            # a message the client renews is kept, not dropped (it waits behind an
            # earlier one of its queue, say): renewed before the server gave up on it
            revived = [e.at for e in events if e.kind == "revived" and e.at > d.at]
            until = min([limit, *revived])
            if any(d.at <= at <= until for at in silenced.get(d.info.get("broker"), [])):
                continue  # its broker went silent (half-open): its renewals may be lost
            kept = [e for e in events if e.kind == "renewed" and d.at <= e.at <= until]
            # a copy delivered while a call of the message runs joins that call (it is
            # settled by its outcome: aiorocket.consumer.pop.in_hand)
            before = events[: next(i for i, e in enumerate(events) if e is d)]
            in_call = (sum(e.kind == "handler_start" for e in before)
                       > sum(e.kind == "handler_end" for e in before))  # fmt: skip
            # a copy of a message handled and not acked yet is acked, not handled again
            # (in_hand): its ack waits behind the refused one, judged by none_lost
            if not kept and not in_call and not _ack_owed(before) and not any(
                e.kind in ("handler_start", "released", "release_refused", "dead_lettered",
                           "acked")
                for e in window
            ):
                out.append(Violation("received_handed_on", key,
                                     f"delivered at {d.at:.2f}, not handed on, released "
                                     f"nor settled within {bounds.hand_on}s"))  # fmt: skip
                break
    return out


def _ack_owed(events: list[Event]) -> bool:
    """A key's ``events`` end with a success not acked since (the client owes its ack)."""
    owed = False
    for e in events:
        if e.kind == "handler_ok":
            owed = True
        elif e.kind == "acked":
            owed = False
    return owed


Calls = dict[object, list[tuple[float, float, str]]]


def _lane_calls(history: History, end: float) -> tuple[dict[str, object], Calls]:
    """The FIFO lane each key's handler calls name (``lane``: SimHandler's ``lane_of``),
    and each lane's calls: (start, end, key); a call not ended ends with the run."""
    lanes: dict[str, object] = {}
    calls: Calls = defaultdict(list)
    running: dict[str, list[tuple[float, object]]] = defaultdict(list)
    for e in history.events:
        if e.kind == "handler_start":
            lane = e.info.get("lane")
            if lane is not None:
                lanes[e.key] = lane
            running[e.key].append((e.at, lane))
        elif e.kind == "handler_end" and running[e.key]:
            start, lane = running[e.key].pop()
            if lane is not None:
                calls[lane].append((start, e.at, e.key))
    for key, left in running.items():
        for start, lane in left:
            if lane is not None:
                calls[lane].append((start, end, key))
    return lanes, calls


def _lane_free(calls: list[tuple[float, float, str]] | None, key: str, at: float,
               slack: float) -> float:  # fmt: skip
    """When ``key``'s lane is free of other keys' handler calls, from ``at`` on: the end
    of the calls running at ``at`` or begun within ``slack`` (the hand-on bound) of
    it, and of those that ran on from them, back to back. (A call begun after the
    delivery counts: a receive's messages go on together at its stream's end, and a
    stream cut by a half-open connection ends at the client's timeout, so the lane's
    first message starts late and the rest wait behind it: grpc_lite seed 1074.)"""
    due, moved = at, True
    while moved and calls:
        moved = False
        for start, stop, other in calls:
            if other != key and start <= due + slack and due < stop:
                due, moved = stop, True
    return due


def one_handler_at_a_time(history: History, bounds: Bounds) -> list[Violation]:
    """No message is in the application's handler twice at the same time (of one member:
    a pull consumer's queue handed to another member may be consumed by both for a
    moment, docs/reliability.md's in-flight window)."""
    out = []
    for key, events in _by_key(history).items():
        running: dict[object, int] = defaultdict(int)
        for e in events:
            member = e.info.get("member")
            if e.kind == "handler_start":
                running[member] += 1
                if running[member] > 1:
                    out.append(Violation("one_handler_at_a_time", key,
                                         f"handled twice at once at {e.at:.2f}"))  # fmt: skip
                    break
            elif e.kind == "handler_end":
                running[member] -= 1
    return out


def order_per_group(history: History, bounds: Bounds) -> list[Violation]:
    """FIFO: within a message group, message n+1 is not handled (nor acked) before
    message n succeeded."""
    out = []
    done: dict[str, int] = defaultdict(lambda: -1)
    for e in history.events:
        if e.kind not in ("handler_start", "handler_ok") or "group" not in e.info:
            continue
        group, seq = e.info["group"], e.info["seq"]
        if e.kind == "handler_ok":
            done[group] = max(done[group], seq)
        elif seq > done[group] + 1:
            out.append(Violation("order_per_group", e.key,
                                 f"group {group}: #{seq} handled before #{done[group] + 1} "
                                 "succeeded"))  # fmt: skip
            break
    return out


def no_request_storm(history: History, bounds: Bounds) -> list[Violation]:
    """A server that answered 'busy' or 'nothing' at once is not asked again at once."""
    return [Violation("no_request_storm", "", f"{e.info}") for e in history.of("storm")]


def typed_errors(history: History, bounds: Bounds) -> list[Violation]:
    """Only the documented typed errors (aiorocket.errors) reach the application."""
    return [Violation("typed_errors", e.key, str(e.info.get("error")))
            for e in history.of("app_error") if not e.info.get("typed")]  # fmt: skip


def released_at_close(history: History, bounds: Bounds) -> list[Violation]:
    """After close() every received message is settled or released, no task of the
    client is left, and (pull) the member unregistered and unlocked its queues.

    A release that reached its broker while it was paused (``broker_paused`` ..
    ``broker_resumed``), during the close, counts as a release whether it found its
    check point replaced (``release_stale``) or ran and a renewal run after it hid the
    message again (``released`` with ``sent``: a lite message's changes keep its pop
    time, the last one run sets its visible time): the broker runs what it queued
    meanwhile in an order of its own when it resumes, a renewal the client sent before
    the release among them, which no client orders (lite_remoting seed 42136). The
    message comes back after that renewal's invisible time, as docs/consumer.md says
    of a release that fails; ``none_lost`` judges it."""
    pauses = _pauses(history)
    out = [Violation("released_at_close", k, "still invisible to the group after close")
           for e in history.of("held_after_close") for k in e.info["keys"]
           if not _released_while_paused(history, k, e, pauses)]  # fmt: skip
    out += [Violation("released_at_close", "", f"{e.info['broker']} still keeps "
                      f"{e.info['consumer']} after its close: {'; '.join(e.info['kept'])}")
            for e in history.of("left_behind")]  # fmt: skip
    out += [Violation("released_at_close", "", f"{e.info['count']} tasks left: "
                      f"{e.info.get('names')}") for e in history.of("tasks_left")]  # fmt: skip
    return out


def _released_while_paused(history: History, key: str, held: Event,
                           pauses: dict[object, list[tuple[float, float]]]) -> bool:  # fmt: skip
    """Whether the close that ended at ``held`` sent a release of ``key`` that reached
    its paused broker (and was undone there: a replaced check point, a later renewal)."""
    start = max((e.at for e in history.of("close_start")
                 if e.info.get("consumer") == held.info.get("consumer") and e.at <= held.at),
                default=None)  # fmt: skip
    if start is None:
        return False
    return any(start <= e.info["sent"] <= held.at and
               any(a <= e.info["sent"] < b for a, b in pauses.get(e.info.get("broker"), ()))
               for e in history.events if e.key == key and "sent" in e.info
               and e.kind in ("release_stale", "released"))  # fmt: skip


def memory_within_cache(history: History, bounds: Bounds) -> list[Violation]:
    """The renewer holds what the cache counts (unsettled messages, nacks owed) and the
    messages whose ack is still owed to the server, nothing more: a settled message
    whose ack is done with leaves it at once, and an owed ack is queued, waiting for
    its retry or in a request (``_client.held_by_renewer``)."""
    out = []
    for e in history.of("held"):
        where = e.info.get("where")
        if e.info["count"]:
            out.append(Violation("memory_within_cache", "", f"{e.info['count']} settled "
                                 f"messages whose ack is done with still held ({where})"))
        if e.info.get("stranded"):
            out.append(Violation("memory_within_cache", "", f"{e.info['stranded']} messages "
                                 f"held for an ack nobody sends ({where})"))
    return out


def send_reported_truly(history: History, bounds: Bounds) -> list[Violation]:
    """A send reported failed before its deadline is not stored (a timeout may have
    stored it: the docs say so); a half message is stored once."""
    stored: dict[str, list[Event]] = {}
    for e in history.of("send_stored"):
        stored.setdefault(e.key, []).append(e)
    out = []
    for e in history.of("send_failed"):
        early = e.info["elapsed"] < 0.9 * e.info["timeout"]
        # a connection closed under the request: the broker may have stored it
        if e.key in stored and early and not e.info.get("uncertain"):
            out.append(Violation("send_reported_truly", e.key,
                                 f"reported failed after {e.info['elapsed']:.2f}s "
                                 f"({e.info['error']}) but stored"))  # fmt: skip
    for key, events in stored.items():
        halves = [e for e in events if e.info.get("half")]
        if len(halves) > 1:
            out.append(Violation("send_reported_truly", key,
                                 f"half message stored {len(halves)} times "
                                 f"({', '.join(e.info['broker'] for e in halves)})"))  # fmt: skip
    return out


def stored_as_sent(history: History, bounds: Bounds) -> list[Violation]:
    """A send reported OK is stored where its result says (broker, queue, offset), with
    its message id and its body, as sent."""
    stored = {(e.info["broker"], e.info["queue"], e.info["offset"]): e
              for e in history.of("send_stored") if "offset" in e.info
              and not e.info.get("half")}  # fmt: skip
    out = []
    for e in history.of("send_ok"):
        if "offset" not in e.info:
            continue
        at = (e.info["broker"], e.info["queue"], e.info["offset"])
        s = stored.get(at)
        if s is None or s.key != e.key or s.info["msg_id"] != e.info["msg_id"] or \
                s.info["crc"] != e.info["crc"]:  # fmt: skip
            what = "nothing" if s is None else f"{s.key} ({s.info['msg_id']})"
            out.append(Violation("stored_as_sent", e.key,
                                 f"reported stored at {at} as {e.info['msg_id']}; "
                                 f"the broker holds {what} there"))  # fmt: skip
    return out


def order_per_key(history: History, bounds: Bounds) -> list[Violation]:
    """Ordered sends (one sharding key, sent one after another) reported OK are stored
    in one queue, in the order they were sent."""
    out = []
    by_key: dict[object, list[Event]] = defaultdict(list)
    for e in history.of("send_ok"):
        if "okey" in e.info:
            by_key[e.info["okey"]].append(e)
    for okey, events in by_key.items():
        events.sort(key=lambda e: e.info["seq"])
        for a, b in itertools.pairwise(events):
            qa, qb = (a.info["broker"], a.info["queue"]), (b.info["broker"], b.info["queue"])
            if qa != qb or b.info["offset"] <= a.info["offset"]:
                out.append(Violation("order_per_key", b.key,
                                     f"key {okey}: #{b.info['seq']} at {qb}:{b.info['offset']}"
                                     f" after #{a.info['seq']} at {qa}:{a.info['offset']}"))
                break
    return out


def deadline_kept(history: History, bounds: Bounds) -> list[Violation]:
    """A send keeps its own timeout: it does not time out before it (whoever it shared
    a request with), and its answer does not come long after it."""
    out = []
    for e in history.of("send_failed") + history.of("send_ok"):
        timeout, elapsed = e.info.get("timeout"), e.info.get("elapsed")
        if timeout is None or elapsed is None:
            continue
        if e.info.get("timed_out") and elapsed < 0.9 * timeout:
            out.append(Violation("deadline_kept", e.key,
                                 f"timed out after {elapsed:.2f}s of its own {timeout}s"))
        elif elapsed > timeout + 1.0:
            out.append(Violation("deadline_kept", e.key,
                                 f"answered after {elapsed:.2f}s, past its {timeout}s"))
    return out


def txn_outcome(history: History, bounds: Bounds) -> list[Violation]:
    """A transaction the application committed becomes visible once; one it rolled back
    (or never ran) never does; by the end no half message is left unresolved."""
    truth = {e.key: e.info["state"] for e in history.of("app_txn")}
    visible: dict[str, int] = defaultdict(int)
    for e in history.of("txn_visible"):
        visible[e.key] += 1
    out = []
    for key in sorted(set(truth) | set(visible)):
        want = 1 if truth.get(key) == "commit" else 0
        if visible[key] != want:
            out.append(Violation("txn_outcome", key, f"the application's transaction: "
                                 f"{truth.get(key, 'none')}; visible {visible[key]} times"))
    out += [Violation("txn_outcome", e.key, "half message never resolved")
            for e in history.of("txn_unresolved")]  # fmt: skip
    return out


def checks_answered_truly(history: History, bounds: Bounds) -> list[Violation]:
    """The broker is told what the application said: a check-back's end carries an
    answer the application's checker gave for that message, the producer's own end the
    local transaction's outcome."""
    answers: dict[str, set[str]] = defaultdict(set)
    local: dict[str, set[str]] = defaultdict(set)
    for e in history.of("check_answer"):
        answers[e.key].add(e.info["state"])
    for e in history.of("local_done"):
        local[e.key].add(e.info["state"])
    out = []
    for e in history.of("txn_end"):
        said = answers[e.key] if e.info["from_check"] else local[e.key]
        # UNKNOWN tells the broker nothing (it asks again): never untrue
        if e.info["outcome"] not in said | {"unknown"}:
            who = "checker" if e.info["from_check"] else "local transaction"
            out.append(Violation("checks_answered_truly", e.key,
                                 f"ended {e.info['outcome']}; the {who} said "
                                 f"{sorted(said) or 'nothing'}"))  # fmt: skip
    return out


def resumes_after_restart(history: History, bounds: Bounds) -> list[Violation]:
    """Once a restarted Proxy answers again, a running consumer receives again within
    ``bounds.resume`` when messages wait for it."""
    out = []
    ends = [e.at for e in history.of("close_end")]
    spans = list(itertools.zip_longest(_closes(history), ends, fillvalue=_end(history)))
    delivered = [e.at for e in history.of("delivered")]
    for back in history.of("proxy_back"):
        due = past_late_spans(history, back.at, back.at + bounds.resume)
        # no consumer running (closing, or ended) at some point of the window: not judged
        if not back.info["waiting"] or due > _end(history) or \
                any(start <= due and stop >= back.at for start, stop in spans):  # fmt: skip
            continue
        if not any(back.at <= at <= due for at in delivered):
            out.append(Violation("resumes_after_restart", "",
                                 f"the Proxy answered again at {back.at:.2f} with "
                                 f"{back.info['waiting']} messages waiting; none received "
                                 f"within {bounds.resume}s"))  # fmt: skip
    return out


INVARIANTS: dict[str, Callable[[History, Bounds], list[Violation]]] = {
    f.__name__: f
    for f in (none_lost, acked_after_success, received_handed_on, one_handler_at_a_time,
              order_per_group, no_request_storm, typed_errors, released_at_close,
              memory_within_cache, send_reported_truly, lite_subscription_agrees,
              app_not_interrupted, duplicates_within_window, stored_as_sent, order_per_key,
              deadline_kept, txn_outcome, checks_answered_truly, resumes_after_restart,
              retry_after_delay, not_received_while_paused, rate_within_limit,
              reconnects_after_half_open, cancelled_txn_resolved, handled_once_with_dedup,
              reply_is_its_own, request_within_bound, reply_not_missed, no_waiter_left,
              topic_rate_within_limit, send_rate_within_limit, lite_resubscribed,
              receives_after_settings)
}  # fmt: skip


def check(history: History, bounds: Bounds | None = None) -> list[Violation]:
    """Every invariant's violations."""
    bounds = bounds or Bounds()
    return [v for invariant in INVARIANTS.values() for v in invariant(history, bounds)]
