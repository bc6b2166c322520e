"""A Tinker-compatible training and sampling API on the tiny policy: what the ``tinker`` SDK calls in an RL loop.

Routes under ``/api/v1`` (the SDK's own paths and bodies; ``tinker`` 0.38's protobuf for forward-backward requests,
sample results and forward-backward results, JSON for the rest): sessions and heartbeats, server capabilities,
``create_model`` (the trainable copy of the policy; a ``lora_config`` is accepted and its rank recorded, but the
tiny network trains all of its weights), ``forward_backward`` / ``forward`` with the ``cross_entropy``,
``importance_sampling`` and ``ppo`` losses (summed over tokens and datums, as Tinker's), ``optim_step`` (AdamW with
the request's learning rate, betas, eps, weight decay and gradient clipping), ``save_weights_for_sampler`` (a
named checkpoint, or a sampling session on a snapshot), ``save_weights`` (training state paths), ``asample``
(token ids and their logprobs; the tiny policy's stop ids or one-token stop strings) and ``retrieve_future``.
Every request is computed when it arrives, in order, and its future is ready at once.

Saving weights for the sampler also loads them into the endpoint's OpenAI surface (the served
:class:`~local_stack.tiny_policy.server.TransformerPolicy`), as version = the optimizer steps taken so far, so an
agent's chat calls sample the weights the trainer last synced, and every response says which.
"""

from __future__ import annotations

import io
import itertools
import json
import threading
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from local_stack.tiny_policy.model import SamplingRequest, build_model, sample_batch
from local_stack.tiny_policy.server import TransformerPolicy

__all__ = ["LOSSES", "TinkerError", "TinkerService"]

#: The losses ``forward_backward`` computes (Tinker's names).
LOSSES = ("cross_entropy", "importance_sampling", "ppo")
_PROTO = "application/x-protobuf"


class TinkerError(ValueError):
    """A request this endpoint refuses; its message says what is wrong (the SDK raises it as a user error)."""


@dataclass
class _Trained:
    """One training client's model: the network, its optimizer (made at the first step) and the steps taken."""

    base_model: str
    network: Any
    lora_rank: int | None
    optimizer: Any = None
    steps: int = 0


@dataclass
class _State:
    sessions: set[str] = field(default_factory=set)
    models: dict[str, _Trained] = field(default_factory=dict)
    #: tinker:// path -> state_dict of a sampler checkpoint (None: the base model).
    checkpoints: dict[str, Any] = field(default_factory=dict)
    sampling_sessions: dict[str, str] = field(default_factory=dict)
    #: request id -> (content type, body) of its finished result.
    futures: dict[str, tuple[str, bytes]] = field(default_factory=dict)


