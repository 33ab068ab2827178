"""The broker service: owns topics, the managed ledger factory and the metadata store."""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Awaitable
from pathlib import Path

from broker.config import BrokerConfig
from broker.errors import NotAllowedError, TopicNotFoundError
from broker.metadata.store import MetadataStore
from broker.service.schemas import SchemaRegistry
from broker.service.topic import PersistentTopic
from broker.topic_name import TopicName
from managed_ledger import ManagedLedgerConfig, ManagedLedgerFactory
from managed_ledger.memory import MemoryManagedLedgerFactory

log = logging.getLogger(__name__)

# Names of topics the broker uses itself; never listed to clients.
SYSTEM_TOPIC_MARKERS = ("__change_events", "__transaction_buffer_snapshot", "__transaction_pending_ack")


class BrokerService:
    def __init__(self, config: BrokerConfig, data_dir: Path | None) -> None:
        self.config = config
        self.data_dir = data_dir
        self.metadata = MetadataStore(data_dir / "metadata.json" if data_dir else None, config.clusterName)
        self.schemas = SchemaRegistry(self.metadata)
        self.ledger_config = ManagedLedgerConfig(
            max_entries_per_ledger=config.managedLedgerMaxEntriesPerLedger,
            cache_size_bytes=config.managedLedgerCacheSizeMB * 1024 * 1024,
            read_nesting_limit=config.managedLedgerReadNestingLimit,
        )
        self.ledger_factory: ManagedLedgerFactory = self._make_ledger_factory()
        self.topics: dict[str, PersistentTopic] = {}
        self._loading: dict[str, asyncio.Future[PersistentTopic]] = {}
        self._producer_names = itertools.count()
        self.closed = False

    def _make_ledger_factory(self) -> ManagedLedgerFactory:
        kind = self.config.managedLedgerStorage
        if kind != "memory":
            raise ValueError(f"managedLedgerStorage={kind!r} is not available yet (only 'memory')")
        return MemoryManagedLedgerFactory()

    def generate_producer_name(self) -> str:
        return f"{self.config.clusterName}-0-{next(self._producer_names)}"

    # -- topics ------------------------------------------------------------------------------------
    def check_namespace(self, name: TopicName) -> None:
        if not self.metadata.namespace_exists(name.namespace):
            raise TopicNotFoundError(f"Namespace {name.namespace} does not exist (topic {name})")

    def get_topic_if_loaded(self, name: TopicName) -> PersistentTopic | None:
        return self.topics.get(name.full)

    async def get_topic(self, name: TopicName, create: bool) -> PersistentTopic:
        topic = self.topics.get(name.full)
        if topic is not None:
            return topic
        if self.closed:
            raise NotAllowedError("Broker is shutting down")
        if not name.persistent:
            raise NotAllowedError("Non-persistent topics are not supported yet")
        self.check_namespace(name)
        loading = self._loading.get(name.full)
        if loading is not None:
            return await loading
        exists = name.persistence_path in self.ledger_factory.list_names()
        if not exists:
            base = name.base
            is_partition = base is not name and self.metadata.partitions_of(base.full) > name.partition_index
            if not is_partition and not (create and self.config.allowAutoTopicCreation):
                raise TopicNotFoundError(f"Topic {name} does not exist")
        fut: asyncio.Future[PersistentTopic] = asyncio.get_running_loop().create_future()
        self._loading[name.full] = fut
        try:
            ledger = await self.ledger_factory.open(name.persistence_path, self.ledger_config)
            topic = PersistentTopic(self, name, ledger)
            self.topics[name.full] = topic
            fut.set_result(topic)
            return topic
        except BaseException as exc:
            fut.set_exception(exc)
            fut.exception()  # mark retrieved: waiters re-raise it themselves
            raise
        finally:
            del self._loading[name.full]

    async def partitions_for(self, name: TopicName, auto_create: bool = True) -> int:
        """Partition count for PARTITIONED_METADATA (0 = not partitioned)."""
        if name.partition_index >= 0:
            return 0
        self.check_namespace(name)
        n = self.metadata.partitions_of(name.full)
        if n > 0:
            return n
        cfg = self.config
        if (auto_create and cfg.allowAutoTopicCreation and cfg.allowAutoTopicCreationType == "partitioned"
                and name.persistence_path not in self.ledger_factory.list_names()):
            self.metadata.set_partitions(name.full, cfg.defaultNumPartitions)
            return cfg.defaultNumPartitions
        return 0

    def topics_of_namespace(self, namespace: str, mode: int) -> list[str]:
        """Persistent (mode 0), non-persistent (1) or all (2) topics, including partitions."""
        names: set[str] = set()
        if mode in (0, 2):
            prefix = namespace + "/persistent/"
            for path in self.ledger_factory.list_names():
                if path.startswith(prefix):
                    names.add(f"persistent://{namespace}/{path[len(prefix):]}")
            for base, n in self.metadata.partitioned_topics.items():
                t = TopicName.parse(base)
                if t.namespace == namespace and t.persistent:
                    names.update(t.partition(i).full for i in range(n))
        return sorted(n for n in names if not any(m in n for m in SYSTEM_TOPIC_MARKERS))

    async def delete_topic(self, name: TopicName) -> None:
        topic = self.topics.pop(name.full, None)
        if topic is not None:
            await topic.close()
        if name.persistence_path in self.ledger_factory.list_names():
            await self.ledger_factory.delete(name.persistence_path)

    async def close(self) -> None:
        self.closed = True
        waits: list[Awaitable[None]] = [t.close() for t in self.topics.values()]
        await asyncio.gather(*waits, return_exceptions=True)
        self.topics.clear()
        await self.ledger_factory.close()
