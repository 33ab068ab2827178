"""bench/compare.py's options and round ratios (the benchmark itself is not a test: `make bench`)."""

from __future__ import annotations

import argparse

import pytest

from bench.compare import Result, paired_ratios, parse_kinds


def test_kinds_are_parsed_in_order_and_bad_ones_refused() -> None:
    assert parse_kinds("ours, ours-bk,lite") == ["ours", "ours-bk", "lite"]
    for bad in ("", "ours,ours", "ours,kafka"):
        with pytest.raises(argparse.ArgumentTypeError, match="expected distinct kinds"):
            parse_kinds(bad)


def test_ratios_are_the_first_kind_against_each_other_within_rounds() -> None:
    def r(rate: float) -> Result:
        return Result(messages=int(rate), seconds=1.0, nbytes=0, broker_cpu=0.0)

    runs = {"ours": [r(100), r(200)], "ours-bk": [r(50), r(100)], "lite": [r(100), r(0)]}
    assert paired_ratios(runs) == {"ours-bk": [2.0, 2.0], "lite": [1.0]}
    assert paired_ratios({"ours": [r(1)]}) == {}
