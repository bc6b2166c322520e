"""MoE routing and the weight version in each trace rllm-model-gateway 0.1 records, for ``trainer_client.gateway``.

- **Routing** (router replay): a response's per-token ``routed_experts`` (vLLM, SGLang) or ``routing_matrices``
  (rLLM's engine), from the body or, streamed, from the chunk that carries it, is kept in the record's
  ``metadata["routed_experts"]`` as :class:`trainer_client.routing.RoutedExperts` (one byte per expert id up to
  256 experts, instead of about ten JSON characters), and taken out of the stored raw response and of what the
  agent receives.
- **Weight version**: the version the server stamped on its response (``weight_version``, as the tiny policy and
  rLLM's engines do), else the one the trainer last gave the gateway (``POST /admin/weight_version``), in
  ``metadata["weight_version"]``; ``None`` when neither is known.

rllm-model-gateway 0.1.0 builds a record with the module functions ``build_trace_record`` (a whole response) and
``build_trace_record_from_chunks`` (a stream), which its proxy calls by the names it imported; it stores a record
through ``ReverseProxy._persist`` (a whole response) or ``ReverseProxy._safe_store`` (a stream), and strips vLLM's
fields from what the agent sees with ``strip_vllm_fields``, which reads ``data_process._VLLM_CHOICE_FIELDS``.
:func:`install` and :func:`record_version` wrap those (checked with 0.1.0; ``tests/trainer_client/test_gateway_moe.py``
fails when they move).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import rllm_model_gateway.data_process as data_process
import rllm_model_gateway.proxy as proxy_module
from rllm_model_gateway.models import TraceRecord

from trainer_client.routing import RoutingFormatError, routing_of_choice

__all__ = ["ROUTING_FIELDS", "WeightVersion", "install", "record_version"]

logger = logging.getLogger("trainer_client.gateway")

#: The choice fields that carry routing: kept compactly in the trace, never sent on to the agent.
ROUTING_FIELDS = frozenset({"routed_experts", "routing_matrices"})
_INSTALLED = "_agentcore_rollouts_capture"


class WeightVersion:
    """The policy version the trainer last gave the gateway (``None`` until it gives one)."""

    def __init__(self) -> None:
        self.current: int | None = None


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
    """Make ``proxy`` store each record with ``version.current`` where the server stamped no version.

    A whole response's record goes through ``ReverseProxy._persist``, a stream's through ``_safe_store``.
    """
    if not all(callable(getattr(proxy, name, None)) for name in ("_persist", "_safe_store")):
        raise RuntimeError(
            "this rllm-model-gateway's ReverseProxy has no _persist / _safe_store (checked with 0.1.0); "
            "install rllm-model-gateway 0.1.x"
        )
    persist: Callable[[TraceRecord], Awaitable[None]] = proxy._persist
    store: Callable[[str, str, dict[str, Any]], Awaitable[None]] = proxy._safe_store

    async def persist_stamped(trace: TraceRecord) -> None:
        if trace.metadata.get("weight_version") is None:
            trace.metadata["weight_version"] = version.current
        await persist(trace)

    async def store_stamped(trace_id: str, session_id: str, data: dict[str, Any]) -> None:
        metadata = data.setdefault("metadata", {})
        if metadata.get("weight_version") is None:
            metadata["weight_version"] = version.current
        await store(trace_id, session_id, data)

    proxy._persist, proxy._safe_store = persist_stamped, store_stamped


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
