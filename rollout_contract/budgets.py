"""The budget table's items: one TPS budget per runtime endpoint and one account-wide session budget.

The table (``resources.BUDGET_TABLE``) is shared by every experiment in the account. Item ids and
attribute names live here so the Lambdas, dashboards and the trainer's ``status`` view read them alike.
"""

from __future__ import annotations

#: Item holding the active-session count: ``total`` plus one ``held#<exp_id>`` count per experiment and
#: a ``seen#<exp_id>`` heartbeat (unix s) written by that experiment's sweeper.
SESSION_BUDGET_ID = "active-sessions"
ATTR_TOTAL = "total"
HELD_PREFIX = "held#"
SEEN_PREFIX = "seen#"
#: Start time (unix s) of the next free invoke slot of a TPS budget item.
ATTR_NEXT_AT = "next_at"


def tps_budget_id(runtime_arn: str, qualifier: str) -> str:
    """Return the id of the TPS budget item of one runtime endpoint (ARN + qualifier)."""
    return f"tps#{runtime_arn}#{qualifier}"


def held_attribute(exp_id: str) -> str:
    """Return the attribute counting the session slots experiment ``exp_id`` holds."""
    return f"{HELD_PREFIX}{exp_id}"


def seen_attribute(exp_id: str) -> str:
    """Return the attribute where experiment ``exp_id``'s sweeper records when it last ran."""
    return f"{SEEN_PREFIX}{exp_id}"
