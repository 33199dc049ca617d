"""`workflows.kit.engine.Refresh`: the look at the world that refresh signals ask for and an entity
takes between operations (the cluster's nodes, the ledger's inventory, the catalog's classes).

Plain Python: the piece holds no workflow calls of its own (its request ids and the engine's loop
are exercised on the time-skipping server by the cluster, capacity and catalog tests).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from models.operations import ContinueAsNewPolicy, OperationBook
from workflows.kit.engine import Refresh, RequestIds
from workflows.kit.run_limit import RunLimit


@dataclass
class CarriedState:
    refresh_due: bool = False


@dataclass
class Looks:
    """The look: counts its runs, and notes the flag as it saw it (and may ask again meanwhile)."""

    refresh: Refresh | None = None
    runs: int = 0
    flag_seen: bool | None = None
    ask_during: str = ""

    async def __call__(self) -> None:
        assert self.refresh is not None
        self.runs += 1
        self.flag_seen = self.refresh.chore().due()
        if self.ask_during:
            self.refresh.ask(self.ask_during)


def refresh_of(state: CarriedState, looks: Looks, **every: timedelta | None) -> Refresh:
    request_ids = RequestIds(OperationBook(), RunLimit(ContinueAsNewPolicy()))
    refresh = Refresh(state, request_ids, looks, every=lambda: every.get("every"))
    looks.refresh = refresh
    return refresh


async def test_a_request_id_asks_once_and_the_look_answers_what_was_asked() -> None:
    state, looks = CarriedState(), Looks()
    refresh = refresh_of(state, looks)
    chore = refresh.chore()
    assert not chore.due()

    refresh.ask("watcher-1")
    assert chore.due()
    assert state.refresh_due
    await chore.run()
    assert (looks.runs, looks.flag_seen, chore.due()) == (1, False, False)

    refresh.ask("watcher-1")  # a resend of the same change asks nothing more
    assert not chore.due()
    refresh.ask("watcher-2")
    assert chore.due()


async def test_a_signal_during_the_look_asks_again() -> None:
    state, looks = CarriedState(), Looks(ask_during="during")
    refresh = refresh_of(state, looks)
    refresh.ask("before")

    await refresh.chore().run()

    assert looks.runs == 1
    assert refresh.chore().due()


async def test_a_look_taken_by_other_means_answers_the_pending_request() -> None:
    state, looks = CarriedState(refresh_due=True), Looks()  # asked for in the previous run
    refresh = refresh_of(state, looks, every=timedelta(minutes=5))

    await refresh.look()  # the catalog reads after it publishes

    assert looks.runs == 1
    assert not refresh.chore().due()
    assert refresh.chore().every() == timedelta(minutes=5)
