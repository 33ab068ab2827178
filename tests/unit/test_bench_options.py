"""bench/compare.py's options and round ratios (the benchmark itself is not a test: `make bench`)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from bench.brokers import BrokerProcess
from bench.compare import (
    Result,
    Row,
    main,
    median_result,
    paired_ratios,
    parse_kinds,
    print_table,
    publish_p99,
    report_failures,
)


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


def test_failed_runs_do_not_count_and_are_kept() -> None:
    def ok(p99: float) -> Result:
        return Result(messages=100, seconds=1.0, nbytes=0, broker_cpu=0.0,
                      extra={"achieved": 10_000.0, "offered": 10_000.0, "pub_p99": p99})

    failed = Result(0, 1.0, 0, 0.0, {"achieved": 7000.0, "offered": 10_000.0, "pub_p99": 900.0},
                    failures=["offered 10000 msg/s, achieved 7000"], counted=0)
    median = median_result([ok(3.0), failed, ok(5.0)])
    assert median.counted == 2 and median.failures == ["offered 10000 msg/s, achieved 7000"]
    assert median.extra["pub_p99"] == 4.0  # of the two runs that counted
    assert median.rate == 10_000.0  # a fixed-rate run's rate is the rate it achieved
    none = median_result([failed, failed])
    assert none.counted == 0 and len(none.failures) == 2
    # A round with a failed run gives no ratio.
    assert paired_ratios({"ours": [ok(1.0), ok(1.0)], "pulsar": [failed, ok(1.0)]}) == {"pulsar": [1.0]}


def test_fixed_rate_rows_also_pair_their_publish_p99s_by_round() -> None:
    def run(p99: float | None) -> Result:
        extra = {"achieved": 10_000.0, "offered": 10_000.0}
        if p99 is not None:
            extra["pub_p99"] = p99
        return Result(messages=100, seconds=1.0, nbytes=0, broker_cpu=0.0, extra=extra)

    runs = {"ours": [run(4.0), run(6.0), run(5.0)], "pulsar": [run(8.0), run(3.0), run(None)]}
    # Ours' p99 over Pulsar's in each round (lower is better); a round without the figure gives no ratio.
    assert paired_ratios(runs, publish_p99) == {"pulsar": [0.5, 2.0]}
    assert paired_ratios(runs) == {"pulsar": [1.0, 1.0, 1.0]}  # (the rates: each achieved the rate offered)


def test_a_failed_run_sets_the_exit_status_or_with_keep_going_the_file(tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    failed = [("latency 10k msg/s", "ours", "offered 10000 msg/s, achieved 7000")]
    assert report_failures(failed, None) == 1
    assert report_failures([], None) == 0
    assert "FAILED: latency 10k msg/s, ours: offered 10000 msg/s, achieved 7000" in capsys.readouterr().err
    record = tmp_path / "failed"
    assert report_failures([], record) == 0 and not record.exists()
    assert report_failures(failed, record) == 0
    assert report_failures(failed, record) == 0  # appended: one file for several runs
    assert record.read_text() == "FAILED: latency 10k msg/s, ours: offered 10000 msg/s, achieved 7000\n" * 2


def test_keep_going_takes_a_file(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--keep-going"])
    assert "expected one argument" in capsys.readouterr().err


def test_the_table_has_a_line_per_row_with_its_ratios_and_p99_notes(capsys: pytest.CaptureFixture[str]) -> None:
    def broker(name: str) -> BrokerProcess:
        return BrokerProcess(name, None, 0, f"{name} notes", Path("/nonexistent"))  # type: ignore[arg-type]

    def r(rate: float) -> Result:
        return Result(messages=int(rate), seconds=1.0, nbytes=int(rate) * 100, broker_cpu=rate / 1e6)

    table = [Row("consume", {"ours": r(300), "pulsar": r(200)}, {"pulsar": [1.2, 1.5, 1.8]}, {}),
             Row("latency", {"ours": r(10), "pulsar": r(10)}, {"pulsar": [1.0]}, {"pulsar": [0.5, 0.7]})]
    print_table(table, [broker("ours"), broker("pulsar")], {"ours": 1, "pulsar": 2}, 3, {"ours": 1, "pulsar": 2})
    lines = capsys.readouterr().out.splitlines()
    consume = next(line for line in lines if line.startswith("| consume |"))
    assert consume.startswith("| consume | 300 | 0.0 | 1.00 | 200 | 0.0 | 1.00 | 1.50 (1.20-1.80) |"), consume
    latency = next(line for line in lines if line.startswith("| latency |"))
    assert "| 1.00 (1.00-1.00) | publish p99 ours/pulsar by round 0.60 (0.50-0.70) |" in latency, latency