class TinkerService:
    """The Tinker routes on a served :class:`TransformerPolicy` named ``model_name`` (see the module docstring)."""

    def __init__(self, policy: TransformerPolicy, model_name: str) -> None:
        from tinker.proto import tinker_public_pb2

        self._pb = tinker_public_pb2
        self._torch = policy._torch
        self._policy = policy
        self._model_name = model_name
        self._state = _State()
        self._state.checkpoints[self._base_path] = None
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._generator = self._torch.Generator().manual_seed(policy.config.seed)
        self._networks: dict[str, Any] = {}

    @property
    def _base_path(self) -> str:
        return f"tinker://base/{self._model_name}"

    def routes(self) -> Sequence[Route]:
        """The ``/api/v1`` routes."""
        json_routes: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
            "create_session": self._create_session,
            "session_heartbeat": lambda _: {"type": "session_heartbeat"},
            "create_sampling_session": self._create_sampling_session,
            "telemetry": lambda _: {"status": "accepted"},
            "get_info": self._get_info,
        }
        future_routes: dict[str, Callable[[dict[str, Any]], tuple[str, bytes]]] = {
            "create_model": self._create_model,
            "optim_step": self._optim_step,
            "save_weights_for_sampler": self._save_weights_for_sampler,
            "save_weights": self._save_weights,
        }
        routes = [
            Route("/api/v1/healthz", lambda _: JSONResponse({"status": "ok"}), methods=["GET"]),
            Route("/api/v1/get_server_capabilities", self._capabilities, methods=["GET"]),
            Route(
                "/api/v1/client/config",
                lambda _: JSONResponse({"sample_use_retrieve_futures": False}),
                methods=["POST", "GET"],
            ),
            Route("/api/v1/forward_backward", self._forward_backward, methods=["POST"]),
            Route("/api/v1/asample", self._asample, methods=["POST"]),
            Route("/api/v1/retrieve_future", self._retrieve_future, methods=["POST"]),
            Route("/api/v1/samplers/{sampler_id}", self._sampler, methods=["GET"]),
            Route("/api/v1/sessions/{session_id}/finish", self._finish_session, methods=["POST"]),
        ]
        routes += [
            Route(f"/api/v1/{name}", self._json_route(handler), methods=["POST"])
            for name, handler in json_routes.items()
        ]
        routes += [
            Route(f"/api/v1/{name}", self._future_route(handler), methods=["POST"])
            for name, handler in future_routes.items()
        ]
        return routes

    # The request plumbing: JSON in, a JSON answer or a future whose result is ready.

    def _json_route(self, handler: Callable[[dict[str, Any]], dict[str, Any]]) -> Callable[[Request], Any]:
        async def route(request: Request) -> Response:
            try:
                return JSONResponse(await run_in_threadpool(self._locked, handler, await _json(request)))
            except TinkerError as exc:
                return _refused(exc)

        return route

    def _future_route(self, handler: Callable[[dict[str, Any]], tuple[str, bytes]]) -> Callable[[Request], Any]:
        async def route(request: Request) -> Response:
            try:
                body = await _json(request)
            except TinkerError as exc:
                return _refused(exc)
            return JSONResponse(await run_in_threadpool(self._submit, handler, body))

        return route

    def _locked(self, handler: Callable[[Any], Any], body: Any) -> Any:
        with self._lock:
            return handler(body)

    def _submit(self, handler: Callable[[Any], tuple[str, bytes]], body: Any, **extra: Any) -> dict[str, Any]:
        """Run ``handler`` now and keep its result (or its refusal) under a new request id."""
        request_id = f"req-{next(self._ids)}"
        try:
            self._state.futures[request_id] = self._locked(handler, body)
        except TinkerError as exc:
            failed = {"error": str(exc), "category": "user"}
            self._state.futures[request_id] = ("application/json", json.dumps(failed).encode())
        return {"request_id": request_id, "model_id": body.get("model_id") if isinstance(body, dict) else None, **extra}

    async def _retrieve_future(self, request: Request) -> Response:
        body = await _json(request)
        result = self._state.futures.get(str(body.get("request_id")))
        if result is None:
            return _refused(TinkerError(f"no request {body.get('request_id')!r}"), status_code=404)
        content_type, content = result
        return Response(content, media_type=content_type)

    async def _finish_session(self, request: Request) -> Response:
        """A closed ``ServiceClient`` ends its session (its models and checkpoints stay, as Tinker's do)."""
        self._state.sessions.discard(request.path_params["session_id"])
        return JSONResponse(None)

    async def _sampler(self, request: Request) -> Response:
        sampler_id = request.path_params["sampler_id"]
        path = self._state.sampling_sessions.get(sampler_id)
        if path is None:
            return _refused(TinkerError(f"no sampling session {sampler_id!r}"), status_code=404)
        model_path = None if path == self._base_path else path
        return JSONResponse({"sampler_id": sampler_id, "base_model": self._model_name, "model_path": model_path})

    async def _capabilities(self, _: Request) -> Response:
        model = {
            "model_name": self._model_name,
            "max_context_length": self._policy.config.max_seq_len,
            "trainable": True,
            "sampleable": True,
        }
        return JSONResponse({"supported_models": [model]})

    # Sessions and models.

    def _create_session(self, _: dict[str, Any]) -> dict[str, Any]:
        session_id = f"session-{uuid.uuid4().hex[:12]}"
        self._state.sessions.add(session_id)
        return {"type": "create_session", "session_id": session_id}

    def _create_sampling_session(self, body: dict[str, Any]) -> dict[str, Any]:
        path = body.get("model_path") or self._checked_base(body.get("base_model"))
        self._checkpoint(path)
        sampling_session_id = f"sampling-{uuid.uuid4().hex[:12]}"
        self._state.sampling_sessions[sampling_session_id] = path
        return {"type": "create_sampling_session", "sampling_session_id": sampling_session_id}

    def _create_model(self, body: dict[str, Any]) -> tuple[str, bytes]:
        base = self._checked_base(body.get("base_model"))
        model_id = f"model-{uuid.uuid4().hex[:12]}"
        network = build_model(self._policy.config)
        network.train()
        rank = (body.get("lora_config") or {}).get("rank")
        self._state.models[model_id] = _Trained(base, network, rank)
        return _json_result({"type": "create_model", "model_id": model_id})

    def _get_info(self, body: dict[str, Any]) -> dict[str, Any]:
        trained = self._trained(body.get("model_id"))
        return {
            "type": "get_info",
            "model_id": body["model_id"],
            "model_data": {"arch": "tiny-causal-lm", "model_name": trained.base_model},
            "is_lora": False,
            "lora_rank": trained.lora_rank,
            "model_name": trained.base_model,
        }

    def _checked_base(self, base_model: Any) -> str:
        if base_model != self._model_name:
            raise TinkerError(
                f"base_model {base_model!r} is not served here; this endpoint serves {self._model_name!r}"
            )
        return self._base_path

    def _trained(self, model_id: Any) -> _Trained:
        trained = self._state.models.get(str(model_id))
        if trained is None:
            raise TinkerError(f"no model {model_id!r}: create it with create_lora_training_client first")
        return trained

    # Training.

    async def _forward_backward(self, request: Request) -> Response:
        message = self._pb.ForwardBackwardRequest()
        try:
            if not request.headers.get("content-type", "").startswith(_PROTO):
                raise TinkerError(f"send forward_backward as {_PROTO} (the tinker SDK 0.38 does)")
            message.ParseFromString(await request.body())
        except (TinkerError, Exception) as exc:  # a body that is not the proto is the client's error
            return _refused(TinkerError(f"could not read the forward_backward request: {exc}"))
        return JSONResponse(await run_in_threadpool(self._submit, self._run_forward_backward, message))

    def _run_forward_backward(self, message: Any) -> tuple[str, bytes]:
        torch = self._torch
        trained = self._trained(message.model_id)
        if message.loss_fn not in LOSSES:
            raise TinkerError(f"loss_fn {message.loss_fn!r} is not one of {', '.join(LOSSES)}")
        config = dict(message.loss_fn_config)
        total = 0.0
        outputs = []
        with torch.set_grad_enabled(not message.forward_only):
            for datum in message.data:
                ids = np.concatenate(
                    [np.frombuffer(chunk.encoded_text.tokens, dtype=np.int32) for chunk in datum.model_input]
                )
                inputs = {name: _tensor(self._pb, tensor) for name, tensor in datum.loss_fn_inputs.items()}
                targets = inputs.get("target_tokens")
                if targets is None or len(targets) != len(ids):
                    raise TinkerError("each datum needs target_tokens, one per model_input token")
                logits = trained.network(torch.as_tensor(ids, dtype=torch.long)[None])[0].float()
                logprobs = torch.log_softmax(logits, dim=-1).gather(
                    1, torch.as_tensor(targets, dtype=torch.long)[:, None]
                )[:, 0]
                loss = _loss(torch, message.loss_fn, logprobs, inputs, config)
                if not message.forward_only:
                    loss.backward()
                total += float(loss.detach())
                outputs.append(logprobs.detach().numpy().astype(np.float32))
        result = self._pb.ForwardBackwardOutput(loss_fn_output_type="ArrayRecord", metrics={"loss:sum": total})
        offsets = np.cumsum([0] + [array.nbytes for array in outputs]).astype(np.int64)
        record = result.loss_fn_outputs.add(num_datums=len(outputs))
        record.fields["logprobs"].CopyFrom(
            self._pb.BatchedTensor(
                data=b"".join(array.tobytes() for array in outputs),
                offsets=offsets.tobytes(),
                dtype=self._pb.DTYPE_FLOAT32,
            )
        )
        return _PROTO, result.SerializeToString()

    def _optim_step(self, body: dict[str, Any]) -> tuple[str, bytes]:
        torch = self._torch
        trained = self._trained(body.get("model_id"))
        params = body.get("adam_params") or body.get("optim_params")
        if not isinstance(params, dict):
            raise TinkerError("optim_step takes adam_params (this endpoint's optimizer is AdamW)")
        group = {
            "lr": float(params.get("learning_rate", 1e-4)),
            "betas": (float(params.get("beta1", 0.9)), float(params.get("beta2", 0.95))),
            "eps": float(params.get("eps", 1e-12)),
            "weight_decay": float(params.get("weight_decay", 0.0)),
        }
        if trained.optimizer is None:
            trained.optimizer = torch.optim.AdamW(trained.network.parameters(), **group)
        for param_group in trained.optimizer.param_groups:
            param_group.update(group)
        clip = float(params.get("grad_clip_norm") or 0.0)
        norm = torch.nn.utils.clip_grad_norm_(trained.network.parameters(), clip if clip > 0 else float("inf"))
        trained.optimizer.step()
        trained.optimizer.zero_grad()
        trained.steps += 1
        return _json_result({"metrics": {"grad_norm:mean": float(norm), "optimizer_steps": float(trained.steps)}})

    # Weights.

    def _save_weights_for_sampler(self, body: dict[str, Any]) -> tuple[str, bytes]:
        trained = self._trained(body.get("model_id"))
        name = body.get("path") or f"step-{trained.steps}-{uuid.uuid4().hex[:6]}"
        path = f"tinker://{body['model_id']}/sampler_weights/{name}"
        state = {key: value.detach().clone() for key, value in trained.network.state_dict().items()}
        self._state.checkpoints[path] = state
        buffer = io.BytesIO()
        self._torch.save(state, buffer)
        self._policy.load_weights(buffer.getvalue(), version=trained.steps)
        result: dict[str, Any] = {"type": "save_weights_for_sampler", "path": path}
        if not body.get("path"):
            result["sampling_session_id"] = self._create_sampling_session({"model_path": path})["sampling_session_id"]
        return _json_result(result)

    def _save_weights(self, body: dict[str, Any]) -> tuple[str, bytes]:
        trained = self._trained(body.get("model_id"))
        name = body.get("path") or f"step-{trained.steps}"
        path = f"tinker://{body['model_id']}/weights/{name}"
        self._state.checkpoints[path] = {
            key: value.detach().clone() for key, value in trained.network.state_dict().items()
        }
        return _json_result({"type": "save_weights", "path": path})

    def _checkpoint(self, path: str) -> Any:
        if path not in self._state.checkpoints:
            raise TinkerError(f"no checkpoint {path!r}: save one with save_weights_for_sampler")
        network = self._networks.get(path)
        if network is None:
            network = build_model(self._policy.config)
            state = self._state.checkpoints[path]
            if state is not None:
                network.load_state_dict(state)
            self._networks = {path: network}  # the latest sampler only: a loop samples one at a time
        return network

    # Sampling.

    async def _asample(self, request: Request) -> Response:
        try:
            body = await _json(request)
        except TinkerError as exc:
            return _refused(exc)
        count = int(body.get("num_samples") or 1)
        ids = [f"seq-{uuid.uuid4().hex[:12]}" for _ in range(count)]
        return JSONResponse(await run_in_threadpool(self._submit, self._sample, body, sample_sequence_ids=ids))

    def _sample(self, body: dict[str, Any]) -> tuple[str, bytes]:
        session = body.get("sampling_session_id")
        if session is not None:
            path = self._state.sampling_sessions.get(session)
            if path is None:
                raise TinkerError(f"no sampling session {session!r}")
        else:
            path = body.get("model_path") or self._checked_base(body.get("base_model"))
        network = self._checkpoint(path)
        prompt = [token for chunk in body["prompt"]["chunks"] for token in chunk.get("tokens", [])]
        params = body.get("sampling_params") or {}
        if params.get("top_k") not in (None, -1, 0):
            raise TinkerError("top_k is not supported by the tiny policy; send -1")
        seed = params.get("seed")
        generator = self._torch.Generator().manual_seed(seed) if seed is not None else self._generator
        requests = [
            SamplingRequest(
                prompt_ids=prompt,
                max_tokens=int(params.get("max_tokens") or 16),
                stop_ids=self._stop_ids(params.get("stop")),
                temperature=float(params.get("temperature", 1.0)),
                top_p=float(params.get("top_p", 1.0)),
                generator=generator,
            )
            for _ in range(int(body.get("num_samples") or 1))
        ]
        try:
            sampled = sample_batch(network, requests)
        except ValueError as exc:
            raise TinkerError(str(exc)) from exc
        result = self._pb.SampleResponse()
        for item in sampled:
            result.sequences.add(
                stop_reason=self._pb.STOP_REASON_STOP if item.stopped else self._pb.STOP_REASON_LENGTH,
                tokens=np.asarray(item.token_ids, dtype=np.int32).tobytes(),
                logprobs=np.asarray(item.logprobs, dtype=np.float32).tobytes(),
            )
        return _PROTO, result.SerializeToString()

    def _stop_ids(self, stop: Any) -> frozenset[int]:
        if not stop:
            return frozenset({self._policy.tokenizer.im_end_id})
        ids = set()
        for item in stop:
            encoded = [item] if isinstance(item, int) else self._policy.tokenizer.encode(item)
            if len(encoded) != 1:
                raise TinkerError(f"stop {item!r} is {len(encoded)} tokens; the tiny policy stops on single tokens")
            ids.add(encoded[0])
        return frozenset(ids)


