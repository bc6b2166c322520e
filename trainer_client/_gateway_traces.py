"""MoE routing and the weight version in each trace rllm-model-gateway 0.1 records, for ``trainer_client.gateway``.

- **Routing** (router replay): a response's per-token ``routed_experts`` (vLLM, SGLang) or ``routing_matrices``
  (rLLM's engine), from the body or, streamed, from the chunk that carries it, is kept in the record's
  ``metadata["routed_experts"]`` as :class:`trainer_client.routing.RoutedExperts` (one byte per expert id up to
  256 experts, instead of about ten JSON characters), and taken out of the stored raw response and of what the
  agent receives.
- **Weight version**: the version the server stamped on its response (``weight_version``, as the tiny policy and
  rLLM's engines do), else the one the trainer last gave the gateway (``POST /admin/weight_version``), in
  ``metadata["weight_version"]``; ``None`` when neither is known. The gateway also counts the completion tokens each
  version served over the last five minutes (:class:`WeightVersion`), which ``rollouts top`` reads as staleness.

rllm-model-gateway 0.1.0 builds a record with the module functions ``build_trace_record`` (a whole response) and
``build_trace_record_from_chunks`` (a stream), which its proxy calls by the names it imported; it stores a record
through its store's ``store_trace`` (``ReverseProxy._persist`` and ``_safe_store`` both call it), and strips vLLM's
fields from what the agent sees with ``strip_vllm_fields``, which reads ``data_process._VLLM_CHOICE_FIELDS``.
:func:`install` and :func:`record_version` wrap those (checked with 0.1.0; ``tests/trainer_client/test_gateway_moe.py``
fails when they move).
"""

from __future__ import annotations

import functools
import logging
import time
from collections import Counter, deque
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import rllm_model_gateway.data_process as data_process
import rllm_model_gateway.proxy as proxy_module
from rllm_model_gateway.models import TraceRecord

from trainer_client.routing import RoutingFormatError, routing_of_choice

__all__ = ["ROUTING_FIELDS", "SERVED_WINDOW_S", "WeightVersion", "install", "record_version"]

logger = logging.getLogger("trainer_client.gateway")

#: The choice fields that carry routing: kept compactly in the trace, never sent on to the agent.
ROUTING_FIELDS = frozenset({"routed_experts", "routing_matrices"})
_INSTALLED = "_agentcore_rollouts_capture"
#: Seconds over which the gateway counts the tokens each weight version served (``rollouts top``'s staleness).
SERVED_WINDOW_S = 300
#: Width of one bucket of those counts.
SERVED_BUCKET_S = 10


class WeightVersion:
    """The policy version the trainer last gave the gateway (``None`` until it gives one), and how many completion
    tokens each version served in the last :data:`SERVED_WINDOW_S` seconds (kept in :data:`SERVED_BUCKET_S`
    buckets: the memory and the read's cost grow with the versions in the window, not with the calls)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.current: int | None = None
        self._clock = clock
        self._buckets: deque[tuple[int, Counter[int | None]]] = deque()

    def served(self, version: int | None, tokens: int) -> None:
        """A call of ``tokens`` completion tokens was served by ``version`` (``None``: unknown) just now."""
        bucket = int(self._clock() // SERVED_BUCKET_S)
        if not self._buckets or self._buckets[-1][0] != bucket:
            self._buckets.append((bucket, Counter()))
        self._buckets[-1][1][version] += tokens
        self._forget_old(bucket)

    def recent(self) -> Counter[int | None]:
        """Completion tokens by the version that served them, over the last :data:`SERVED_WINDOW_S` seconds."""
        self._forget_old(int(self._clock() // SERVED_BUCKET_S))
        total: Counter[int | None] = Counter()
        for _, counts in self._buckets:
            total.update(counts)
        return total

    def _forget_old(self, bucket: int) -> None:
        while self._buckets and self._buckets[0][0] <= bucket - SERVED_WINDOW_S // SERVED_BUCKET_S:
            self._buckets.popleft()


def install() -> None:
    """Wrap rllm-model-gateway's record builders so records keep routing and the server's weight version."""
    if getattr(proxy_module, _INSTALLED, False):
        return
    for name in ("build_trace_record", "build_trace_record_from_chunks"):
        builder = getattr(proxy_module, name, None)
        if builder is None or not callable(builder):
            raise RuntimeError(
                f"this rllm-model-gateway has no proxy.{name} (checked with 0.1.0); install rllm-model-gateway 0.1.x"
            )
        setattr(proxy_module, name, _keeping_routing(builder))
    data_process._VLLM_CHOICE_FIELDS = frozenset(data_process._VLLM_CHOICE_FIELDS | ROUTING_FIELDS)
    setattr(proxy_module, _INSTALLED, True)


def record_version(proxy: Any, version: WeightVersion) -> None:
    """Make ``proxy`` store each record with ``version.current`` where the server stamped no version, and count its
    completion tokens in ``version``.

    Every record, whole or streamed, synchronous or not, is written by one ``proxy.store.store_trace`` call.
    """
    store: Any = getattr(proxy, "store", None)
    if not callable(getattr(store, "store_trace", None)):
        raise RuntimeError(
            "this rllm-model-gateway's ReverseProxy has no store.store_trace (checked with 0.1.0); "
            "install rllm-model-gateway 0.1.x"
        )
    store_trace: Callable[[str, str, dict[str, Any]], Awaitable[None]] = store.store_trace

    async def store_stamped(trace_id: str, session_id: str, data: dict[str, Any]) -> None:
        metadata = data.setdefault("metadata", {})
        if metadata.get("weight_version") is None:
            metadata["weight_version"] = version.current
        version.served(metadata["weight_version"], len(data.get("completion_token_ids") or ()))
        await store_trace(trace_id, session_id, data)

    store.store_trace = store_stamped


def _keeping_routing(builder: Callable[..., TraceRecord]) -> Callable[..., TraceRecord]:
    @functools.wraps(builder)
    def build(session_id: str, request_body: dict[str, Any], response: Any, *args: Any, **kwargs: Any) -> TraceRecord:
        responses = response if isinstance(response, list) else [response]
        trace = builder(session_id, request_body, response, *args, **kwargs)
        for body in responses:
            if not isinstance(body, Mapping):
                continue
            if body.get("weight_version") is not None:
                trace.metadata["weight_version"] = int(body["weight_version"])
            try:
                routing = routing_of_choice(body)
            except (RoutingFormatError, ValueError, KeyError, TypeError) as exc:
                logger.warning("session %s: the server's routing could not be read (%s); kept none", session_id, exc)
                routing = None
            if routing is not None:
                trace.metadata["routed_experts"] = routing.model_dump()
        if isinstance(trace.raw_response, dict):
            trace.raw_response = _without_routing(trace.raw_response)
        return trace

    return build


def _without_routing(body: dict[str, Any]) -> dict[str, Any]:
    choices = body.get("choices")
    if not isinstance(choices, list) or not any(ROUTING_FIELDS & set(choice) for choice in choices):
        return body
    return {**body, "choices": [{k: v for k, v in choice.items() if k not in ROUTING_FIELDS} for choice in choices]}
