"""A topic's managed-ledger name: Pulsar's TopicName.getPersistenceNamingEncoding, whose local name goes through
Codec.encode (java.net.URLEncoder, UTF-8), and its inverse (TopicName.fromPersistenceNamingEncoding)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.errors import InvalidTopicNameError
from broker.topic_name import (
    TopicName,
    decode_local_name,
    encode_local_name,
    persistence_path_of_raw,
    persistence_path_of_shared,
)

# (local name, as java.net.URLEncoder.encode(name, "UTF-8") spells it)
JAVA = [("t", "t"), ("a/x", "a%2Fx"), ("a b", "a+b"), ("a+b", "a%2Bb"), ("a:x", "a%3Ax"), ("a%2Fx", "a%252Fx"),
        ("a~b", "a%7Eb"), ("x*y.z_-", "x*y.z_-"), ("\u00fc", "%C3%BC"), ("=;?#&", "%3D%3B%3F%23%26"),
        ("\U0001f600", "%F0%9F%98%80")]


@pytest.mark.parametrize(("local", "encoded"), JAVA)
def test_a_local_name_is_encoded_as_javas_url_encoder_does(local: str, encoded: str) -> None:
    assert encode_local_name(local) == encoded and decode_local_name(encoded) == local
    name = TopicName.parse(f"persistent://public/default/{local}")
    assert name.persistence_path == f"public/default/persistent/{encoded}"
    assert TopicName.from_persistence_path(name.persistence_path) == name


def test_a_stored_name_that_is_no_topics_ledger_maps_to_no_topic() -> None:
    for path in ("public/default/__compaction/a-1", "public/default/persistent", "a/b/persistent/x/y",
                 "public/default/persistent/a b",  # (not as Pulsar spells "a b": stored raw by an older version)
                 "public/default/persistent/%2E%2E"):  # (".." is no local name)
        assert TopicName.from_persistence_path(path) is None


def test_an_older_versions_raw_name_maps_to_todays() -> None:
    assert persistence_path_of_raw("public/default/persistent/a/x") == "public/default/persistent/a%2Fx"
    assert persistence_path_of_raw("public/default/persistent/a b") == "public/default/persistent/a+b"
    for kept in ("public/default/persistent/t", "public/default/__compaction/a/x-1",
                 "public/default/persistent/a/x/__compaction/3",
                 "pulsar/system/persistent/__transaction_log_0", "pulsar/__health/persistent/heartbeat"):
        assert persistence_path_of_raw(kept) == kept


def test_a_name_pulsar_may_have_written_stays_in_a_shared_store() -> None:
    """On BookKeeper's ZooKeeper (which Apache Pulsar's brokers may share) a name already spelled as Codec.encode
    spells a local name is Pulsar's name of that topic: it is not re-encoded as if it were raw."""
    for kept in ("public/default/persistent/a+b%3A%C3%BC", "public/default/persistent/a%2Fx",
                 "public/default/persistent/t", "public/default/persistent/a/x/__compaction/3"):
        assert persistence_path_of_shared(kept) == kept
    # (not Pulsar's spelling of any name: an older version's raw name, moved)
    assert persistence_path_of_shared("public/default/persistent/a b:ü") == "public/default/persistent/a+b%3A%C3%BC"
    assert persistence_path_of_shared("public/default/persistent/a/x") == "public/default/persistent/a%2Fx"
    assert persistence_path_of_shared("public/default/persistent/a%3ab") == "public/default/persistent/a%253ab"


@given(st.text(min_size=1, max_size=40).filter(lambda s: "\x00" not in s))
def test_every_topic_maps_to_its_ledger_and_back(local: str) -> None:
    try:
        name = TopicName.parse(f"persistent://public/default/{local}")
    except (InvalidTopicNameError, UnicodeEncodeError):
        return
    try:
        path = name.persistence_path
    except UnicodeEncodeError:  # (a lone surrogate: no name a client can send in UTF-8)
        return
    assert path.count("/") == 3 and TopicName.from_persistence_path(path) == name
