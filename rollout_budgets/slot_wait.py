"""Waiting in the function for a free session slot: one count read per poll for every waiting caller.

A start that finds every session slot taken used to go back to its queue for a second or more; each
receive then cost a read, a HEAD of the result, a failed admission and a visibility change, and a freed
slot stayed unused until some message came back. Now the records of a batch that found no slot wait in
the function: one of them (the poller) reads the slot count every :data:`SLOT_POLL_S`, and a read that
sees ``n`` slots free wakes up to ``n`` waiters, which try their admission (the ledger's conditional
transaction, so a waiter that loses the slot to another dispatcher just waits on). The reads per poll do
not grow with the batch. A caller gives up at its own time limit (the function's time left, the
rollout's start limit) and its message goes back to the queue as before.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

#: Seconds between two reads of the slot count while callers of this process wait. Each waiting process
#: polls on its own, so with several dispatchers waiting a freed slot is seen sooner than this.
SLOT_POLL_S = 0.5


class SlotWaiter:
    """The callers of one process that wait for a free session slot, served by one poller at a time."""

    def __init__(
        self,
        count_free: Callable[[], int],
        *,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
        poll_s: float = SLOT_POLL_S,
    ) -> None:
        """``count_free`` reads how many session slots are free now (one read of the count)."""
        self._count_free = count_free
        self._clock = clock
        self._sleep = sleep
        self.poll_s = poll_s
        self._changed = threading.Condition()
        #: Callers in :meth:`wait` now.
        self._waiters = 0
        #: Slots the last read saw free that no waiter has been woken for yet.
        self._free = 0
        #: A waiter is sleeping before its read; the others wait for that read.
        self._polling = False

    @property
    def waiters(self) -> int:
        """Callers of this process waiting now (the last read found no slot for them)."""
        with self._changed:
            return self._waiters

    def wait(self, until: float) -> bool:
        """Block until a read of the count sees a slot free for this caller, or until ``until`` (Unix time).

        Returns:
            ``True``: try the admission now (another dispatcher may still take the slot first); ``False``: no
            slot came before ``until``.
        """
        with self._changed:
            self._waiters += 1
            try:
                while True:
                    if self._free > 0:
                        self._free -= 1
                        return True
                    if self._clock() >= until:
                        return False
                    if self._polling:
                        self._changed.wait()  # the poller wakes everyone after each read
                        continue
                    self._free = min(self._poll(until), self._waiters)
            finally:
                self._waiters -= 1
                self._free = min(self._free, self._waiters)

    def _poll(self, until: float) -> int:
        """Sleep a poll interval (or until ``until``), then read the count; called holding the condition."""
        self._polling = True
        self._changed.release()
        try:
            self._sleep(max(0.0, min(self.poll_s, until - self._clock())))
            return self._count_free() if self._clock() < until else 0
        finally:
            self._changed.acquire()
            self._polling = False
            self._changed.notify_all()
