"""The web console: static files served by the broker's HTTP port, and the two read endpoints the
console needs that Pulsar's admin REST lacks.

- ``GET /`` and ``GET /console/...``: the console's files (``broker/console/static/``: HTML, CSS
  and JavaScript modules, no build step; loaded once into memory). Public: they hold no data,
  every piece of data comes from the admin REST with the user's credentials. Each answer carries a
  strict Content-Security-Policy (scripts, styles and calls to this origin only, no inline code, no
  framing). ``webConsoleEnabled=false`` leaves these routes out: 404.
- ``GET /admin/v2/broker-stats/overview``: one small document for the overview page, sampled by
  the browser every few seconds: version, uptime, connections, counts, cumulative message and byte
  counters (the browser turns their differences into live rates, whatever
  ``statsUpdateFrequencyInSecs`` is), the sampled rates, storage and backlog of the loaded topics.
  Super-user only, as the rest of broker-stats.
- ``GET /admin/v2/namespaces/{tenant}/{ns}/topicsPage?search=&kind=&offset=&limit=``: a namespace's
  topics one page at a time (a partitioned topic is one row with its partition count; its
  partitions are left out), filtered by a substring of the topic's name (case-insensitive), with a summary of each row's
  stats. The name list is built from the storage's and the metadata's in-memory lists, and stats
  are computed only for the rows of the page, so it stays fast with 10,000 topics. Needs consume
  permission on the namespace (as ``.../topics``).
"""

from __future__ import annotations

import mimetypes
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aiohttp import web

from broker.admin import stats as S
from broker.admin.common import HttpError, int_param, json_response
from broker.service.broker_service import MODE_ALL
from broker.service.topic import PersistentTopic
from broker.topic_name import PARTITION_SUFFIX, TopicName
from broker.version import __version__

if TYPE_CHECKING:
    from broker.admin.http import WebService
    from broker.service.broker_service import AnyTopic

STATIC_DIR = Path(__file__).resolve().parent.parent / "console" / "static"
# Everything from this origin only; no inline script or style, no plugins, no framing, no forms
# posted anywhere; images from this origin or data: (the screenshot-free console needs none else).
CONTENT_SECURITY_POLICY = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
                           "connect-src 'self'; font-src 'self'; base-uri 'none'; form-action 'none'; "
                           "frame-ancestors 'none'")
SECURITY_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}
# A page of topics: Pulsar Manager's default page size is 10; a screen holds a few dozen rows.
DEFAULT_PAGE = 50
MAX_PAGE = 500
KINDS = ("all", "persistent", "non-persistent", "partitioned")


