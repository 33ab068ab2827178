"""Namespace bundles, for the cluster floor: the values (defined with the metadata that stores them,
``broker.metadata.bundles``, so that ``BrokerMetadata`` can return them without importing this
package) and, in ``broker.cluster.split``, the split algorithms and the automatic split.

- ``hash_topic(full_name)``: Pulsar's bundle hash (CRC-32 of the UTF-8 full topic name,
  partition suffix included);
- ``NamespaceBundle(namespace, lower, upper)``: ``range_name``, ``contains(h)``, ``parse``;
- ``NamespaceBundles(namespace, boundaries)``: ``bundles``, ``find(full_topic_name)``,
  ``get(range_name)``, ``from_bundles_data`` / ``to_bundles_data`` (Pulsar's BundlesData JSON);
- ``BrokerMetadata.namespace_bundles(ns)`` and ``await BrokerMetadata.split_bundle(ns, bundle,
  split_points)`` (``broker.metadata.store``) read and change a namespace's bundles.
"""

from broker.metadata.bundles import (
    DEFAULT_NUMBER_OF_BUNDLES,
    FULL_LOWER,
    FULL_UPPER,
    BundleError,
    NamespaceBundle,
    NamespaceBundles,
    format_boundary,
    hash_topic,
    parse_boundary,
)

__all__ = ["DEFAULT_NUMBER_OF_BUNDLES", "FULL_LOWER", "FULL_UPPER", "BundleError", "NamespaceBundle",
           "NamespaceBundles", "format_boundary", "hash_topic", "parse_boundary"]
