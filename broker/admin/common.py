"""What every admin resource shares: JSON errors with Pulsar's statuses, body parsing, names.

Errors are JSON ``{"reason": ...}`` with the status Pulsar's admin API uses: 404 missing tenant,
namespace, topic or subscription; 409 already exists / conflict; 412 precondition (bad name,
value out of range, busy); 400 malformed body; 405 operation not allowed on this kind of topic;
401 missing or refused credentials; a role without permission 401 or 403 as the Pulsar check guarding the
endpoint answers (see broker.auth.http and broker.auth.refusals).
"""

from __future__ import annotations

import json
import logging
import math
import re
from collections.abc import Awaitable, Callable
from typing import TypeVar

from aiohttp import web

from broker.auth.refusals import RefusedError
from broker.errors import (
    AuthenticationError,
    AuthorizationError,
    BrokerError,
    ConsumerBusyError,
    ConsumerNotFoundError,
    IncompatibleSchemaError,
    InvalidTopicNameError,
    MetadataError,
    NotAllowedError,
    PersistenceError,
    ProducerBusyError,
    ServiceNotReadyError,
    SubscriptionNotFoundError,
    TooManySubscriptionsError,
    TopicNotFoundError,
)
from broker.metadata.policies import PolicyError
from broker.metadata.store import (
    AlreadyExistsError,
    ConflictError,
    InUseError,
    InvalidError,
    MetadataStoreError,
    NotFoundError,
)
from broker.service.admin_ops import EntryNotFoundError, SubscriptionBusyError, SubscriptionExistsError
from broker.topic_name import TopicName, blank, decode_local_name
from metadata_store.api import MetadataStoreError as StoreUnavailableError
from metadata_store.api import StoreWriteError

log = logging.getLogger(__name__)
T = TypeVar("T")
DOMAINS = ("persistent", "non-persistent")
NO_CONTENT = 204


class HttpError(web.HTTPException):
    def __init__(self, status: int, reason: str) -> None:
        self.status_code = status
        super().__init__(text=json.dumps({"reason": reason}), content_type="application/json")


def json_response(data: object, status: int = 200) -> web.Response:
    return web.json_response(data, status=status)


def no_content() -> web.Response:
    return web.Response(status=NO_CONTENT)


def resumed_empty() -> web.Response:
    """What Pulsar answers where its asynchronous resource method resumes with null (``AsyncResponse.resume(null)``):
    200, no body, no content type (its synchronous ones return 204: no_content). Measured on a Pulsar 4.0.7
    standalone, per endpoint (tests/admin/test_pulsar_shapes.py)."""
    return web.Response(status=200)


def unset_value() -> web.Response:
    """A GET of a value that is not set, where Pulsar's method is asynchronous (resumed_empty)."""
    return resumed_empty()


# How deep a request body's arrays and objects may nest. Pulsar's deepest bodies (Policies with its auth_policies,
# a schema's properties) nest 3 or 4 levels; Jackson stops at 1000. Ours must stay far below Python's recursion
# limit (1000 frames), which json.loads and every later walk of the value (copy.deepcopy, json.dumps) spend a
# frame or more per level of: past it they raise RecursionError, a 500 for what is a client's bad body.
MAX_BODY_NESTING = 64


async def read_body(request: web.Request) -> object:
    """The JSON body, or None when there is none (the size is bounded by aiohttp's client_max_size, 1 MiB: 413)."""
    raw = await request.read()
    if not raw.strip():
        return None
    try:
        body = json.loads(raw, parse_constant=_refuse_constant, parse_float=_finite_float)
    except _NotFiniteError as exc:
        raise HttpError(400, f"Request body has a number JSON cannot carry: {exc}") from None
    except ValueError:
        raise HttpError(400, "Request body is not valid JSON") from None
    except RecursionError:  # (nested deeper than the decoder's recursion limit)
        raise HttpError(400, f"Request body nests deeper than {MAX_BODY_NESTING} levels") from None
    # (a body with fewer brackets than the limit cannot nest past it: the walk is for the rare others)
    if raw.count(b"[") + raw.count(b"{") > MAX_BODY_NESTING and _nesting_exceeds(body, MAX_BODY_NESTING):
        raise HttpError(400, f"Request body nests deeper than {MAX_BODY_NESTING} levels")
    if b"\\u" in raw:  # (an escape may spell a lone surrogate, which nothing can store or send on)
        try:
            json.dumps(body, ensure_ascii=False).encode()
        except UnicodeEncodeError:
            raise HttpError(400, "Request body has a string that is not valid Unicode (a lone surrogate)") from None
    return body


class _NotFiniteError(ValueError):
    """NaN, Infinity or a number too large for a double: Python's json reads them, JSON has none (and Pulsar's
    Jackson refuses the first two). Stored, they would be written back as bare NaN / Infinity, which no JSON
    reader (pulsar-admin's included) accepts: the namespace's policies could no longer be read."""


def _refuse_constant(name: str) -> object:
    raise _NotFiniteError(name)


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _NotFiniteError(f"{text} is out of range")
    return value


