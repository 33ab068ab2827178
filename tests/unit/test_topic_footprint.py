"""What a loaded topic costs: the shared empty queues stay empty, topic names keep their values once derived and
remembered, and ledger directory names keep their spelling (issue 20: per-topic memory and CPU)."""

from __future__ import annotations

import asyncio
import random

import pytest

from broker.dispatch import lane as lane_module
from broker.dispatch.lane import Lane
from broker.errors import InvalidTopicNameError
from broker.topic_name import TopicName
from managed_ledger import completion
from managed_ledger.completion import NestingCounter, OrderedCompleter
from managed_ledger.file_layout import _SAFE, decode_name, encode_name


async def test_a_completer_that_posts_gets_its_own_queue_and_the_shared_one_stays_empty() -> None:
    quiet, busy = OrderedCompleter(NestingCounter(), 8), OrderedCompleter(NestingCounter(), 0)  # 0: every one posts
    ran: list[int] = []
    quiet.complete(lambda: ran.append(0))
    busy.complete(lambda: ran.append(1))
    fill = busy.reserve()
    busy.complete(lambda: ran.append(3))
    assert busy.pending == 3 and quiet.pending == 0
    fill(lambda: ran.append(2))
    for _ in range(5):
        await asyncio.sleep(0)
    assert ran == [0, 1, 2, 3]
    assert len(completion._NOTHING_POSTED) == 0
    assert quiet._posted is completion._NOTHING_POSTED and busy._posted is not completion._NOTHING_POSTED


async def test_a_lane_gives_its_queue_back_once_drained() -> None:
    lane = Lane()
    ran: list[int] = []
    lane.post(ran.append, 1)
    lane.post(lambda: lane.post(ran.append, 3))  # (posted while draining: runs in the same drain)
    lane.post(ran.append, 2)
    assert lane.pending == 3
    await asyncio.sleep(0)
    assert ran == [1, 2, 3]
    assert lane._items is lane_module._NOTHING_QUEUED and len(lane_module._NOTHING_QUEUED) == 0


@pytest.mark.parametrize("raw", ["persistent://t/ns/a", "non-persistent://t/ns/a/b-partition-x",
                                 "persistent://t/ns/topic-partition-12", "short", "t/ns/x-partition-0"])
def test_a_topic_name_derives_the_same_values_once(raw: str) -> None:
    name = TopicName.parse(raw)
    assert TopicName.parse(raw) is name  # (remembered)
    assert name.full == f"{name.domain}://{name.tenant}/{name.namespace_part}/{name.local_name}"
    assert name.namespace == f"{name.tenant}/{name.namespace_part}"
    suffix = name.local_name.rpartition("-partition-")[2]
    expected = int(suffix) if "-partition-" in name.local_name and suffix.isdigit() else -1
    assert name.partition_index == expected
    base = name.base
    assert (base is name) == (expected < 0)
    assert base.partition_index == -1 and (expected < 0 or base.partition(expected) == name)
    same = TopicName(name.domain, name.tenant, name.namespace_part, name.local_name)
    assert same == name and hash(same) == hash(name) and repr(same) == repr(name)


def test_a_bad_topic_name_is_refused_every_time() -> None:
    for _ in range(2):
        with pytest.raises(InvalidTopicNameError):
            TopicName.parse("persistent://only-tenant")


@pytest.mark.parametrize("name", ["persistent://public/default/..", "public/default/.", "x" * 4097])
def test_names_no_store_can_hold_are_invalid(name: str) -> None:
    # A path step ('.', '..') or a name past MAX_NAME_LENGTH ('..' made later admin calls a 503).
    with pytest.raises(InvalidTopicNameError):
        TopicName.parse(name)
    TopicName.parse("persistent://public/default/..." if name.endswith(".") else "x" * 4096)  # (just within)


def test_ledger_directory_names_keep_their_spelling() -> None:
    def spelled(name: str) -> str:  # the per-character rule: %XX for each UTF-8 byte outside [A-Za-z0-9_-]
        return "".join(c if c in _SAFE else "".join(f"%{b:02X}" for b in c.encode()) for c in name)

    rng = random.Random(20)
    alphabet = [chr(i) for i in range(1, 160)] + ["é", "日", "~", "%", "/", "."]
    for _ in range(2000):
        name = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 60)))
        encoded = encode_name(name)
        if len(spelled(name)) <= 180:  # (longer ones are hashed)
            assert encoded == spelled(name)
            assert decode_name(encoded) == name
    assert decode_name("public%2Fdefault") == "public/default" and decode_name("plain-name_1") == "plain-name_1"
