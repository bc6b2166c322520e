"""The budgets every caller of an experiment's runtime shares: the functions and the trainer's sandbox client.

- ``tps``: :class:`~rollout_budgets.tps.TpsBudget`, reserved invoke slots per runtime endpoint in DynamoDB.
- ``ledger``: :class:`~rollout_budgets.ledger.Ledger`, the sessions table (its moves are the lifecycle table's,
  ``rollout_contract.lifecycle``) and the account's session-slot count.
- ``slot_wait``: :class:`~rollout_budgets.slot_wait.SlotWaiter`, waiting in-process for a free session slot.
- ``acr``: :class:`~rollout_budgets.acr.Acr`, the AgentCore Runtime data plane under the TPS budget.
- ``conditional``: one conditional write (DynamoDB's condition or S3's ``If-None-Match``).
- ``errors``: what they raise.

A product package (D94): the Lambda functions (``lambdas``) and ``trainer_client.sandbox`` import it, so no
product package reaches into the local twin. Needs botocore; logs through standard loggers.
"""
