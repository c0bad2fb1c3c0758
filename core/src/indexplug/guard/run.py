"""The guard's machinery: readiness, running a plan blocking or as a coroutine under its
deadline, and settling the plugin's answer into an allowed outcome."""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from pydantic import ValidationError

from indexplug.deadlines import Deadline
from indexplug.errors import InvalidRequest
from indexplug.guard.base import (
    READY_TTL_S,
    SETTLE_S,
    GuardBase,
    _describe,
    _Plan,
    _stamped,
)
from indexplug.outcomes import (
    ALLOWED,
    Explained,
    Got,
    IndexFailed,
    IndexTimeout,
    IndexUnavailable,
    Neighbours,
    Scanned,
    Searched,
)
from indexplug.pools import discard
from indexplug.protocols import Readiness


class Running(GuardBase):
    """Runs a planned plugin call under its deadline and settles its answer."""

    # -- plans: each op's arguments checked, its plugin call and answer check bound ----------

    def _native(self, op: str) -> Callable[..., Any] | None:
        """The backend's own coroutine form of ``op`` (``a<op>``), if it has one."""
        fn = getattr(self.backend, f"a{op}", None)
        return fn if fn is not None and inspect.iscoroutinefunction(fn) else None

    def _claim(self, capability: str, op: str) -> None:
        if not getattr(self.backend.capabilities, capability, False) or not callable(
            getattr(self.backend, op, None)
        ):
            raise InvalidRequest(f"backend '{self.name}' does not offer '{op}'", field="op")

    # -- machinery -----------------------------------------------------------------------
    def _ready(self) -> Readiness:
        now = time.monotonic()
        if now < self._ready_until:
            return Readiness.yes()
        r = self.readiness()
        if r.ready:
            with self._ready_lock:
                self._ready_until = time.monotonic() + READY_TTL_S
        return r

    def forget_readiness(self) -> None:
        """Ask the plugin again on the next call (after an op reported it unavailable)."""
        self._ready_until = 0.0

    def _violation(self, index: str, reason: str) -> IndexFailed:
        return IndexFailed(
            index=index,
            backend=self.plugin,
            reason=f"contract violation by plugin '{self.plugin}': {reason}",
            error_type="ContractViolation",
        )

    def _run(self, plan: _Plan) -> Any:
        """Run ``plan``'s plugin call on a worker thread and answer by its deadline.

        Every op of every backend runs there, whatever the backend claims about its own
        deadlines: only a thread the caller does not wait on can be abandoned, and the caller
        gets ``IndexTimeout`` at the deadline (plus :data:`SETTLE_S` at most, for the guard's
        own checks of an answer that came in time) even from a plugin that never returns.
        """
        ready = self._ready()
        if not ready.ready:
            return self._not_ready(plan, ready)
        future: Future[Any] = self._pool.get().submit(self._answer, plan)
        try:
            out = future.result(timeout=plan.deadline.remaining() + SETTLE_S)
        except TimeoutError:
            future.add_done_callback(discard)
            return self._late(
                plan.op, plan.index, plan.deadline, "did not answer within its deadline"
            )
        if isinstance(out, IndexUnavailable):
            self.forget_readiness()
        return out

    async def _arun(self, plan: _Plan) -> Any:
        """:meth:`_run` for a coroutine: the event loop is never blocked.  A backend's own
        coroutine (``a<op>``) runs on the loop; any other call on the worker threads, and so
        do the checks of every answer (hashing a page of thousands of passages takes long
        enough to hold up every other coroutine)."""
        import asyncio  # here, not at the top: the CLI's start-up never needs it

        if time.monotonic() < self._ready_until:
            ready = Readiness.yes()
        else:
            ready = await asyncio.to_thread(self._ready)
        if not ready.ready:
            return self._not_ready(plan, ready)
        future: Future[Any]
        if plan.native is not None:
            try:
                raw = await asyncio.wait_for(
                    plan.native(), timeout=plan.deadline.remaining() + SETTLE_S
                )
            except TimeoutError:
                return self._late(
                    plan.op, plan.index, plan.deadline, "did not answer within its deadline"
                )
            except Exception as exc:
                return self._raised(plan, exc)
            future = self._pool.get().submit(self._finish, plan, raw)
        else:
            future = self._pool.get().submit(self._answer, plan)
        try:
            out = await asyncio.wait_for(
                asyncio.wrap_future(future), timeout=plan.deadline.remaining() + SETTLE_S
            )
        except TimeoutError:
            future.add_done_callback(discard)
            return self._late(
                plan.op, plan.index, plan.deadline, "did not answer within its deadline"
            )
        if isinstance(out, IndexUnavailable):
            self.forget_readiness()
        return out

    def _not_ready(self, plan: _Plan, ready: Readiness) -> IndexUnavailable:
        return IndexUnavailable(
            index=plan.index, backend=self.plugin, reason=ready.reason or "not ready"
        )

    def _answer(self, plan: _Plan) -> Any:
        """The plugin's answer to ``plan``, then its checks (on the worker thread)."""
        try:
            out = plan.fn()
        except Exception as exc:
            return self._raised(plan, exc)
        return self._finish(plan, out)

    def _raised(self, plan: _Plan, exc: Exception) -> Any:
        if isinstance(exc, TimeoutError):
            return self._late(
                plan.op, plan.index, plan.deadline, "reported that it ran out of time"
            )
        if time.monotonic() > plan.deadline.at:
            return self._late(plan.op, plan.index, plan.deadline, "answered after its deadline")
        return IndexFailed(
            index=plan.index,
            backend=self.plugin,
            reason=f"plugin '{self.plugin}' raised during {plan.op}: {_describe(exc)}",
            error_type=type(exc).__name__,
        )

    def _finish(self, plan: _Plan, out: Any) -> Any:
        if time.monotonic() > plan.deadline.at:
            return self._late(plan.op, plan.index, plan.deadline, "answered after its deadline")
        try:
            return self._settle(plan.op, plan.index, out, plan.check)
        except Exception as exc:
            # an answer built without validation whose parts are not what they claim
            return self._violation(
                plan.index, f"its answer to {plan.op} could not be checked: {_describe(exc)}"
            )

    def _late(self, op: str, index: str, deadline: Deadline, what: str) -> IndexTimeout:
        return IndexTimeout(
            index=index,
            backend=self.plugin,
            deadline_s=deadline.seconds,
            reason=f"plugin '{self.plugin}' {what} ({op})",
        )

    def _settle(self, op: str, index: str, out: Any, check: Callable[[Any], Any]) -> Any:
        """``out`` if it is an allowed outcome of ``op`` for ``index`` (``check`` applied),
        else the contract violation it is.

        Only the exact outcome types are allowed (a subclass could answer one thing to the
        check and another to the caller), and every answer but a search's (whose hits are
        checked and copied one by one) is validated again from its fields: the caller gets a
        model the guard built, of the declared types, never the plugin's object.
        """
        allowed = ALLOWED.get(op)
        if allowed is None:
            raise InvalidRequest(f"no outcomes are declared for op '{op}'", field="op")
        if type(out) not in allowed:
            names = ", ".join(t.__name__ for t in allowed)
            return self._violation(
                index, f"{op} returned {type(out).__name__}, which is not one of: {names}"
            )
        if type(out) not in (Searched, Explained, Neighbours, Got, Scanned):
            # (the passages of those are checked one by one and copied by ``check``: validating
            # them here would hash each twice, and fill in, on the plugin's own object, the
            # digest of a passage stored without one, which must be refused instead)
            try:
                out = type(out).model_validate(dict(out.__dict__))
            except ValidationError as exc:
                return self._violation(
                    index, f"{op} answered a malformed {type(out).__name__}: {_describe(exc)}"
                )
        if out.index != index:
            return self._violation(index, f"answered for index '{out.index}'")
        if not out.backend:
            out = _stamped(out, backend=self.plugin)
        return check(out)
