"""Both sides of an evaluation ranked at once, one thread each, sharing their walks.

A two-sided full ranking on the CPU spends a few milliseconds per side on serial work (query
grouping, known answers, pass-1 true scores, the rank table) during which only one core works.
At 10^4 entities (dim 64, 5,000 test triples, 2 cores) that was ~7 ms of a ~78 ms evaluation whose
products take ~60 ms. Ranked at once, each side on its own thread with half the cores' walkers
(:func:`.full._walkers`), one side's serial work runs while the other's walker computes: 78.3 -> 74.3 ms
(median of 6 alternated processes x 25 evaluations), 10^5 entities 1.08 -> 1.06x the floor, FB15k-237 /
WN18RR DistMult-200 0.72 / 0.47 -> 0.70 / 0.45 s. What is left at 10^4 is CPU time, not idle cores: the
evaluation takes ~143-148 ms of CPU per ~74 ms (one thread: ~140 ms, of which products 120, counting 7
and ~13 of serial bookkeeping), so scheduling alone cannot bring it nearer the floor.

The sides rarely cost the same (their numbers of distinct queries differ), so a side thread that
has finished its own side does not idle: it *helps*, taking parts of the other side's open walks
(:meth:`WalkShare.walk`) -- a walk's parts are taken from one shared iterator, so a helper is one
more walker (:func:`.full.count_chunks`, :func:`.full._rank_row_groups`), on a slot of its own. No
core idles while any part of any walk is left.

Each side gets half the evaluation's memory budget (the two sides' batches are alive at once; a
helper adds one score block of at most ``full.CPU_BLOCK`` entries, like any walker); where that plans
other batches or chunks than one side after the other would (a budget that binds at half), the sides
run one after the other, so that the consistency check and the protocol never depend on the mode.
``KGEVAL_PARALLEL_SIDES=0`` ranks the sides one after the other.
"""

from __future__ import annotations

import threading

from .._threads import env_switch

__all__ = ["WalkShare", "Cancelled", "enabled"]


class Cancelled(Exception):
    """A side stopped because the other side failed (never reaches the caller: that side's error does)."""


def enabled() -> bool:
    """``KGEVAL_PARALLEL_SIDES`` (read at each call): ``0`` turns side threads off; default on."""
    return env_switch("KGEVAL_PARALLEL_SIDES")


class _Walk:
    """One open walk: its function ``walk(slot)``, the helpers' parts and errors."""

    def __init__(self, walk, first_slot: int):
        self.walk = walk
        self.next_slot = first_slot  # each helper walks on a slot of its own (its own score block)
        self.helpers = 0  # helpers walking it now
        self.parts: list = []
        self.errors: list = []
        self.closed = False
        self.joined: set[int] = set()  # the helper threads that joined it (each joins a walk once)


class WalkShare:
    """The open walks of one evaluation's side threads.

    A side thread runs its walks through :meth:`walk`; when its side is done it calls
    :meth:`help`, which joins every walk still open (once each) until no side is running.
    """

    def __init__(self, sides: int, walkers: int = 2):
        self.walkers = walkers  # the evaluation's walkers, both sides' (batch plans: .full._walkers)
        self._cond = threading.Condition()
        self._open: list[_Walk] = []
        self._running = sides
        self._cancelled = threading.Event()

    def cancel(self) -> None:
        """A side failed: the others stop at their next batch (:meth:`check_cancelled`)."""
        self._cancelled.set()

    def check_cancelled(self) -> None:
        """Raise :class:`Cancelled` once a side has failed (its own error is the one reported)."""
        if self._cancelled.is_set():
            raise Cancelled("the other side of this evaluation failed")

    def walk(self, walk, first_helper_slot: int = 1):
        """``walk(0)`` on this thread, open meanwhile to helpers (slots from ``first_helper_slot``):
        ``[walk(0)'s result, each helper's result...]``; a helper's error is raised here."""
        w = _Walk(walk, first_helper_slot)
        with self._cond:
            self._open.append(w)
            self._cond.notify_all()
        try:
            own = walk(0)
        finally:  # no helper may still be walking when the walk's results are summed (or it failed)
            with self._cond:
                self._open.remove(w)
                w.closed = True
                while w.helpers:
                    self._cond.wait()
        if w.errors:
            raise w.errors[0]
        return [own, *w.parts]

    def help(self, work: bool = True) -> None:
        """This side is done: join the other sides' open walks until every side is done
        (``work=False``: a side that failed only says it is done)."""
        me = threading.get_ident()
        with self._cond:
            self._running -= 1
            self._cond.notify_all()
            if not work:
                return
        while True:
            with self._cond:
                while True:
                    w = next((w for w in self._open if me not in w.joined and not w.closed), None)
                    if w is not None or not self._running:
                        break
                    self._cond.wait()
                if w is None:
                    return
                w.joined.add(me)
                w.helpers += 1
                slot, w.next_slot = w.next_slot, w.next_slot + 1
            try:
                part = w.walk(slot)
            except BaseException as exc:  # noqa: BLE001 - raised by the walk's owner
                part, err = None, exc
            else:
                err = None
            with self._cond:
                if err is None:
                    w.parts.append(part)
                else:
                    w.errors.append(err)
                w.helpers -= 1
                self._cond.notify_all()
