"""schemas/op.schema.json is the published format of an op schema (docs/schemas.md): it is itself a
valid JSON Schema, every built-in schema under schemas/ops/ validates against it, and documents the
C++ parser rejects for a wrong type of a key are rejected by it too (so an editor's validation and
the daemon agree on what a schema file may say)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

jsonschema = pytest.importorskip("jsonschema")

ROOT = Path(__file__).resolve().parents[2]
FORMAT = json.loads((ROOT / "schemas" / "op.schema.json").read_text())
OPS = sorted((ROOT / "schemas" / "ops").glob("*.json"))


def validator():
    cls = jsonschema.validators.validator_for(FORMAT)
    cls.check_schema(FORMAT)
    return cls(FORMAT)


def test_the_format_is_a_valid_json_schema_and_there_are_builtin_ops():
    validator()
    assert len(OPS) >= 41


@pytest.mark.parametrize("path", OPS, ids=lambda p: p.stem)
def test_builtin_schema_validates(path):
    errors = [f"{list(e.path)}: {e.message}" for e in validator().iter_errors(json.loads(path.read_text()))]
    assert not errors, errors


def test_wrong_types_of_the_newer_keys_are_rejected():
    softmax = json.loads((ROOT / "schemas" / "ops" / "softmax.json").read_text())
    assert softmax["inputs"][0]["any_leading_dims"] is True and softmax["attrs"]["dim"]["dim_of"] == "x"
    v = validator()
    for path, value in ((("inputs", 0, "any_leading_dims"), "yes"), (("attrs", "dim", "dim_of"), 1),
                        (("attrs", "dim", "colour"), "red")):
        doc = copy.deepcopy(softmax)
        node = doc
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value
        assert list(v.iter_errors(doc)), path
