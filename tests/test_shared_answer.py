"""`activities.shared_answer.SharedAnswers`: one look per key at a time, kept for a moment."""

from __future__ import annotations

import asyncio

import pytest

from activities.shared_answer import SharedAnswers


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


async def test_callers_at_the_same_moment_share_one_look() -> None:
    answers: SharedAnswers[int] = SharedAnswers(2.0)
    looks = 0
    release = asyncio.Event()

    async def look() -> int:
        nonlocal looks
        looks += 1
        await release.wait()
        return 7

    callers = [asyncio.create_task(answers.get("k", look)) for _ in range(5)]
    await asyncio.sleep(0)
    release.set()
    assert await asyncio.gather(*callers) == [7] * 5
    assert looks == 1


async def test_an_answer_is_kept_while_fresh_and_only_if_keep_says_so() -> None:
    clock = Clock()
    answers: SharedAnswers[str] = SharedAnswers(2.0, clock=clock)
    looked: list[str] = []

    async def look() -> str:
        looked.append("x")
        return f"answer-{len(looked)}"

    assert await answers.get("k", look) == "answer-1"
    clock.now = 1.5
    assert await answers.get("k", look) == "answer-1"
    clock.now = 3.6
    assert await answers.get("k", look) == "answer-2"
    assert await answers.get("other", look) == "answer-3"
    assert await answers.get("never", look, keep=lambda _: False) == "answer-4"
    assert await answers.get("never", look, keep=lambda _: False) == "answer-5"
    answers.forget("k")
    assert await answers.get("k", look) == "answer-6"


async def test_a_failed_look_is_shared_with_its_waiters_but_never_kept() -> None:
    answers: SharedAnswers[int] = SharedAnswers(60.0)
    release = asyncio.Event()
    looks = 0

    async def failing() -> int:
        nonlocal looks
        looks += 1
        await release.wait()
        raise LookupError("gone")

    callers = [asyncio.create_task(answers.get("k", failing)) for _ in range(3)]
    await asyncio.sleep(0)
    release.set()
    results = await asyncio.gather(*callers, return_exceptions=True)
    assert all(isinstance(r, LookupError) for r in results)
    assert looks == 1

    async def working() -> int:
        return 1

    assert await answers.get("k", working) == 1


async def test_a_waiter_looks_again_when_the_one_looking_is_cancelled() -> None:
    answers: SharedAnswers[int] = SharedAnswers(60.0)
    started = asyncio.Event()

    async def slow() -> int:
        started.set()
        await asyncio.sleep(3600)
        return 0

    async def quick() -> int:
        return 2

    first = asyncio.create_task(answers.get("k", slow))
    await started.wait()
    second = asyncio.create_task(answers.get("k", quick))
    await asyncio.sleep(0)
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    assert await second == 2


async def test_the_oldest_keys_go_beyond_the_limit() -> None:
    answers: SharedAnswers[str] = SharedAnswers(60.0, limit=2)
    looked: list[str] = []

    def look(key: str):  # type: ignore[no-untyped-def]
        async def answer() -> str:
            looked.append(key)
            return key

        return answer

    for key in ("a", "b", "c", "a"):
        await answers.get(key, look(key))
    assert looked == ["a", "b", "c", "a"]


async def test_with_no_freshness_only_answers_under_way_are_shared() -> None:
    answers: SharedAnswers[int] = SharedAnswers(0.0)
    looks = 0

    async def look() -> int:
        nonlocal looks
        looks += 1
        return looks

    assert await answers.get("k", look) == 1
    assert await answers.get("k", look) == 2