def _nesting_exceeds(value: object, limit: int) -> bool:
    """Whether arrays and objects in ``value`` nest more than ``limit`` levels (iterative: no recursion)."""
    stack: list[tuple[object, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        if children is None:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return False


def query_flag(request: web.Request, name: str, default: bool = False) -> bool:
    value = request.query.get(name)
    return default if value is None else value.lower() == "true"


def is_global(request: web.Request) -> bool:
    """A topic-policy call's ``isGlobal`` (pulsar-admin's ``topic-policies ... -g``): the topic's global policies
    rather than its local ones."""
    return query_flag(request, "isGlobal")


def int_param(value: str, what: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise HttpError(400, f"{what} must be an integer, got {value!r}") from None


# Pulsar's NamedEntity rule for tenant, namespace and cluster names (Java's \w: ASCII letters, digits, _), as its
# admin API checks every tenant and namespace named in a path (a name it refuses is a 412, before any look-up).
_PULSAR_NAMED = re.compile(r"[-=:.\w]+", re.ASCII)
# A new tenant, namespace or cluster: ours also refuses ':' (it separates names in our store's paths) and a leading '.'.
_NAMED = re.compile(r"[-=.\w]+", re.ASCII)
# Pulsar's reasons (RestException with PRECONDITION_FAILED) for a name its NamedEntity / TopicName parsing refuses.
TENANT_NAME_NOT_VALID = "Tenant name is not valid"
NAMESPACE_NAME_NOT_VALID = "Namespace name is not valid"
TOPIC_NAME_NOT_VALID = "Topic name is not valid"


def pulsar_name_ok(name: str) -> bool:
    """Whether Pulsar's NamedEntity.checkName takes ``name`` (a tenant's or a namespace's)."""
    return _PULSAR_NAMED.fullmatch(name) is not None


def check_namespace_name(tenant: str, namespace: str) -> None:
    """Pulsar's validateNamespaceName: 412 "Namespace name is not valid" for a tenant or namespace it refuses."""
    if not (pulsar_name_ok(tenant) and pulsar_name_ok(namespace)):
        raise HttpError(412, NAMESPACE_NAME_NOT_VALID)


def parse_topic_name(domain: str, tenant: str, namespace: str, local: str) -> TopicName:
    """A topic named in a path (Pulsar's validateTopicName): 412 "Topic name is not valid" for a tenant or namespace
    Pulsar refuses; a local name only ours refuses (TopicName.parse) is a 412 with our reason."""
    if not (pulsar_name_ok(tenant) and pulsar_name_ok(namespace)) or blank(local):
        raise HttpError(412, TOPIC_NAME_NOT_VALID)
    return TopicName.parse(f"{domain}://{tenant}/{namespace}/{local}")


def check_name(name: str, what: str) -> None:
    """A name for a new tenant, namespace or cluster: 412 with Pulsar's reason ("Tenant name is not valid"...)."""
    if not _NAMED.fullmatch(name) or name.startswith("."):
        raise HttpError(412, f"{what.capitalize()} name is not valid")


# Broker errors -> HTTP status, as Pulsar's admin API answers them (most specific first);
# anything else is a bad request.
_STATUS: tuple[tuple[type[BrokerError] | tuple[type[BrokerError], ...], int], ...] = (
    (AuthenticationError, 401),
    (AuthorizationError, 403),
    (InvalidTopicNameError, 412),
    ((SubscriptionBusyError, TooManySubscriptionsError), 412),
    (SubscriptionExistsError, 409),
    ((TopicNotFoundError, SubscriptionNotFoundError, ConsumerNotFoundError, EntryNotFoundError), 404),
    ((ProducerBusyError, ConsumerBusyError, IncompatibleSchemaError), 409),
    (NotAllowedError, 405),
    ((ServiceNotReadyError, MetadataError), 503),  # (MetadataError: the metadata store failed a lookup)
    (PersistenceError, 500),  # (storage cannot write: a full disk)
)


def status_for(exc: BrokerError) -> int:
    if isinstance(exc, RefusedError):  # (a role refused by the check Pulsar makes there: its 401 or 403)
        return exc.status
    return next((status for kinds, status in _STATUS if isinstance(exc, kinds)), 400)


# Refused metadata changes -> HTTP status (a handler answers otherwise where Pulsar does).
_METADATA_STATUS: tuple[tuple[type[MetadataStoreError], int], ...] = (
    (NotFoundError, 404),
    (AlreadyExistsError, 409),
    (InUseError, 409),
    (ConflictError, 409),
    (InvalidError, 412),
)


def metadata_status(exc: MetadataStoreError) -> int:
    return next((status for kind, status in _METADATA_STATUS if isinstance(exc, kind)), 400)


def raw_path_params(request: web.Request) -> dict[str, str] | None:
    """The path parameters of the request's route as the client sent them (still percent-encoded), or None (no
    parameters, or the path as sent does not match the route: a literal part sent encoded). aiohttp's match_info
    holds them decoded, ``+`` kept; the raw path has the same segments (the route was matched on ``path_safe``,
    which keeps ``%2F`` encoded)."""
    resource = request.match_info.route.resource
    pattern = resource.get_info().get("pattern") if resource is not None else None
    found = pattern.fullmatch(request.rel_url.raw_path) if pattern is not None else None
    return found.groupdict() if found is not None else None


# The routes whose subscription ({sub}) Pulsar decodes twice: PersistentTopics (NonPersistentTopics inherits them)
# takes subName/subscriptionName without @Encoded, so JAX-RS decodes it, and then each resource method decodes it
# again with Codec.decode (deleteSubscription, createSubscription, skipAllMessages, skipMessages,
# expireTopicMessages, resetCursor, resetCursorOnPosition, get/updateSubscriptionProperties,
# analyzeSubscriptionBacklog, peekNthMessage, get/setReplicatedSubscriptionStatus). Its Java admin client encodes
# the name twice to match (TopicsImpl: Codec.encode, then the path segment's percent-encoding).
_SUB_DECODED_TWICE = re.compile(r"/admin/v2/(non-)?persistent/\{tenant\}/\{ns\}/\{topic\}/subscription/\{sub\}(/.*)?")
# .../{topic}/{sub}/dispatchRate (get/set/removeSubscriptionLevelDispatchRate): subName @Encoded, decoded once by
# Codec.decode, as the topic is: "+" a space.
_SUB_ENCODED = re.compile(r"/admin/v2/(non-)?persistent/\{tenant\}/\{ns\}/\{topic\}/\{sub\}/dispatchRate")


@web.middleware
async def pulsar_topic_in_path(request: web.Request,
                               handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> web.StreamResponse:
    """A topic's local name in a path (``{topic}``) read as Pulsar reads it: its resources take it @Encoded and
    decode it with Codec.decode (java.net.URLDecoder: AdminResource.validateTopicName, TopicLookupBase.getTopicName),
    so a ``+`` is a space, as Pulsar's Java admin client writes one (TopicName.getEncodedLocalName: Codec.encode);
    ``%2B`` is a ``+``. A subscription (``{sub}``) too, per route as Pulsar reads it: on ``.../subscription/{sub}``
    decoded twice (as a path segment, then by Codec.decode: ``s%2Bb%252Bc`` is ``s b+c``), on
    ``.../{sub}/dispatchRate`` as the topic. Every handler and middleware after this one reads ``match_info`` so
    decoded."""
    info = request.match_info
    if "topic" in info:
        sub = info.get("sub")
        canonical = info.route.resource.canonical if info.route.resource is not None else ""
        if sub is not None and _SUB_DECODED_TWICE.fullmatch(canonical):
            info["sub"] = decode_local_name(sub)
        if "+" in request.rel_url.raw_path:
            raw = raw_path_params(request)
            if raw is not None and raw.get("topic") is not None:
                info["topic"] = decode_local_name(raw["topic"])
            if raw is not None and raw.get("sub") is not None and _SUB_ENCODED.fullmatch(canonical):
                info["sub"] = decode_local_name(raw["sub"])
    return await handler(request)


@web.middleware
async def json_errors(request: web.Request,
                      handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> web.StreamResponse:
    if "\x00" in request.path:  # (Pulsar's web server, Jetty, refuses a NUL in the path before any route)
        raise HttpError(400, "Bad request: the path holds a NUL character (%00)")
    try:
        return await handler(request)
    except HttpError:
        raise
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        # aiohttp's own 404/405 for unknown paths: same JSON shape as every other error.
        raise HttpError(exc.status, exc.reason) from None
    except BrokerError as exc:
        raise HttpError(status_for(exc), exc.message) from None
    except PolicyError as exc:
        raise HttpError(exc.status, exc.reason) from None
    except MetadataStoreError as exc:
        raise HttpError(metadata_status(exc), exc.message) from None
    except StoreWriteError as exc:  # (the local journal on a full disk: nothing of the change was applied)
        log.error("HTTP %s %s: the metadata store could not write: %s", request.method, request.path, exc)
        raise HttpError(500, f"Metadata store could not save the change: {exc}") from None
    except StoreUnavailableError as exc:  # (ZooKeeper unreachable past its timeout...)
        log.warning("HTTP %s %s: the metadata store failed: %s", request.method, request.path, exc)
        raise HttpError(503, f"Metadata store unavailable: {exc}") from None
    except Exception as exc:
        log.exception("HTTP %s %s failed", request.method, request.path)
        raise HttpError(500, f"Internal error: {exc}") from None


Handler = Callable[[web.Request], Awaitable[web.Response]]


def bound(method: Callable[[web.Request, T], Awaitable[web.Response]], arg: T) -> Handler:
    """An aiohttp handler calling ``method(request, arg)``: one method serves a table of routes."""
    async def handle(request: web.Request) -> web.Response:
        return await method(request, arg)
    return handle


def parse_properties(body: object, what: str = "Topic") -> dict[str, str]:
    """``what``'s properties: a JSON object of strings (None: none)."""
    if body is None:
        return {}
    if not isinstance(body, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in body.items()):
        raise HttpError(400, f"{what} properties must be a JSON object of string values")
    return body
