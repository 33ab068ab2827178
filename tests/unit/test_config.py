"""broker.config: every key is converted and checked; a bad value is one line naming the key and
what it accepts (from the file, a CLI flag, Broker(**overrides) or a direct assignment)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from broker.config import DEFAULT_CONFIG_PATH, BrokerConfig, ConfigError
from broker.embedded import Broker
from broker.service.offload import broker_offload_fields

PORT_WORDS = "a port 0-65535 (0 picks a free port; empty disables the listener)"

# (key, value as written in the file, the whole error line)
BAD_VALUES = [
    ("brokerServicePort", "70000", f"brokerServicePort=70000: expected {PORT_WORDS}"),
    ("brokerServicePort", "-1", f"brokerServicePort=-1: expected {PORT_WORDS}"),
    ("webServicePortTls", "http", f"webServicePortTls=http: expected {PORT_WORDS}"),
    ("managedLedgerCacheSizeMB", "-5", "managedLedgerCacheSizeMB=-5: expected an integer >= 0 (0 = no read cache)"),
    ("maxMessageSize", "0", "maxMessageSize=0: expected an integer > 0"),
    ("maxProducersPerTopic", "-1", "maxProducersPerTopic=-1: expected an integer >= 0 (0 = unlimited)"),
    ("keepAliveIntervalSeconds", "1.5",
     "keepAliveIntervalSeconds=1.5: expected an integer >= 0 (0 = no keep-alive pings)"),
    ("defaultRetentionTimeInMinutes", "-2",
     "defaultRetentionTimeInMinutes=-2: expected an integer >= -1 (-1 = keep forever)"),
    ("backlogQuotaDefaultLimitBytes", "-10",
     "backlogQuotaDefaultLimitBytes=-10: expected an integer >= -1 (-1 = no limit)"),
    ("statsUpdateFrequencyInSecs", "0", "statsUpdateFrequencyInSecs=0: expected a number > 0"),
    ("statsUpdateFrequencyInSecs", "inf", "statsUpdateFrequencyInSecs=inf: expected a number > 0"),
    ("messageExpiryCheckIntervalInMinutes", "soon", "messageExpiryCheckIntervalInMinutes=soon: expected a number > 0"),
    ("managedLedgerDefaultMarkDeleteRateLimit", "-0.5",
     "managedLedgerDefaultMarkDeleteRateLimit=-0.5: expected a number >= 0 (0 = write every change)"),
    ("brokerDeleteInactiveTopicsMaxInactiveDurationSeconds", "-1",
     "brokerDeleteInactiveTopicsMaxInactiveDurationSeconds=-1: expected an integer >= 0 (empty = the check frequency)"),
    ("allowAutoTopicCreation", "yes", "allowAutoTopicCreation=yes: expected true or false"),
    ("managedLedgerSyncData", "1", "managedLedgerSyncData=1: expected true or false"),
    ("allowAutoTopicCreationType", "Partitioned",
     "allowAutoTopicCreationType=Partitioned: expected one of partitioned, non-partitioned"),
    ("managedLedgerStorage", "rocksdb", "managedLedgerStorage=rocksdb: expected one of file, memory, bookkeeper"),
    ("backlogQuotaDefaultRetentionPolicy", "drop",
     "backlogQuotaDefaultRetentionPolicy=drop: expected one of producer_request_hold, producer_exception, "
     "consumer_backlog_eviction"),
    ("brokerDeleteInactiveTopicsMode", "always",
     "brokerDeleteInactiveTopicsMode=always: expected one of delete_when_no_subscriptions, "
     "delete_when_subscriptions_caught_up"),
    ("subscriptionTypesEnabled", "Shared,Bogus",
     "subscriptionTypesEnabled=Shared,Bogus: expected a comma-separated list of Exclusive, Shared, Failover, "
     "Key_Shared"),
    ("openIDFallbackDiscoveryMode", "SOMETIMES",
     "openIDFallbackDiscoveryMode=SOMETIMES: expected one of DISABLED, KUBERNETES_DISCOVER_TRUSTED_ISSUER, "
     "KUBERNETES_DISCOVER_PUBLIC_KEYS"),
]


@pytest.mark.parametrize(("key", "value", "line"), BAD_VALUES)
def test_a_bad_value_is_one_line_naming_the_key_and_what_it_accepts(key: str, value: str, line: str) -> None:
    cfg = BrokerConfig()
    before = getattr(cfg, key)
    with pytest.raises(ConfigError) as err:
        cfg.set(key, value)
    assert str(err.value) == line
    assert getattr(cfg, key) == before  # a refused value is not kept


@pytest.mark.parametrize(("key", "value", "expected"), [
    ("brokerServicePort", "65535", 65535),
    ("brokerServicePort", "0", 0),
    ("brokerServicePort", "", None),  # empty disables the listener
    ("brokerServicePortTls", " 6651 ", 6651),
    ("allowAutoTopicCreation", "FALSE", False),  # any case, as Pulsar
    ("allowAutoTopicCreation", "True", True),
    ("managedLedgerCacheSizeMB", "0", 0),
    ("backlogQuotaDefaultLimitBytes", "-1", -1),
    ("statsUpdateFrequencyInSecs", "0.25", 0.25),
    ("subscriptionTypesEnabled", " Shared , Key_Shared ", ["Shared", "Key_Shared"]),
    ("subscriptionTypesEnabled", "", []),
    ("brokerDeleteInactiveTopicsMaxInactiveDurationSeconds", "", None),
    ("clusterName", "east", "east"),
    ("authenticationProviders", "token,tls", ["token", "tls"]),
])
def test_good_values_from_text(key: str, value: str, expected: Any) -> None:
    cfg = BrokerConfig()
    cfg.set(key, value)
    assert getattr(cfg, key) == expected
    assert type(getattr(cfg, key)) is type(expected)


@pytest.mark.parametrize(("key", "value", "line"), [
    ("brokerServicePort", 70000, f"brokerServicePort=70000: expected {PORT_WORDS}"),
    ("brokerServicePort", True, f"brokerServicePort=true: expected {PORT_WORDS}"),
    ("maxMessageSize", 1.5, "maxMessageSize=1.5: expected an integer > 0"),
    ("allowAutoTopicCreation", 1, "allowAutoTopicCreation=1: expected true or false"),
    ("managedLedgerCacheSizeMB", None, "managedLedgerCacheSizeMB=: expected an integer >= 0 (0 = no read cache)"),
    ("superUserRoles", [1], "superUserRoles=1: expected a comma-separated list"),
    ("tokenSecretKey", 5, "tokenSecretKey=(hidden): expected text"),  # secrets never shown
])
def test_python_values_are_checked_too(key: str, value: Any, line: str) -> None:
    with pytest.raises(ConfigError) as err:
        BrokerConfig().set(key, value)
    assert str(err.value) == line


def test_python_values_keep_their_types() -> None:
    cfg = BrokerConfig()
    cfg.set("statsUpdateFrequencyInSecs", 1)  # an int where a float is expected is fine
    cfg.set("tlsProtocols", ("TLSv1.3",))
    cfg.set("brokerServicePortTls", None)
    assert (cfg.statsUpdateFrequencyInSecs, cfg.tlsProtocols, cfg.brokerServicePortTls) == (1, ["TLSv1.3"], None)


def test_check_catches_values_assigned_directly() -> None:
    cfg = BrokerConfig(managedLedgerCacheSizeMB=-5)
    with pytest.raises(ConfigError, match=r"^managedLedgerCacheSizeMB=-5: expected an integer >= 0"):
        cfg.check()
    cfg.managedLedgerCacheSizeMB = 0
    cfg.webServicePort = 70000
    with pytest.raises(ConfigError, match=r"^webServicePort=70000: expected a port"):
        cfg.check()


def test_the_defaults_and_the_shipped_file_pass() -> None:
    BrokerConfig().check()
    cfg = BrokerConfig.load(DEFAULT_CONFIG_PATH)
    cfg.check()
    assert not cfg.unknown_keys


def test_a_bad_line_in_a_file_names_the_file_and_line(tmp_path: Path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text("# comment\nclusterName=east\n\nbrokerServicePort=70000\n")
    with pytest.raises(ConfigError) as err:
        BrokerConfig.load(conf)
    assert str(err.value) == f"brokerServicePort=70000: expected {PORT_WORDS} ({conf}:4)"
    conf.write_text("brokerServicePort\n")
    with pytest.raises(ConfigError, match=r":1: expected key=value"):
        BrokerConfig.load(conf)


def test_overrides_are_checked_as_they_are_applied(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^maxMessageSize=-1: expected an integer > 0$"):
        BrokerConfig.load(None, maxMessageSize=-1)
    with pytest.raises(ConfigError, match=r"^brokerServicePort=70000: "):
        Broker(data_dir=tmp_path, brokerServicePort=70000)


def test_the_keys_given_are_known(tmp_path: Path) -> None:
    """Which settings the file or the overrides set (Pulsar keeps the file's keys, and a topic's offload policies
    ?applied=true show those), even at their default; a config made in code: the ones not at their default."""
    conf = tmp_path / "broker.conf"
    conf.write_text("managedLedgerOffloadDriver=\nmanagedLedgerOffloadDeletionLagMs=14400000\n"
                    "s3ManagedLedgerOffloadCredentialSecret=hidden\n")
    cfg = BrokerConfig.load(conf, managedLedgerDataReadPriority="bookkeeper-first", webServicePort=None)
    assert cfg.given_keys == {"managedLedgerOffloadDriver", "managedLedgerOffloadDeletionLagMs",
                              "s3ManagedLedgerOffloadCredentialSecret", "managedLedgerDataReadPriority"}
    assert cfg.is_set("managedLedgerOffloadDriver") and not cfg.is_set("webServicePort")
    # as a topic's offload policies take them: under the policies' names, the secret left out
    assert broker_offload_fields(cfg) == {"managedLedgerOffloadDriver": "",
                                          "managedLedgerOffloadDeletionLagInMillis": 14400000,
                                          "managedLedgerOffloadedReadPriority": "BOOKKEEPER_FIRST"}
    made = BrokerConfig(managedLedgerOffloadThresholdInSeconds=60, managedLedgerOffloadAutoTriggerSizeThresholdBytes=-1)
    assert broker_offload_fields(made) == {"managedLedgerOffloadThresholdInSeconds": 60}


def test_every_number_has_a_declared_range() -> None:
    """No numeric key is left to whatever its consumer makes of a negative or a zero."""
    for f in dataclasses.fields(BrokerConfig):
        if str(f.type).removesuffix(" | None") in ("int", "float"):
            rule = f.metadata.get("rule")
            assert rule is not None and rule.low is not None, f"{f.name} has no range"


def test_broker_entry_metadata_interceptors_are_pulsars_class_names(tmp_path: Path) -> None:
    names = ("org.apache.pulsar.common.intercept.AppendBrokerTimestampMetadataInterceptor,"
             "org.apache.pulsar.common.intercept.AppendIndexMetadataInterceptor")
    conf = tmp_path / "broker.conf"
    conf.write_text(f"brokerEntryMetadataInterceptors={names}\nexposingBrokerEntryMetadataToClientEnabled=true\n")
    cfg = BrokerConfig.load(conf)
    assert cfg.brokerEntryMetadataInterceptors == names.split(",")
    assert cfg.exposingBrokerEntryMetadataToClientEnabled
    conf.write_text("brokerEntryMetadataInterceptors=com.example.MyInterceptor\n")
    with pytest.raises(ConfigError) as err:
        BrokerConfig.load(conf)
    assert str(err.value).startswith("brokerEntryMetadataInterceptors=com.example.MyInterceptor: expected ")
    assert "\n" not in str(err.value)


def test_pulsars_key_and_the_name_this_broker_used_before_both_set_it(tmp_path: Path) -> None:
    for key in ("isAllowAutoUpdateSchemaEnabled", "isAllowAutoUpdateSchema"):
        conf = tmp_path / f"{key}.conf"
        conf.write_text(f"{key}=false\n")
        cfg = BrokerConfig.load(conf)
        assert cfg.isAllowAutoUpdateSchemaEnabled is False and not cfg.unknown_keys, key
        assert BrokerConfig.load(None, **{key: False}).isAllowAutoUpdateSchemaEnabled is False
