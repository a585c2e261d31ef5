"""The admission rule: fit, last call alone, wait, refuse."""

from __future__ import annotations

from gateway.limits.meters import Limit, Meter, Verdict, judge


def meter(cap: int, committed: int = 0) -> Meter:
    return Meter(Limit.USER_USD_PER_DAY, "2026-03-08", 0, cap, committed)


def test_a_call_that_fits_is_admitted_beside_others_in_flight() -> None:
    m = meter(1_000, 100)
    m.reserve(300)
    assert m.verdict(400) is Verdict.ADMIT


def test_the_last_call_runs_alone_and_the_next_is_refused() -> None:
    m = meter(1_000, 900)
    assert m.verdict(400) is Verdict.ADMIT  # does not fit, but nothing else is in flight
    m.reserve(400)
    assert m.verdict(400) is Verdict.WAIT
    assert m.verdict(50) is Verdict.WAIT  # the reservation is counted whole
    m.settle(400, 250)
    assert (m.committed, m.reserved, m.in_flight) == (1_150, 0, 0)
    assert m.verdict(1) is Verdict.REFUSE
    assert m.exhausted and m.remaining == 0


def test_a_cap_of_zero_is_off_but_still_counts() -> None:
    m = meter(0, 10**9)
    assert m.verdict(10**9) is Verdict.ADMIT
    assert not m.exhausted


def test_refusal_wins_over_waiting_across_meters() -> None:
    busy, spent = meter(1_000, 900), meter(1_000, 1_000)
    busy.reserve(400)
    assert judge([(busy, 400), (spent, 1)]) == (Verdict.REFUSE, spent)
    assert judge([(busy, 400), (meter(1_000), 1)]) == (Verdict.WAIT, busy)
    assert judge([(meter(1_000), 1)]) == (Verdict.ADMIT, None)
