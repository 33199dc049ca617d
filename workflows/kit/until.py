"""`until()`: wait, inside activities, until the outcome changes into one the plan acts on.

Colony's long waits (a control plane coming up, nodes joining, a release deploying, a
ClusterDeployment going) are each one heartbeating activity that returns when what it sees differs
from what the workflow already knows, or at the deadline: the history grows with the changes,
never with the minutes waited. The workflow records each change (a condition, a node's state) and
calls again with what it now knows, until the outcome settles. That loop is written once, here:

    seen = await until(
        lambda known, left: AWAIT_SERVICE_SET(request(known), wait=left),
        known="",
        learn=lambda seen, _: seen.state,
        settled=lambda seen: seen.outcome is not ServiceSetOutcome.CHANGED,
        deadline=deadline,
    )
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import TypeVar

from temporalio import workflow

Known = TypeVar("Known")
Seen = TypeVar("Seen")

SHORTEST_WAIT = timedelta(seconds=1)
"""A wait past its deadline still gets this long: the activity then answers at once with the
deadline's outcome, which the plan reports."""


async def until(
    look: Callable[[Known, timedelta], Awaitable[Seen]],
    *,
    known: Known,
    learn: Callable[[Seen, Known], Known],
    settled: Callable[[Seen], bool],
    deadline: datetime,
    seen: Callable[[Seen], None] = lambda _: None,
) -> Seen:
    """Call `look(known, time left)` until `settled(what it saw)`; return that.

    Args:
        look: one wait in an activity, given what the workflow knows and how long it may last
            (the time to `deadline`, at least `SHORTEST_WAIT`).
        known: what the workflow knows before the first look.
        learn: what it knows after a look (from what it saw, and what it knew).
        settled: whether what it saw is an outcome the plan acts on (ready, failed, gone, the
            deadline), as opposed to a change to record and wait on.
        deadline: when the waiting ends (each activity returns by itself then).
        seen: records what each look saw (conditions on the status, progress), settled or not.
    """
    while True:
        left = max(deadline - workflow.now(), SHORTEST_WAIT)
        found = await look(known, left)
        seen(found)
        if settled(found):
            return found
        known = learn(found, known)
