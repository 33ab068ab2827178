"""Offload policies (Pulsar's OffloadPoliciesImpl): a namespace's ``offload_policies``, a topic's ``offloadPolicies``.

Stored and answered as Pulsar's JSON binding has them: a posted object starts from the class's defaults (its
constructor's values), takes the fields given (a null leaves the default, other names are ignored: Pulsar 4.0.7 reads
them so), leaves out the fields that are null, and carries the three computed flags
``s3Driver``, ``gcsDriver``, ``fileSystemDriver`` (its ``is...Driver`` getters). Which drivers are accepted and when a
bucket is required: Pulsar's AdminResource.validateOffloadPolicies (412 with its words).

The namespace's older fields ``offload_threshold``, ``offload_threshold_in_seconds`` (-1: not set) and
``offload_deletion_lag_ms`` (null: not set) are merged into ``offload_policies`` by every offload setter, then
cleared, as NamespacesBase.mergeOffloadThresholdsForCompatibility does.
"""

from __future__ import annotations

from typing import Any

from broker.metadata.policy_values import PolicyError, check_java_int, check_java_long, check_object

MIB = 1024 * 1024
# The drivers Pulsar 4.0.7 accepts (OffloadPoliciesImpl.INTERNAL_SUPPORTED_DRIVER, in its order: its refusal lists
# them so), matched without regard to case.
DRIVER_NAMES = ("S3", "aws-s3", "google-cloud-storage", "filesystem", "azureblob", "aliyun-oss")
READ_PRIORITIES = {"BOOKKEEPER_FIRST": "bookkeeper-first", "TIERED_STORAGE_FIRST": "tiered-storage-first"}

# Each field (in the class's order) -> its kind; DEFAULTS: the constructor's non-null values.
FIELDS: dict[str, str] = {
    "offloadersDirectory": "string", "managedLedgerOffloadDriver": "string",
    "managedLedgerOffloadMaxThreads": "int", "managedLedgerOffloadPrefetchRounds": "int",
    "managedLedgerOffloadThresholdInSeconds": "long", "managedLedgerOffloadThresholdInBytes": "long",
    "managedLedgerOffloadDeletionLagInMillis": "long", "managedLedgerOffloadedReadPriority": "priority",
    "managedLedgerExtraConfigurations": "map",
    "s3ManagedLedgerOffloadRegion": "string", "s3ManagedLedgerOffloadBucket": "string",
    "s3ManagedLedgerOffloadServiceEndpoint": "string", "s3ManagedLedgerOffloadMaxBlockSizeInBytes": "int",
    "s3ManagedLedgerOffloadReadBufferSizeInBytes": "int", "s3ManagedLedgerOffloadCredentialId": "string",
    "s3ManagedLedgerOffloadCredentialSecret": "string", "s3ManagedLedgerOffloadRole": "string",
    "s3ManagedLedgerOffloadRoleSessionName": "string",
    "gcsManagedLedgerOffloadRegion": "string", "gcsManagedLedgerOffloadBucket": "string",
    "gcsManagedLedgerOffloadMaxBlockSizeInBytes": "int", "gcsManagedLedgerOffloadReadBufferSizeInBytes": "int",
    "gcsManagedLedgerOffloadServiceAccountKeyFile": "string",
    "fileSystemProfilePath": "string", "fileSystemURI": "string",
    "managedLedgerOffloadBucket": "string", "managedLedgerOffloadRegion": "string",
    "managedLedgerOffloadServiceEndpoint": "string", "managedLedgerOffloadMaxBlockSizeInBytes": "int",
    "managedLedgerOffloadReadBufferSizeInBytes": "int",
}
DEFAULTS: dict[str, Any] = {
    "offloadersDirectory": "./offloaders", "managedLedgerOffloadMaxThreads": 2,
    "managedLedgerOffloadPrefetchRounds": 1, "managedLedgerExtraConfigurations": {},
    "s3ManagedLedgerOffloadMaxBlockSizeInBytes": 64 * MIB, "s3ManagedLedgerOffloadReadBufferSizeInBytes": MIB,
    "s3ManagedLedgerOffloadRoleSessionName": "pulsar-s3-offload",
    "gcsManagedLedgerOffloadMaxBlockSizeInBytes": 128 * MIB, "gcsManagedLedgerOffloadReadBufferSizeInBytes": MIB,
}
FLAGS = ("s3Driver", "gcsDriver", "fileSystemDriver")

THRESHOLD_BYTES = "managedLedgerOffloadThresholdInBytes"
THRESHOLD_SECONDS = "managedLedgerOffloadThresholdInSeconds"
DELETION_LAG = "managedLedgerOffloadDeletionLagInMillis"
READ_PRIORITY = "managedLedgerOffloadedReadPriority"
# The namespace's older fields (Policies) and what "not set" is for each.
OLD_THRESHOLD_BYTES, OLD_THRESHOLD_SECONDS, OLD_DELETION_LAG = (
    "offload_threshold", "offload_threshold_in_seconds", "offload_deletion_lag_ms")
