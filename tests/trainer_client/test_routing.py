"""``trainer_client.routing``: the servers' routing formats read, kept compactly, and handed back exactly."""

from __future__ import annotations

import base64
import json
import struct

import pytest

from trainer_client import TokenTrace
from trainer_client.routing import RoutedExperts, RoutingFormatError, routing_of_choice

ROWS = [[[3, 7], [0, 5]], [[1, 2], [6, 4]], [[7, 7], [2, 3]]]  # 3 tokens x 2 layers x top-2


def test_vllms_nested_routing_is_kept_in_a_byte_per_id_and_read_back_exactly():
    routing = routing_of_choice({"choices": [{"token_ids": [1], "routed_experts": ROWS}]})
    assert routing is not None and routing.nested() == ROWS
    assert (routing.tokens, routing.layers, routing.top_k, routing.dtype) == (3, 2, 2, "uint8")
    assert routing.bytes_per_token == 4  # against about 10 JSON characters per id
    wide = RoutedExperts.from_nested([[[300, 2]]])
    assert (wide.dtype, wide.nested()) == ("uint16", [[[300, 2]]])


def test_rllms_routing_matrices_and_a_base64_int32_block_are_read():
    flat = [expert for token in ROWS for layer in token for expert in layer]
    header = json.dumps({"shape": [2, 2], "dtype": "int32"})
    blob = base64.b64encode(struct.pack(f"<{len(flat)}i", *flat)).decode()
    assert routing_of_choice({"choices": [{"routing_matrices": [header, blob]}]}).nested() == ROWS
    block = {"shape": [3, 2, 2], "data": blob}
    assert routing_of_choice({"choices": [{"routed_experts": block}]}).nested() == ROWS


def test_no_routing_is_none_and_a_ragged_one_is_an_error():
    assert routing_of_choice({"choices": [{"routed_experts": None}]}) is None
    assert routing_of_choice({"choices": []}) is None
    with pytest.raises(RoutingFormatError, match="ragged"):
        routing_of_choice({"choices": [{"routed_experts": [[[1, 2]], [[1]]]}]})


def test_a_window_keeps_the_rows_asked_for():
    routing = RoutedExperts.from_nested(ROWS)
    assert routing.window(1, 5).nested() == ROWS[1:]
    assert routing.window(0, 2).nested() == ROWS[:2]


def test_a_trace_reads_its_routing_and_weight_version_from_our_gateways_metadata_or_rllms_fields():
    routing = RoutedExperts.from_nested(ROWS)
    ours = TokenTrace.model_validate(
        {"trace_id": "t", "session_id": "s", "metadata": {"weight_version": 4, "routed_experts": routing.model_dump()}}
    )
    assert (ours.weight_version, ours.routed_experts) == (4, routing)
    header = json.dumps({"shape": [2, 2], "dtype": "uint8"})
    flat = bytes(expert for token in ROWS for layer in token for expert in layer)
    matrices = [header, base64.b64encode(flat).decode()]
    rllm = TokenTrace.model_validate(
        {"trace_id": "t", "session_id": "s", "weight_version": 2, "routing_matrices": matrices}
    )
    assert (rllm.weight_version, rllm.routed_experts.nested()) == (2, ROWS)
