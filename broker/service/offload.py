"""A topic's offload runs, as Pulsar's PersistentTopic.triggerOffload / offloadStatus keep them: one at a time, and
the last one's outcome (NOT_RUN until one was asked for; kept in memory only, so NOT_RUN again after the topic
loads anew). A run copies the closed ledgers before a position's ledger to the topic's offloader (the managed
ledger's ``offload_prefix``). Without an offloader (Pulsar's NullLedgerOffloader) a run fails at once with Pulsar's
words. An error's words name Pulsar's exception class, as its status does.

``offloader_of``: the offloader the broker's configuration names (``managedLedgerOffloadDriver``...);
``OffloadTiers``: those of topics and namespaces whose offload policies name other settings; ``offload_policy_for``:
a topic's policies in force, merged as Pulsar merges them.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import AsyncIterator, Coroutine, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse
from xml.etree import ElementTree

from broker.config import is_secret
from broker.metadata import offload_policies as O
from broker.version import __version__
from managed_ledger.api import (
    InvalidPositionError,
    ManagedLedger,
    NoOffloaderError,
    OffloadInProgressError,
    OffloadPolicy,
    OffloadTier,
    StoredLedger,
)
from managed_ledger.offload import azure, gcs, s3
from managed_ledger.offload.api import Offloader, StoredObject
from managed_ledger.offload.blobstore import CLUSTER_KEY, SOFTWARE_VERSION_KEY, OffloadConfigError
from managed_ledger.offload.filesystem import DRIVER_NAME, FileSystemOffloader
from managed_ledger.offload.mapfile import DEFAULT_BLOCK_SIZE, INDEX_INTERVAL, Compression
from managed_ledger.offload.tiered import TieredLedger
from managed_ledger.position import Position

if TYPE_CHECKING:
    from broker.config import BrokerConfig
    from broker.service.broker_service import BrokerService
    from broker.service.topic import PersistentTopic
    from broker.topic_name import TopicName

log = logging.getLogger(__name__)
TOPIC_POLICIES_FIELD = "offloadPolicies"  # (TopicPolicies' field)

# ManagedLedgerImpl.asyncOffloadPrefix's refusal without an offloader, as the status's lastError carries it (the
# Java exception's class and message).
ML_EXCEPTION = "org.apache.bookkeeper.mledger.ManagedLedgerException"
NO_OFFLOADER = f"{ML_EXCEPTION}: [NullLedgerOffloader] does not support offload"


class OffloadStatus(enum.Enum):
    NOT_RUN = "NOT_RUN"
    RUNNING = "RUNNING"
    SUCCESS = "SUCCESS"
    ERROR = "ERROR"


class OffloadProcess:
    __slots__ = ("_task", "first_unoffloaded", "last_error", "status")

    def __init__(self) -> None:
        self.status = OffloadStatus.NOT_RUN
        self.last_error = ""
        self.first_unoffloaded: Position | None = None  # (after a SUCCESS)
        self._task: asyncio.Task[None] | None = None

    def trigger(self, ledger: ManagedLedger, up_to: Position) -> bool:
        """Offload the closed ledgers before ``up_to``'s; False while a run is under way (Pulsar: 409)."""
        if self.status is OffloadStatus.RUNNING:
            return False
        offload = getattr(ledger, "offload_prefix", None)
        if offload is None:  # (memory storage, which takes no offloader)
            self._failed(NO_OFFLOADER)
            return True
        self.status, self.last_error, self.first_unoffloaded = OffloadStatus.RUNNING, "", None
        self._task = asyncio.get_running_loop().create_task(self._run(offload(up_to)))
        return True

    async def _run(self, run: Coroutine[Any, Any, Position]) -> None:
        try:
            first = await run
        except NoOffloaderError:
            self._failed(NO_OFFLOADER)
        except InvalidPositionError as exc:
            self._failed(f"{ML_EXCEPTION}$InvalidCursorPositionException: {exc}")
        except OffloadInProgressError as exc:
            self._failed(f"{ML_EXCEPTION}$OffloadInProgressException: {exc}")
        except asyncio.CancelledError:
            self._failed(f"{ML_EXCEPTION}: the offload was stopped (the topic closed)")
            raise
        except Exception as exc:  # (a failed copy: the disk, the offloader's store)
            log.warning("offload failed: %s", exc)
            self._failed(f"{ML_EXCEPTION}: {exc}")
        else:
            self.status, self.first_unoffloaded = OffloadStatus.SUCCESS, first

    def _failed(self, error: str) -> None:
        self.status, self.last_error, self.first_unoffloaded = OffloadStatus.ERROR, error, None

    async def close(self) -> None:
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    def to_json(self) -> dict[str, Any]:
        """OffloadProcessStatusImpl's JSON: the first message not offloaded is MessageId.earliest (all -1) unless
        the last run succeeded (then its ledger's first entry; Pulsar leaves the partition out: -1)."""
        first = self.first_unoffloaded
        ledger_id, entry_id = (first.ledger_id, first.entry_id) if first is not None else (-1, -1)
        return {"status": self.status.value, "lastError": self.last_error,
                "firstUnoffloadedMessage": {"ledgerId": ledger_id, "entryId": entry_id, "partitionIndex": -1,
                                            "batchSize": 0, "batchIndex": -1}}