def _loss(torch: Any, loss_fn: str, logprobs: Any, inputs: dict[str, np.ndarray], config: dict[str, float]) -> Any:
    """Tinker's losses, summed over the datum's tokens."""
    if loss_fn == "cross_entropy":
        weights = torch.as_tensor(inputs.get("weights", np.ones(len(logprobs))), dtype=torch.float32)
        return -(logprobs * weights).sum()
    for name in ("logprobs", "advantages"):
        if name not in inputs or len(inputs[name]) != len(logprobs):
            raise TinkerError(f"{loss_fn} needs {name}, one per target token")
    ratio = torch.exp(logprobs - torch.as_tensor(inputs["logprobs"], dtype=torch.float32))
    advantages = torch.as_tensor(inputs["advantages"], dtype=torch.float32)
    if loss_fn == "importance_sampling":
        return -(ratio * advantages).sum()
    clipped = ratio.clamp(config.get("clip_low_threshold", 0.8), config.get("clip_high_threshold", 1.2))
    return -torch.minimum(ratio * advantages, clipped * advantages).sum()


def _tensor(pb: Any, message: Any) -> np.ndarray:
    dtype = {pb.DTYPE_FLOAT32: np.float32, pb.DTYPE_INT64: np.int64, pb.DTYPE_INT32: np.int32}.get(message.dtype)
    if dtype is None or message.HasField("sparse_csr"):
        raise TinkerError("loss_fn_inputs must be dense float32 or int64 tensors")
    return np.frombuffer(message.dense, dtype=dtype).copy()


async def _json(request: Request) -> Any:
    try:
        return json.loads(await request.body() or b"{}")
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise TinkerError(f"the request body is not valid JSON: {exc}") from exc


def _json_result(body: dict[str, Any]) -> tuple[str, bytes]:
    return "application/json", json.dumps(body).encode()


def _refused(exc: TinkerError, status_code: int = 400) -> Response:
    return JSONResponse({"error": str(exc), "category": "user"}, status_code=status_code)
