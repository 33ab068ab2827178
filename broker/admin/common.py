"""What every admin resource shares: JSON errors with Pulsar's statuses, body parsing, names.

Errors are JSON ``{"reason": ...}`` with the status Pulsar's admin API uses: 404 missing tenant,
namespace, topic or subscription; 409 already exists / conflict; 412 precondition (bad name,
value out of range, busy); 400 malformed body; 405 operation not allowed on this kind of topic;
401 missing or refused credentials, 403 a role without permission (see broker.auth.http).
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Awaitable, Callable
from typing import TypeVar

from aiohttp import web

from broker.errors import (
    AuthenticationError,
    AuthorizationError,
    BrokerError,
    ConsumerBusyError,
    ConsumerNotFoundError,
    IncompatibleSchemaError,
    InvalidTopicNameError,
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


async def read_body(request: web.Request) -> object:
    """The JSON body, or None when there is none."""
    raw = await request.read()
    if not raw.strip():
        return None
    try:
        body = json.loads(raw)
    except ValueError:
        raise HttpError(400, "Request body is not valid JSON") from None
    if b"\\u" in raw:  # (an escape may spell a lone surrogate, which nothing can store or send on)
        try:
            json.dumps(body, ensure_ascii=False).encode()
        except UnicodeEncodeError:
            raise HttpError(400, "Request body has a string that is not valid Unicode (a lone surrogate)") from None
    return body


def query_flag(request: web.Request, name: str, default: bool = False) -> bool:
    value = request.query.get(name)
    return default if value is None else value.lower() == "true"


def int_param(value: str, what: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise HttpError(400, f"{what} must be an integer, got {value!r}") from None


# Pulsar's NamedEntity rule for tenant, namespace and cluster names (Java's \w: ASCII letters, digits, _); ours
# also refuses ':' (it separates names in our store's paths) and a leading '.'.
_NAMED = re.compile(r"[-=.\w]+", re.ASCII)


def check_name(name: str, what: str) -> None:
    if not _NAMED.fullmatch(name) or name.startswith("."):
        raise HttpError(412, f"Invalid {what} name '{name}'")


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
    (ServiceNotReadyError, 503),
    (PersistenceError, 500),  # (storage cannot write: a full disk)
)


def status_for(exc: BrokerError) -> int:
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


@web.middleware
async def json_errors(request: web.Request,
                      handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> web.StreamResponse:
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


def parse_properties(body: object) -> dict[str, str]:
    """Topic properties: a JSON object of strings (None: none)."""
    if body is None:
        return {}
    if not isinstance(body, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in body.items()):
        raise HttpError(400, "Topic properties must be a JSON object of string values")
    return body