# The settings an offloader is made of (Pulsar's OffloadPoliciesImpl fields its drivers read): the broker's keys, or
# merged from a topic's and its namespace's offload policies over them.
OFFLOADER_KEYS = (
    "managedLedgerOffloadDriver", "fileSystemURI", "fileSystemProfilePath",
    "s3ManagedLedgerOffloadBucket", "s3ManagedLedgerOffloadRegion", "s3ManagedLedgerOffloadServiceEndpoint",
    "s3ManagedLedgerOffloadMaxBlockSizeInBytes", "s3ManagedLedgerOffloadReadBufferSizeInBytes",
    "s3ManagedLedgerOffloadCredentialId", "s3ManagedLedgerOffloadCredentialSecret", "s3ManagedLedgerOffloadRole",
    "gcsManagedLedgerOffloadBucket", "gcsManagedLedgerOffloadRegion", "gcsManagedLedgerOffloadMaxBlockSizeInBytes",
    "gcsManagedLedgerOffloadReadBufferSizeInBytes", "gcsManagedLedgerOffloadServiceAccountKeyFile",
    "managedLedgerOffloadBucket", "managedLedgerOffloadRegion", "managedLedgerOffloadServiceEndpoint",
    "managedLedgerOffloadMaxBlockSizeInBytes", "managedLedgerOffloadReadBufferSizeInBytes",
)


# The offload policies' fields the broker's configuration sets under another name (OffloadPoliciesImpl's
# getCompatibleValue), and the read priority's names in the configuration -> in the policies.
CONFIGURATION_NAMES = {O.THRESHOLD_BYTES: "managedLedgerOffloadAutoTriggerSizeThresholdBytes",
                       O.DELETION_LAG: "managedLedgerOffloadDeletionLagMs",
                       O.READ_PRIORITY: "managedLedgerDataReadPriority"}
PRIORITY_NAMES = {v: k for k, v in O.READ_PRIORITIES.items()}


def broker_offload_fields(config: BrokerConfig) -> dict[str, Any]:
    """The offload policies' fields the broker's configuration sets (in its file, or not at their default), as
    Pulsar's mergeConfiguration takes them from the broker's properties; but its secrets (a credential), which Pulsar
    shows too, are left out: an admin of a topic need not see the broker's keys."""
    out: dict[str, Any] = {}
    for field in O.FIELDS:
        key = CONFIGURATION_NAMES.get(field, field)
        if hasattr(config, key) and not is_secret(key) and config.is_set(key):
            value = getattr(config, key)
            out[field] = PRIORITY_NAMES[value] if field == O.READ_PRIORITY else value
    return out


