"""Per-token MoE routing of a model call (router replay, "R3"), kept compactly and aligned to the token ids.

Training a mixture-of-experts policy with RL is unstable unless the trainer replays, for every token, the experts the
inference server routed it to. Servers return that routing with each completion when asked (vLLM with
``--enable-return-routed-experts``: a choice's ``routed_experts``, ``[token][layer][k]`` from the first prompt token,
one row per token fed through the model; SGLang's ``--enable-return-routed-experts`` likewise; rLLM's rollout engine
stamps ``routing_matrices``, ``[header_json, base64]``). As JSON that is about ten characters per expert id, so
the gateway keeps it as :class:`RoutedExperts`: the smallest unsigned integer type that holds the ids, row-major,
base64 (``layers x k`` bytes per token for up to 256 experts), and the trace read hands it back the same way.

Rows are aligned to token positions: row ``i`` is the routing of token ``i`` of ``prompt_token_ids +
completion_token_ids``. A server records no row for the last sampled token (it was never fed through the
model); a consumer pads that row (verl pads with zeros, which its replay masks out).
"""

from __future__ import annotations

import base64
import json
import sys
from array import array
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

__all__ = ["RoutedExperts", "RoutingFormatError", "RoutingUnavailableError", "routing_of_choice"]

#: Unsigned element types by the largest expert id they hold, smallest first (``array`` type codes).
_TYPES: tuple[tuple[Literal["uint8", "uint16", "uint32"], str, int], ...] = (
    ("uint8", "B", 0xFF),
    ("uint16", "H", 0xFFFF),
    ("uint32", "I", 0xFFFFFFFF),
)
_CODES = {name: code for name, code, _ in _TYPES}
#: numpy dtype names rLLM's header may carry -> our element types (little-endian, as numpy writes on x86/arm).
_NUMPY_TYPES = {"uint8": "B", "int8": "b", "uint16": "H", "int16": "h", "int32": "i", "uint32": "I", "int64": "q"}


class RoutingFormatError(ValueError):
    """A server's routing could not be read (a ragged array, a wrong size, an unknown type)."""


class RoutingUnavailableError(RuntimeError):
    """A framework asks for router replay and the model calls come back without per-token routing.

    Args:
        setting: the framework's setting that asks for replay.
        calls: which calls came back without it (``"the model calls of rollout s-1"``).
    """

    def __init__(self, setting: str, calls: str) -> None:
        super().__init__(
            f"{setting} is on, but {calls} came back without per-token expert routing: start the inference "
            "servers with routing returned (vLLM >= 0.22: --enable-return-routed-experts; SGLang: "
            "--enable-return-routed-experts, which slime passes when --use-rollout-routing-replay is set) behind "
            f"`python -m trainer_client.gateway`, which keeps it in the traces, or turn {setting} off"
        )