class ConsoleResource:
    def __init__(self, web_service: WebService) -> None:
        self.web = web_service
        self.started = time.time()
        self._files: dict[str, tuple[bytes, str]] | None = None

    def register(self, r: web.UrlDispatcher, console: bool) -> None:
        r.add_get("/admin/v2/broker-stats/overview", self.overview)
        r.add_get("/admin/v2/namespaces/{tenant}/{ns}/topicsPage", self.topics_page)
        if console:
            r.add_get("/", self.index)
            r.add_get("/console", self.index)
            r.add_get("/console/", self.index)
            r.add_get("/console/{file:.+}", self.static)

    # -- static files ------------------------------------------------------------------------------
    def files(self) -> dict[str, tuple[bytes, str]]:
        """The console's files by relative path, with their content types (read on first use)."""
        if self._files is None:
            files = {}
            for path in sorted(STATIC_DIR.rglob("*")):
                if path.is_file():
                    kind = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
                    if path.suffix == ".js":
                        kind = "text/javascript"
                    if kind.startswith("text/") or kind.endswith("+xml"):
                        kind += "; charset=utf-8"
                    files[path.relative_to(STATIC_DIR).as_posix()] = (path.read_bytes(), kind)
            self._files = files
        return self._files

    def _serve(self, name: str) -> web.Response:
        found = self.files().get(name)
        if found is None:
            raise HttpError(404, f"No such console file: {name}")
        body, kind = found
        return web.Response(body=body, headers={"Content-Type": kind, **SECURITY_HEADERS})

    async def index(self, request: web.Request) -> web.Response:
        return self._serve("index.html")

    async def static(self, request: web.Request) -> web.Response:
        return self._serve(request.match_info["file"])

    # -- overview ----------------------------------------------------------------------------------
    async def overview(self, request: web.Request) -> web.Response:
        service, sampler, process = self.web.service, self.web.sampler, self.web.ctx.process
        topics = service.all_topics()
        msg_out = bytes_out = storage = backlog = subscriptions = consumers = 0
        for topic in topics:
            for sub in topic.subscriptions.values():
                totals = sampler.subscription_totals(sub)
                msg_out += totals.msg_out
                bytes_out += totals.bytes_out
                consumers += len(sub.consumers)
            subscriptions += len(topic.subscriptions)
            if isinstance(topic, PersistentTopic):
                storage += topic.ledger.total_size
                backlog += _backlog(topic)
        metadata = service.metadata
        return json_response({
            "version": __version__,
            "brokerId": self.web.broker_id,
            "cluster": self.web.ctx.cluster,
            "startTime": int(self.started * 1000),
            "uptimeSeconds": time.time() - self.started,
            "time": int(time.time() * 1000),
            "connections": len(process.connections),
            "tenants": len(metadata.tenants),
            "namespaces": len(metadata.namespaces),
            "topics": len(topics),
            "partitionedTopics": len(metadata.partitioned_topics),
            "producers": sum(len(t.producers) for t in topics),
            "subscriptions": subscriptions,
            "consumers": consumers,
            "msgInCounter": sum(t.msg_in for t in topics),
            "bytesInCounter": sum(t.bytes_in for t in topics),
            "msgOutCounter": msg_out,
            "bytesOutCounter": bytes_out,
            "msgRateIn": sum(r.msgs for r in sampler.topic_in.values()),
            "msgRateOut": sum(r.msgs for r in sampler.sub_out.values()),
            "statsIntervalSeconds": sampler.interval_s,
            "storageSize": storage,
            "msgBacklog": backlog,
        })

    # -- one page of a namespace's topics ----------------------------------------------------------
    async def topics_page(self, request: web.Request) -> web.Response:
        ns = self.web.namespaces.namespace(request)
        q = request.query
        search = q.get("search", "").strip().lower()
        kind = q.get("kind", "all")
        if kind not in KINDS:
            raise HttpError(400, f"kind must be one of {', '.join(KINDS)}")
        offset = int_param(q.get("offset", "0"), "offset")
        limit = int_param(q.get("limit", str(DEFAULT_PAGE)), "limit")
        if offset < 0 or not 1 <= limit <= MAX_PAGE:
            raise HttpError(400, f"offset must be >= 0 and limit 1-{MAX_PAGE}")
        service = self.web.service
        partitioned = {base: n for base, n in service.metadata.partitioned_topics.items()
                       if base.split("://", 1)[-1].startswith(ns + "/")}
        rows: list[tuple[str, int]] = []  # (full name, partitions; 0 = not partitioned)
        if kind in ("all", "partitioned"):
            rows.extend(partitioned.items())
        if kind != "partitioned":
            wanted = "" if kind == "all" else kind + "://"
            for name in service.topics_of_namespace(ns, MODE_ALL):
                # (Parsing 10,000 names would cost more than the rest: only partitions' are.)
                if PARTITION_SUFFIX in name and TopicName.parse(name).base.full in partitioned:
                    continue
                if name.startswith(wanted):
                    rows.append((name, 0))
        if search:  # (in the topic's own name: tenant and namespace are the same for every row)
            rows = [r for r in rows if search in r[0].split("/", 4)[4].lower()]
        rows.sort()
        page = rows[offset:offset + limit]
        return json_response({"total": len(rows), "offset": offset, "limit": limit,
                              "topics": [self._row(name, n) for name, n in page]})

    def _row(self, name: str, partitions: int) -> dict[str, Any]:
        t = TopicName.parse(name)
        row: dict[str, Any] = {"name": name, "domain": t.domain, "localName": t.local_name, "partitions": partitions}
        service = self.web.service
        members = [t.partition(i).full for i in range(partitions)] if partitions else [name]
        loaded: list[AnyTopic] = [x for m in members
                                  if (x := service.topics.get(m) or service.non_persistent_topics.get(m)) is not None]
        row["loaded"] = bool(loaded)
        totals = dict(producers=0, subscriptions=0, consumers=0, msgBacklog=0, storageSize=0,
                      msgRateIn=0.0, msgRateOut=0.0, msgInCounter=0, msgOutCounter=0)
        sampler = self.web.sampler
        for topic in loaded:
            totals["producers"] += len(topic.producers)
            totals["subscriptions"] += len(topic.subscriptions)
            totals["msgInCounter"] += topic.msg_in
            totals["msgRateIn"] += sampler.topic_in.get(topic, S.ZERO).msgs
            for sub in topic.subscriptions.values():
                totals["consumers"] += len(sub.consumers)
                totals["msgRateOut"] += sampler.sub_out.get(sub, S.ZERO).msgs
                totals["msgOutCounter"] += sampler.subscription_totals(sub).msg_out
            if isinstance(topic, PersistentTopic):
                totals["storageSize"] += topic.ledger.total_size
                totals["msgBacklog"] += _backlog(topic)
        row.update(totals)
        return row



def _backlog(topic: PersistentTopic) -> int:
    """Messages in the backlogs of the topic's subscriptions (stored cursors nobody uses too)."""
    cursors = topic.ledger.cursors
    if not cursors:
        return 0
    return sum(cursors[n].number_of_entries_in_backlog() for n in topic.subscription_names() if n in cursors)