NAMESPACE_FIELD = "offload_policies"


def _value(key: str, kind: str, value: Any) -> Any:
    what = f"{NAMESPACE_FIELD}.{key}"
    if value is None:
        return None
    if kind == "int":
        return check_java_int(value, what)
    if kind == "long":
        return check_java_long(value, what)
    if kind == "map":
        doc = check_object(value, what)
        if not all(isinstance(v, str) for v in doc.values()):
            raise PolicyError(400, f"{what} must map names to strings")
        return dict(doc)
    if kind == "priority":
        if value in READ_PRIORITIES:
            return value
        for name, words in READ_PRIORITIES.items():
            if value == words:
                return name
        raise PolicyError(400, f"{what} must be one of {', '.join(READ_PRIORITIES)}, got {value!r}")
    if not isinstance(value, str):
        raise PolicyError(400, f"{what} must be a string, got {value!r}")
    return value


def parse(body: Any) -> dict[str, Any]:
    """A posted OffloadPoliciesImpl as Pulsar reads and writes it back (see the module docstring); 400 for a value
    its binding would refuse."""
    doc = check_object(body, NAMESPACE_FIELD)
    fields = dict(DEFAULTS)
    for key, kind in FIELDS.items():
        if doc.get(key) is not None:  # (a null leaves the default: Pulsar 4.0.7 answers so)
            fields[key] = _value(key, kind, doc[key])
    return view(fields)


def view(fields: dict[str, Any]) -> dict[str, Any]:
    """The JSON of stored policies: the fields that are set, then the computed driver flags."""
    out = {k: fields[k] for k in FIELDS if fields.get(k) is not None}
    driver = (fields.get("managedLedgerOffloadDriver") or "").lower()
    out["s3Driver"] = driver in ("s3", "aws-s3")
    out["gcsDriver"] = driver == "google-cloud-storage"
    out["fileSystemDriver"] = driver == "filesystem"
    return out


def validate(policies: dict[str, Any]) -> None:
    """AdminResource.validateOffloadPolicies: a supported driver, and a bucket where the driver needs one (412)."""
    driver = policies.get("managedLedgerOffloadDriver")
    if driver is None or driver.lower() not in {d.lower() for d in DRIVER_NAMES}:
        raise PolicyError(412, f"The driver is not supported, support value: {','.join(DRIVER_NAMES)}")
    if policies.get("managedLedgerOffloadBucket") or policies["fileSystemDriver"]:
        return
    if policies["s3Driver"] and policies.get("s3ManagedLedgerOffloadBucket"):
        return
    if policies["gcsDriver"] and policies.get("gcsManagedLedgerOffloadBucket"):
        return
    raise PolicyError(412, "The bucket must be specified for namespace offload.")


def merge_old_fields(policies: dict[str, Any]) -> None:
    """Move a namespace's older offload fields into its ``offload_policies`` (where those are not set), then clear
    them (Pulsar's mergeOffloadThresholdsForCompatibility); ``offload_policies`` must be there."""
    old_lag = policies.get(OLD_DELETION_LAG)
    old_bytes = policies.get(OLD_THRESHOLD_BYTES, -1)
    old_seconds = policies.get(OLD_THRESHOLD_SECONDS, -1)
    if old_lag is None and old_bytes == -1 and old_seconds == -1:
        return
    offload = dict(policies[NAMESPACE_FIELD])
    for key, old, unset in ((DELETION_LAG, old_lag, None), (THRESHOLD_BYTES, old_bytes, -1),
                            (THRESHOLD_SECONDS, old_seconds, -1)):
        if offload.get(key) is None and old != unset:
            offload[key] = old
    policies[NAMESPACE_FIELD] = view(offload)
    policies.pop(OLD_DELETION_LAG, None)
    policies[OLD_THRESHOLD_BYTES] = policies[OLD_THRESHOLD_SECONDS] = -1


def applied(topic: dict[str, Any] | None, namespace: dict[str, Any] | None,
            broker: dict[str, Any]) -> dict[str, Any] | None:
    """The offload policies in force for a topic, field by field: the topic's, else the namespace's, else the broker's
    (``broker``: the fields its configuration sets), else the class's default (Pulsar's
    OffloadPoliciesImpl.mergeConfiguration); None when no level sets any field (as Pulsar answers then)."""
    if topic is None and namespace is None and not broker:
        return None
    merged = dict(DEFAULTS)
    for level in (broker, namespace, topic):
        merged.update({k: v for k, v in (level or {}).items() if k in FIELDS and v is not None})
    return view(merged)