class RoutedExperts(BaseModel):
    """The experts each MoE layer routed each token to, for the token positions of one call or one training row.

    Attributes:
        tokens: rows (token positions from the first prompt token).
        layers: MoE layers per token.
        top_k: experts per token and layer.
        dtype: the element type of ``data``.
        data: base64 of the ``tokens x layers x top_k`` ids, row-major, little-endian.
    """

    model_config = ConfigDict(frozen=True)

    tokens: int
    layers: int
    top_k: int
    dtype: Literal["uint8", "uint16", "uint32"]
    data: str

    @classmethod
    def from_ids(cls, ids: Sequence[int], *, tokens: int, layers: int, top_k: int) -> RoutedExperts:
        """Pack flat row-major expert ids in the smallest type that holds them."""
        if len(ids) != tokens * layers * top_k:
            raise RoutingFormatError(f"{len(ids)} expert ids for {tokens} tokens x {layers} layers x top-{top_k}")
        if ids and min(ids) < 0:
            raise RoutingFormatError(f"an expert id is negative ({min(ids)})")
        largest = max(ids, default=0)
        name, code = next((name, code) for name, code, limit in _TYPES if largest <= limit)
        packed = array(code, ids)
        if sys.byteorder != "little":
            packed.byteswap()
        return cls(
            tokens=tokens, layers=layers, top_k=top_k, dtype=name, data=base64.b64encode(packed.tobytes()).decode()
        )

    @classmethod
    def from_nested(cls, rows: Sequence[Sequence[Sequence[int]]]) -> RoutedExperts:
        """From ``[token][layer][k]`` lists (vLLM's JSON).

        Raises:
            RoutingFormatError: the rows are ragged.
        """
        layers = len(rows[0]) if rows else 0
        top_k = len(rows[0][0]) if rows and rows[0] else 0
        ids: list[int] = []
        for row in rows:
            if len(row) != layers or any(len(experts) != top_k for experts in row):
                raise RoutingFormatError(f"ragged routed_experts: every token needs {layers} layers x top-{top_k} ids")
            for experts in row:
                ids.extend(int(expert) for expert in experts)
        return cls.from_ids(ids, tokens=len(rows), layers=layers, top_k=top_k)

    @classmethod
    def from_routing_matrices(cls, encoded: Sequence[str]) -> RoutedExperts:
        """From rLLM's ``routing_matrices``: ``[json header {"shape": [layers, k], "dtype": numpy name}, base64]``.

        Raises:
            RoutingFormatError: not that form, or an element type numpy names that we do not read.
        """
        if len(encoded) != 2:
            raise RoutingFormatError(f"routing_matrices must be [header, base64], got {len(encoded)} items")
        header = json.loads(encoded[0])
        layers, top_k = (int(n) for n in header["shape"])
        code = _NUMPY_TYPES.get(str(header.get("dtype", "")).removeprefix("<"))
        if code is None:
            raise RoutingFormatError(f"routing_matrices dtype {header.get('dtype')!r} is not an integer type we read")
        values = array(code)
        values.frombytes(base64.b64decode(encoded[1]))
        if sys.byteorder != "little":
            values.byteswap()
        per_token = layers * top_k
        if per_token == 0 or len(values) % per_token:
            raise RoutingFormatError(f"routing_matrices holds {len(values)} ids, not a multiple of {per_token}")
        return cls.from_ids(list(values), tokens=len(values) // per_token, layers=layers, top_k=top_k)

    def ids(self) -> array[int]:
        """The flat row-major expert ids."""
        values = array(_CODES[self.dtype])
        values.frombytes(base64.b64decode(self.data))
        if sys.byteorder != "little":
            values.byteswap()
        return values

    def nested(self) -> list[list[list[int]]]:
        """``[token][layer][k]`` lists."""
        ids, k, per_token = self.ids(), self.top_k, self.layers * self.top_k
        return [
            [list(ids[t * per_token + layer * k : t * per_token + (layer + 1) * k]) for layer in range(self.layers)]
            for t in range(self.tokens)
        ]

    def numpy(self) -> Any:
        """A ``(tokens, layers, top_k)`` numpy array (numpy is imported here: frameworks that take arrays have it)."""
        import numpy as np

        flat = np.frombuffer(base64.b64decode(self.data), dtype=np.dtype(self.dtype).newbyteorder("<"))
        return flat.reshape(self.tokens, self.layers, self.top_k)

    def padded(self, rows: int) -> Any:
        """A ``(rows, layers, top_k)`` numpy array: the first ``rows`` rows, zeros past the recorded ones (a
        server records none for the very last token; replay masks zero rows out)."""
        import numpy as np

        out = np.zeros((rows, self.layers, self.top_k), dtype=np.int32)
        kept = min(rows, self.tokens)
        out[:kept] = self.numpy()[:kept]
        return out

    def window(self, start: int, length: int) -> RoutedExperts:
        """Rows ``start .. start + length`` (positions past the recorded rows are left out)."""
        per_token = self.layers * self.top_k
        stop = min(start + length, self.tokens)
        start = min(start, stop)
        return RoutedExperts.from_ids(
            self.ids()[start * per_token : stop * per_token], tokens=stop - start, layers=self.layers, top_k=self.top_k
        )

    @property
    def bytes_per_token(self) -> int:
        """Stored bytes per token position (before base64)."""
        return self.layers * self.top_k * array(_CODES[self.dtype]).itemsize


def routing_of_choice(response: Mapping[str, Any]) -> RoutedExperts | None:
    """The routing a chat or completions response carries for its first choice, if the server returned any.

    Reads vLLM's (and SGLang's OpenAI server's) choice ``routed_experts`` (``[token][layer][k]``, or
    ``{"shape": [tokens, layers, k], "data": base64 int32}``) and rLLM's ``routing_matrices``.

    Raises:
        RoutingFormatError: routing is there but unreadable.
    """
    choices = response.get("choices") or []
    choice = choices[0] if choices else {}
    routed = choice.get("routed_experts")
    if isinstance(routed, list) and routed:
        return RoutedExperts.from_nested(routed)
    if isinstance(routed, Mapping) and routed.get("data"):
        tokens, layers, top_k = (int(n) for n in routed["shape"])
        values = array("i")
        values.frombytes(base64.b64decode(routed["data"]))
        if sys.byteorder != "little":
            values.byteswap()
        return RoutedExperts.from_ids(list(values), tokens=tokens, layers=layers, top_k=top_k)
    matrices = choice.get("routing_matrices")
    if matrices:
        return RoutedExperts.from_routing_matrices(matrices)
    return None