def offloader_of(config: BrokerConfig, data_dir: Path | None) -> Offloader | None:
    """The offloader the configuration names (None: none). Raises ValueError for one that cannot be used here."""
    return offloader_from({key: getattr(config, key) for key in OFFLOADER_KEYS}, config, data_dir)


def offloader_from(settings: Mapping[str, Any], config: BrokerConfig, data_dir: Path | None) -> Offloader | None:
    """The offloader ``settings`` (OFFLOADER_KEYS) name, for a broker of ``config`` (None: no driver). Raises
    ValueError for one that cannot be used here."""
    driver = settings.get("managedLedgerOffloadDriver") or ""
    if not driver:
        return None
    if config.managedLedgerStorage == "memory":
        raise ValueError(f"managedLedgerOffloadDriver={driver} needs managedLedgerStorage=file or bookkeeper")
    if driver.lower() in (azure.DRIVER, gcs.DRIVER):
        return _other_blob_offloader(driver.lower(), settings, config.clusterName)
    if driver.lower() != DRIVER_NAME:
        return _s3_offloader(driver, settings, config.clusterName)
    uri_text, profile_path = settings.get("fileSystemURI") or "", settings.get("fileSystemProfilePath") or ""
    if uri_text and urlparse(uri_text).scheme != "file":
        raise ValueError(f"fileSystemURI={uri_text!r}: only local files (file:///) are supported")
    profile = _hadoop_profile(profile_path) if profile_path else {}
    if "hadoop.tmp.dir" in profile:
        base = Path(profile["hadoop.tmp.dir"])
    elif data_dir is not None:
        base = data_dir / "offloaded"
    else:
        raise ValueError(f"managedLedgerOffloadDriver={driver}: no base directory (fileSystemProfilePath's "
                         "hadoop.tmp.dir, or a dataDir)")
    try:
        compression = Compression(profile.get("io.seqfile.compression.type", "BLOCK" if not profile else "RECORD"))
        block_size = int(profile.get("io.seqfile.compress.blocksize", DEFAULT_BLOCK_SIZE))
        index_interval = int(profile.get("io.map.index.interval", INDEX_INTERVAL))
    except ValueError as exc:
        raise ValueError(f"fileSystemProfilePath={profile_path}: {exc}") from None
    if block_size <= 0 or index_interval <= 0:
        raise ValueError(f"fileSystemProfilePath={profile_path}: sizes must be positive")
    return FileSystemOffloader(base.absolute(), compression, block_size, index_interval)


def _s3_offloader(driver: str, settings: Mapping[str, Any], cluster: str) -> Offloader:
    """An S3 driver's offloader, with the broker's version and cluster on each object, as Pulsar's."""
    try:
        resolved = s3.s3_settings(driver, settings)
    except OffloadConfigError as exc:
        raise ValueError(f"managedLedgerOffloadDriver={driver}: {exc}") from None
    return s3.s3_offloader(resolved, {SOFTWARE_VERSION_KEY: __version__, CLUSTER_KEY: cluster})


def _other_blob_offloader(driver: str, settings: Mapping[str, Any], cluster: str) -> Offloader:
    """An azureblob or google-cloud-storage offloader, with the broker's version and cluster on each object."""
    metadata = {SOFTWARE_VERSION_KEY: __version__, CLUSTER_KEY: cluster}
    try:
        if driver == azure.DRIVER:
            return azure.azure_offloader(azure.azure_settings(settings), metadata)
        return gcs.gcs_offloader(gcs.gcs_settings(settings), metadata)
    except OffloadConfigError as exc:
        raise ValueError(f"managedLedgerOffloadDriver={driver}: {exc}") from None


