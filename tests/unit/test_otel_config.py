"""OpenTelemetry export configuration read Pulsar's way (the OTel environment)."""

from __future__ import annotations

import pytest

from broker.admin.otel import DEFAULT_INTERVAL_MS, _ms, enabled


def test_enabled_only_when_pulsar_would() -> None:
    assert not enabled({})
    assert not enabled({"OTEL_SDK_DISABLED": "true"})
    assert enabled({"OTEL_SDK_DISABLED": "false"}) and enabled({"OTEL_SDK_DISABLED": " FALSE "})


def test_export_interval_in_milliseconds_and_a_bad_value_keeps_the_default(caplog: pytest.LogCaptureFixture) -> None:
    assert _ms({"OTEL_METRIC_EXPORT_INTERVAL": "300"}, "OTEL_METRIC_EXPORT_INTERVAL", DEFAULT_INTERVAL_MS) == 300
    assert _ms({}, "OTEL_METRIC_EXPORT_INTERVAL", DEFAULT_INTERVAL_MS) == DEFAULT_INTERVAL_MS
    assert _ms({"OTEL_METRIC_EXPORT_INTERVAL": "0"}, "OTEL_METRIC_EXPORT_INTERVAL", DEFAULT_INTERVAL_MS) == 60_000
    assert _ms({"OTEL_METRIC_EXPORT_INTERVAL": "soon"}, "OTEL_METRIC_EXPORT_INTERVAL", 60_000) == 60_000
    assert any("OTEL_METRIC_EXPORT_INTERVAL" in r.getMessage() for r in caplog.records)
