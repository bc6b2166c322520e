"""CloudWatch metrics the Lambda functions emit (embedded metric format), for dashboards and alarms.

Every metric carries the dimension :data:`EXP_DIMENSION` (the experiment, every run together);
:data:`COMPLETED` also carries :data:`STATUS_DIMENSION` (a ``results.Status`` value) and :data:`DISPATCH_ERRORS`
also carries :data:`ERROR_CODE_DIMENSION` (an ACR error code). For a rollout of a run (exp_id
``experiment/run``), :data:`COMPLETED` and :data:`REWARD` are emitted once more with :data:`RUN_DIMENSION` added
(``{exp_id, status, run}`` and ``{exp_id, run}``): one run's view, while the experiment's stay whole.

:data:`OVERDUE` is the "stuck rollouts" signal: rollouts still holding a session slot more than
:data:`OVERDUE_GRACE_S` after their deadline, which the sweeper (every minute) tried and failed to end.
"""

from __future__ import annotations

from rollout_contract.naming import PROJECT

NAMESPACE = "AgentcoreRollouts"
EXP_DIMENSION = "exp_id"
STATUS_DIMENSION = "status"
ERROR_CODE_DIMENSION = "error_code"
RUN_DIMENSION = "run"

INVOKED = "RolloutsInvoked"  # Count: InvokeAgentRuntime calls that started a rollout
REQUEUED = "DispatchRequeued"  # Count: dispatch messages sent back to wait (budget or retryable error)
DEAD_LETTERED = "DispatchDeadLettered"  # Count: unparseable dispatch messages moved to the dead-letter queue
DISPATCH_ERRORS = "DispatchErrors"  # Count per error_code: failed InvokeAgentRuntime calls
COMPLETED = "RolloutsCompleted"  # Count per status: rollouts that ended
DURATION = "RolloutDuration"  # Seconds: handler start to result
QUEUE_DELAY = "QueueDelay"  # Seconds: submitted to dispatched (waiting for budget)
START_DELAY = "StartDelay"  # Seconds: dispatched to handler start (cold start, scheduling)
REWARD = "Reward"  # None: the scalar reward of a finished rollout, where numeric
IN_FLIGHT = "RolloutsInFlight"  # Count (gauge, by the sweeper): rollouts holding a session slot
SLOT_DRIFT = "SessionSlotDrift"  # Count: correction the sweeper applied to the slot count
STOPS = "SessionStops"  # Count: StopRuntimeSession calls ACR answered (each took an invoke-budget slot)
STOP_FAILURES = "StopFailures"  # Count: StopRuntimeSession calls that failed for good
SLOT_FREE_DELAY = "SlotFreeDelay"  # Seconds: a rollout's result stored (its finished_at) to its session slot freed
STOP_TOKEN_WAIT = "StopTokenWait"  # Seconds: a finish asked for its stop's invoke-budget token to the token's slot
BATCH_RECORDS = "BatchRecords"  # Count: records one dispatcher or finisher invocation received
SWEEPER_RUNS = "SweeperRuns"  # Count: sweeper invocations (one a minute when it is scheduled and healthy)
SANDBOXES_EXPIRED = "SandboxesExpired"  # Count: sandboxes the sweeper stopped at their deadline (none terminated them)
OVERDUE = "RolloutsOverdue"  # Count (gauge, by the sweeper, every run): in flight OVERDUE_GRACE_S past the deadline

#: Seconds past its deadline after which a rollout still in flight counts in :data:`OVERDUE`. The sweeper
#: runs every minute and normally ends a rollout in its first run after the deadline; a throttled or failed
#: StopRuntimeSession is retried on each run, so five minutes is about five attempts that all failed.
OVERDUE_GRACE_S = 5 * 60


def alarm_name_prefix(exp_id: str) -> str:
    """The prefix of every alarm of experiment ``exp_id`` (``rollouts top`` finds its alarms by it)."""
    return f"{PROJECT}-{exp_id}-"
