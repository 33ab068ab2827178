"""Stand-ins for the load manager's collaborators (tests of the shedding rounds)."""

from __future__ import annotations

from broker.cluster.data import LoadReport


class StubRegistry:
    """What the load manager reads of the registry: the leader flag and the brokers' reports."""

    def __init__(self, me: str, reports: dict[str, LoadReport], *, leader: bool) -> None:
        self.is_leader = leader
        self.reports = reports
        self.urls = reports[me].urls

    async def active_brokers(self) -> dict[str, LoadReport]:
        return dict(self.reports)

    def current_report(self) -> LoadReport:
        return self.reports[self.urls.broker_id]
