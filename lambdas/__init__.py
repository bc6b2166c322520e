"""The experiment's Lambda functions and the machinery they share.

Handlers (one module each, ``handler(event, context)``):

- ``dispatcher``: dispatch-queue messages -> ``InvokeAgentRuntime`` under the TPS and session budgets.
- ``finisher``: result "Object Created" events -> ``StopRuntimeSession``, bookkeeping, metrics.
- ``sweeper``: scheduled -> rollouts past their deadline end as ``timed_out``; slot count reconciled.

Shared pieces:

- ``tps``: :class:`~rollout_budgets.tps.TpsBudget`, reserved invoke slots per runtime endpoint in DynamoDB.
- ``ledger``: :class:`~rollout_budgets.ledger.Ledger`, the sessions table and the account's session-slot count.
- ``acr``: :class:`~rollout_budgets.acr.Acr`, the AgentCore Runtime data plane under the TPS budget.
- ``store``: :class:`~lambdas.store.ResultStore`, terminal results written first-writer-wins.
- ``finishing``: :func:`~lambdas.finishing.finish_rollout`, the one way a rollout becomes finished.
- ``runtime``: :class:`~lambdas.runtime.Runtime`, settings and clients built once per process.
- ``exceptions``: what the pieces raise besides the budgets' errors.

The budgets (TPS, session slots, ACR calls) are ``rollout_budgets``, which the trainer's sandbox client uses too.

Importing any module needs no environment; settings are read on the first handler call.
"""
