"""What a tenant holds now, in this API process, of the work the API runs or forwards itself: grader
runs, chat and completion requests (and the tokens they may generate), dataset previews. Each is
a ``Share``: an amount is taken for the length of a request, or refused with a 429 naming the
setting that bounds it, so no tenant can hold what the others need.

Example:
    >>> runs = Share("grader runs", code="too_many_grader_runs")
    >>> with runs.hold("acme", Cap(2, "GRADACC_MAX_GRADER_RUNS_PER_TENANT")):
    ...     pass
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from gradacc.errors import OverShare


@dataclass(frozen=True)
class Cap:
    limit: int
    setting: str


@dataclass
class Share:
    """Amounts held per tenant (and in all) of one thing."""

    name: str
    code: str
    _held: dict[str, int] = field(default_factory=dict)
    _total: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def take(
        self, tenant: str, per_tenant: Cap, *, amount: int = 1, total: Cap | None = None
    ) -> Callable[[], None]:
        """Take ``amount`` for ``tenant``, or raise OverShare; the callable gives it back (once)."""
        with self._lock:
            held = self._held.get(tenant, 0)
            if held + amount > per_tenant.limit:
                raise OverShare(
                    f"this tenant holds {held} {self.name} of {per_tenant.limit}; "
                    f"this request needs {amount}",
                    code=self.code,
                    setting=per_tenant.setting,
                )
            if total is not None and self._total + amount > total.limit:
                raise OverShare(
                    f"this server runs {self._total} {self.name} of {total.limit}",
                    code=self.code,
                    setting=total.setting,
                )
            self._held[tenant] = held + amount
            self._total += amount
        given_back = threading.Event()

        def give_back() -> None:
            if given_back.is_set():
                return
            given_back.set()
            with self._lock:
                self._total -= amount
                left = self._held[tenant] - amount
                if left:
                    self._held[tenant] = left
                else:
                    del self._held[tenant]

        return give_back

    @contextmanager
    def hold(
        self, tenant: str, per_tenant: Cap, *, amount: int = 1, total: Cap | None = None
    ) -> Iterator[None]:
        give_back = self.take(tenant, per_tenant, amount=amount, total=total)
        try:
            yield
        finally:
            give_back()


GRADER_RUNS = Share("grader runs", code="too_many_grader_runs")
CHATS = Share("requests in flight", code="too_many_chat_requests")
CHAT_TOKENS = Share("tokens in flight", code="chat_token_budget")
PREVIEWS = Share("previews", code="too_many_previews")