class OffloadTiers:
    """The offloaders of topics and namespaces whose offload policies name other driver settings than the broker's
    (Pulsar's BrokerService.getManagedLedgerConfig: an offloader made from the merged policies, kept per namespace),
    one per distinct set of settings."""

    def __init__(self, config: BrokerConfig, data_dir: Path | None) -> None:
        self._config = config
        self._data_dir = data_dir
        self._broker = {key: getattr(config, key) for key in OFFLOADER_KEYS}
        self._made: dict[tuple[tuple[str, str], ...], OffloadTier] = {}

    def of(self, topic: dict[str, Any] | None, namespace: dict[str, Any] | None) -> OffloadTier | None:
        """The tier of a topic with these offload policies (its own, its namespace's; None: not set); None when the
        merged settings are the broker's (its offloader)."""
        if topic is None and namespace is None:
            return None
        settings = dict(self._broker)
        for policies in (namespace, topic):  # (the topic's win)
            if policies is not None:
                settings.update((k, policies[k]) for k in OFFLOADER_KEYS if policies.get(k) is not None)
        if settings == self._broker:
            return None
        key = tuple((k, str(settings[k])) for k in OFFLOADER_KEYS)
        tier = self._made.get(key)
        if tier is None:
            try:
                offloader = offloader_from(settings, self._config, self._data_dir)
            except ValueError as exc:
                log.error("offload policies naming %s: no offloader (offloads fail as with none configured): %s",
                          settings.get("managedLedgerOffloadDriver"), exc)
                offloader = None
            tier = self._made[key] = OffloadTier(key, offloader)
        return tier


def _hadoop_profile(path: str) -> dict[str, str]:
    """A Hadoop configuration file's properties (<configuration><property><name/><value/></property>...)."""
    try:
        root = ElementTree.parse(path).getroot()
    except (OSError, ElementTree.ParseError) as exc:
        raise ValueError(f"fileSystemProfilePath={path}: {exc}") from None
    out = {}
    for prop in root.iter("property"):
        name, value = prop.findtext("name"), prop.findtext("value")
        if name is not None and value is not None:
            out[name.strip()] = value.strip()
    return out


def offload_policy_for(service: BrokerService, name: TopicName) -> OffloadPolicy:
    """The offload policies in force for a topic (Pulsar's BrokerService.getManagedLedgerConfig merges them:
    OffloadPoliciesImpl.mergeConfiguration, topic > namespace (with its older fields) > the broker's settings), with
    the offloader they name when it is not the broker's."""
    cfg = service.config
    metadata = service.metadata
    topic = global_ = None
    if cfg.topicLevelPoliciesEnabled:
        topic = metadata.topic_policy(name.base.full, TOPIC_POLICIES_FIELD)
        global_ = metadata.topic_policy(name.base.full, TOPIC_POLICIES_FIELD, is_global=True)
    namespace = metadata.policy(name.namespace, O.NAMESPACE_FIELD)

    def set_level(field: str) -> Any | None:
        """The field of the topic's offload policies (its local ones, else its global ones), else of its
        namespace's (None: none sets it)."""
        for level in (topic, global_, namespace):
            if level is not None and level.get(field) is not None:
                return level[field]
        return None

    def in_force(field: str, old: str, unset: int | None, broker: int) -> int:
        """One policy: the offload policies' (set_level), else the namespace's older field where set, else the
        broker's setting."""
        value = set_level(field)
        if value is not None:
            return int(value)
        value = metadata.policy(name.namespace, old)
        return int(value) if value is not None and value != unset else broker

    priority = set_level(O.READ_PRIORITY)
    tiered_first = (priority == "TIERED_STORAGE_FIRST" if priority is not None
                    else cfg.managedLedgerDataReadPriority == "tiered-storage-first")
    return OffloadPolicy(
        in_force(O.THRESHOLD_BYTES, O.OLD_THRESHOLD_BYTES, -1, cfg.managedLedgerOffloadAutoTriggerSizeThresholdBytes),
        in_force(O.THRESHOLD_SECONDS, O.OLD_THRESHOLD_SECONDS, -1, cfg.managedLedgerOffloadThresholdInSeconds),
        in_force(O.DELETION_LAG, O.OLD_DELETION_LAG, None, cfg.managedLedgerOffloadDeletionLagMs) / 1000,
        tiered_first, cfg.triggerOffloadOnTopicLoad, service.offload_tiers.of(topic, namespace))


