"""Each moto function the local stack replaces or wraps is still the one its patch was written for.

The patches (``local_stack/moto_server.py``, ``local_stack/call_log.py``; the list and what each works around is
in docs/decisions.md, D76) rely on how these functions work inside. A new moto that changes one of them fails
here, naming the function and the patch to re-check, before the local stack misbehaves. The definitions are
read from moto's source files (not from the live objects, which a patch in this process may have replaced).
"""

from __future__ import annotations

import ast
import hashlib
import importlib.util
from pathlib import Path
from typing import NamedTuple

import moto
import pytest

PINNED_MOTO = "5.2.5"


class Patched(NamedTuple):
    """An upstream definition a patch depends on, as recorded for :data:`PINNED_MOTO`."""

    module: str
    qualname: str
    patch: str
    signature: str
    source_sha256: str


PATCHED = (
    Patched(
        "moto.s3.responses",
        "S3Response.get_bucket_notification",
        "moto_server.report_eventbridge_switch",
        "self",
        "ab5bd575bc630c281cf9c63e3795a85635ab1f88850ecb547cfdfba752dff591",
    ),
    Patched(
        "moto.core.common_models",
        "BaseModel.__new__",
        "moto_server.forget_model_instances",
        "cls, *args: Any, **kwargs: Any",
        "39feed565f38b85df6b8f127b69c85db99a4151aa2f33e80638b7f21dde1bfe4",
    ),
    Patched(
        "moto.dynamodb.models",
        "DynamoDBBackend.transact_write_items",
        "moto_server.copy_only_touched_items",
        "self, transact_items: list[dict[str, Any]]",
        "a612254a70f1145c1e8f45b691dad358907dbe2149562c500c3a3fe173e809fb",
    ),
    Patched(
        "moto.dynamodb.responses",
        "DynamoHandler.call_action",
        "moto_server.serialize_dynamodb",
        "self",
        "de767b42ece7b4631fc785fee5c610824bf7f71ccfa81e8929467e949d8f3a72",
    ),
    Patched(
        "moto.sqs.models",
        "Queue.wait_for_messages",
        "moto_server.prompt_revisible_messages",
        "self, timeout: int",
        "41159dfa48a413b7c1a78a28868891d8b4e278b2d571af7af20269309df5682f",
    ),
    Patched(
        "moto.core.utils",
        "unix_time_millis",
        "moto_server.fast_sqs",
        "dt: datetime.datetime | None=None",
        "ae141de7c408f82f3874f6c25241063082759ab5503a8ce94b8abbd89cf6338e",
    ),
    Patched(
        "moto.core.utils",
        "unix_time",
        "moto_server.fast_sqs",
        "dt: datetime.datetime | None=None",
        "024e246b5611fe7f2c7677f15be52f18c2a172fa64d48d573480a24ff61fbc19",
    ),
    Patched(
        "moto.sqs.models",
        "SQSBackend.is_message_valid_based_on_retention_period",
        "moto_server.fast_sqs",
        "self, queue_name: str, message: Message",
        "1421a318990dc394121d02e5a848b95e908271c71e1a47ea737a8f5ec9edca2a",
    ),
    Patched(
        "moto.moto_server.werkzeug_app",
        "DomainDispatcherApplication.get_backend_for_host",
        "moto_server.quick_dispatch",
        "self, host: str | None",
        "59b5f012a2f85b6076e657c4f635f9661fa57dd3e1c9875bcd606507dd8b59c6",
    ),
    Patched(
        "moto.s3.responses",
        "S3Response.get_object",
        "moto_server.forbid_missing_keys",
        "self",
        "a6c6c59c7b156c92100112fe613dec87de0726ea78aca06854317097a5912ac8",
    ),
    Patched(
        "moto.s3.responses",
        "S3Response.head_object",
        "moto_server.forbid_missing_keys",
        "self, bucket_name: str, query: dict[str, Any], key_name: str, headers: dict[str, Any]",
        "e81b795b84ffb50e2a26843a8136bfa25b230f2bdfca5203d29c2d478866671a",
    ),
    Patched(
        "moto.cloudwatch.models",
        "Statistics.get_statistics_for_type",
        "moto_server.percentile_statistics",
        "self, stat: str",
        "446aba6dcc89fa8c57b54af16a99d6facc0ea745757fc8bae10eafa74441dcbd",
    ),
    Patched(
        "moto.moto_server.werkzeug_app",
        "DomainDispatcherApplication.__call__",
        "call_log.record_moto_calls",
        "self, environ: dict[str, Any], start_response: Any",
        "d311103feadda84d34232d7f933c0c2c90416cdedb21e5ff6cca8c6d460c34a4",
    ),
)


def upstream_definition(module: str, qualname: str) -> ast.FunctionDef | ast.AsyncFunctionDef:
    """The definition of ``qualname`` in ``module``'s source file (a module's package ``__init__`` included)."""
    spec = importlib.util.find_spec(module)
    assert spec is not None and spec.origin, f"moto has no module {module}"
    tree = ast.parse(Path(spec.origin).read_text(encoding="utf-8"))
    scope: list[ast.stmt] = tree.body
    *classes, name = qualname.split(".")
    for class_name in classes:
        found = [n for n in scope if isinstance(n, ast.ClassDef) and n.name == class_name]
        assert found, f"{module} has no class {class_name}"
        scope = found[0].body
    functions = [n for n in scope if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name == name]
    assert functions, f"{module} has no function {qualname}"
    return functions[-1]


def fingerprint(module: str, qualname: str) -> tuple[str, str]:
    """``(signature, sha256 of the definition)`` of an upstream function, comments and layout left out."""
    node = upstream_definition(module, qualname)
    return ast.unparse(node.args), hashlib.sha256(ast.unparse(node).encode()).hexdigest()


def test_moto_is_the_pinned_version() -> None:
    assert moto.__version__ == PINNED_MOTO, (
        f"moto {moto.__version__} is installed, the local stack's patches were checked against {PINNED_MOTO} "
        "(pyproject.toml pins it): re-check each patch listed in docs/decisions.md D76, then update the pin, "
        "PINNED_MOTO and the fingerprints here"
    )


@pytest.mark.parametrize("patched", PATCHED, ids=lambda p: f"{p.module}.{p.qualname}")
def test_patched_moto_function_is_unchanged(patched: Patched) -> None:
    signature, source_sha256 = fingerprint(patched.module, patched.qualname)
    assert (signature, source_sha256) == (patched.signature, patched.source_sha256), (
        f"moto's {patched.module}.{patched.qualname} changed (signature now ({signature}), source sha256 "
        f"{source_sha256}): re-check local_stack.{patched.patch} against the new code (docs/decisions.md D76), "
        "then record the new fingerprint here"
    )


@pytest.mark.parametrize(
    ("module", "imported", "patch"),
    [
        ("moto.sqs.models", "unix_time_millis", "moto_server.fast_sqs"),
        ("moto.sqs.models", "unix_time", "moto_server.fast_sqs"),
        ("moto.dynamodb.models", "copy", "moto_server.copy_only_touched_items"),
    ],
)
def test_names_a_patch_replaces_in_a_moto_module_are_still_imported_there(
    module: str, imported: str, patch: str
) -> None:
    spec = importlib.util.find_spec(module)
    assert spec is not None and spec.origin
    tree = ast.parse(Path(spec.origin).read_text(encoding="utf-8"))
    names = {
        alias.asname or alias.name
        for node in tree.body
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in node.names
    }
    assert imported in names, (
        f"{module} no longer imports {imported}, which local_stack.{patch} replaces in that module: re-check the patch "
        "(docs/decisions.md D76)"
    )
