"""Settings as small value objects with named defaults."""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["DEFAULT_POLL", "DEFAULT_ROLLOUT_TIMEOUT_S", "DEFAULT_TRACES", "PollSettings", "TraceSettings"]

#: Seconds a rollout may run before the sweeper ends it as ``timed_out`` (ART's batch default).
DEFAULT_ROLLOUT_TIMEOUT_S = 900.0


class PollSettings(NamedTuple):
    """How the completion poller reads the completion queue.

    Attributes:
        wait_time_s: SQS long-poll wait (0-20 s). Tests use 1 to stop fast.
        max_messages: messages per receive (1-10).
        fetch_workers: threads reading result objects in parallel.
        remember: how many finished session ids are kept to recognize duplicate events.
        idle_backoff_s: pause after a receive that held only other processes' messages, so that two
            trainers on one experiment do not spin handing messages back and forth.
        deadline_grace_s: how long after a rollout's deadline a batch still waits for the sweeper's
            ``timed_out`` result before failing the item locally.
        unavailable_after_s: how long the completion queue or the results bucket may stay unreachable
            before pending futures fail with ``StoreUnavailableError``.
    """

    wait_time_s: int = 20
    max_messages: int = 10
    fetch_workers: int = 8
    remember: int = 1 << 17
    idle_backoff_s: float = 0.2
    deadline_grace_s: float = 180.0
    unavailable_after_s: float = 120.0


class TraceSettings(NamedTuple):
    """How token traces are read from the gateway after a result arrives.

    The gateway writes traces fire-and-forget, so a read right after the agent ends can miss the last
    call; the client retries while the trace count still grows, a bounded number of times.

    Attributes:
        attempts: reads at most.
        delay_s: pause between reads.
        timeout_s: HTTP timeout per read.
    """

    attempts: int = 4
    delay_s: float = 0.25
    timeout_s: float = 10.0


DEFAULT_POLL = PollSettings()
DEFAULT_TRACES = TraceSettings()