# A scanned object's status (Pulsar's OffloaderObjectsScannerUtils): whether the managed ledger its metadata names
# still has that ledger, offloaded, with that copy.
SCAN_OK, SCAN_UNKNOWN, SCAN_NOT_FOUND = "OK", "UNKNOWN", "NOT-FOUND"
SCAN_NOT_OFFLOADED, SCAN_BAD_UUID = "NOT-OFFLOADED", "BAD-UUID"


def namespace_offloader(service: BrokerService, namespace: str) -> Offloader | None:
    """The offloader of a namespace's topics without policies of their own (Pulsar's getManagedLedgerOffloader for
    the namespace's policies): its offload policies', else the broker's."""
    tier = service.offload_tiers.of(None, service.metadata.policy(namespace, O.NAMESPACE_FIELD))
    return tier.offloader if tier is not None else service.ledger_factory.offloader


async def scan_offloaded(service: BrokerService, offloader: Offloader) -> AsyncIterator[dict[str, Any]]:
    """Each object of the offloader's tier (Pulsar's scanOffloadedLedgers: the whole bucket, whichever namespace),
    with its status: OK when the managed ledger it belongs to (its metadata's, when written by this cluster; a
    filesystem copy's directory) has the ledger, offloaded, with this copy's uuid; NOT-FOUND, NOT-OFFLOADED,
    BAD-UUID otherwise; UNKNOWN when the object says nothing of whose it is. The store is listed off the loop, a
    page at a time."""
    loop = asyncio.get_running_loop()
    objects = offloader.scan()
    done = object()
    cluster = service.config.clusterName
    ledgers: dict[str, dict[int, StoredLedger] | None] = {}
    while (found := await loop.run_in_executor(None, next, objects, done)) is not done:
        assert isinstance(found, StoredObject)
        info: dict[str, Any] = {"ledger": found.ledger_id if found.ledger_id is not None else -1,
                                "name": found.name, "uri": found.uri, "uuid": found.uuid, "size": found.size,
                                "lastModified": found.last_modified_ms, "userMetadata": dict(found.user_metadata)}
        metadata = {k.lower(): v for k, v in found.user_metadata.items()}
        managed_ledger = found.managed_ledger
        if managed_ledger is None and metadata.get(CLUSTER_KEY) == cluster:
            managed_ledger = metadata.get("managedledgername")
        status = SCAN_UNKNOWN
        if managed_ledger is not None:
            info["managedLedgerName"] = managed_ledger
            if managed_ledger not in ledgers:
                ledgers[managed_ledger] = await service.ledger_factory.stored_ledgers(managed_ledger)
            status = _scanned_status(found, ledgers[managed_ledger], info)
        info["status"] = status
        yield info


def _scanned_status(found: StoredObject, ledgers: dict[int, StoredLedger] | None, info: dict[str, Any]) -> str:
    ledger = ledgers.get(found.ledger_id) if ledgers is not None and found.ledger_id is not None else None
    if ledger is None:
        return SCAN_NOT_FOUND
    if ledger.entries is not None:
        info["numEntries"] = ledger.entries
    info["offloaded"] = ledger.offloaded
    if not ledger.offloaded:
        return SCAN_NOT_OFFLOADED
    return SCAN_OK if ledger.offload_uuid == found.uuid else SCAN_BAD_UUID


async def offload_housekeeping(topic: PersistentTopic) -> None:
    """With retention: the copies open for reads and idle long enough closed, the topic's automatic offload (the
    thresholds in force), then the local copies of its offloaded ledgers whose deletion lag has passed, deleted
    (nothing for a storage that cannot offload)."""
    ledger = topic.ledger
    if isinstance(ledger, TieredLedger):
        ledger.release_idle_copies()
        await ledger.offload_by_policy()
        await ledger.delete_offloaded_locals(ledger.config.offload.deletion_lag_s)
