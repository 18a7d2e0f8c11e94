"""``python -m gpuemu.torch_ops schema FILE.py:NAME``: prints the schema a torch op infers, as JSON
(``{"name", "schema", "notes"}``): what ``gpuemu ci`` reads for a ``[custom_ops.X] torch_op =``
entry of gpuemu.toml (docs/torch-ops.md). Exit 2, with the reason on stderr, when the file does not
load or NAME is not a torch op."""

import argparse
import json
import sys
import traceback

from ..errors import GpuemuError


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gpuemu.torch_ops")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("schema", help="print the schema a torch op infers (JSON)")
    p.add_argument("target", metavar="FILE.py:NAME")
    args = parser.parse_args(argv)
    script, sep, name = args.target.rpartition(":")
    if not sep or not script or not name:
        print(f"expected FILE.py:NAME, got '{args.target}'", file=sys.stderr)
        return 2
    from ._load import load_torch_op

    try:
        op = load_torch_op(script, name)
        doc = {"name": op.name, "schema": op.schema_json(), "notes": list(getattr(op, "notes", []))}
    except GpuemuError as exc:
        print(str(exc), file=sys.stderr)
        return 2
    except BaseException as exc:  # noqa: the user's file may raise anything at import
        print(f"{args.target} could not be loaded: {type(exc).__name__}: {exc}", file=sys.stderr)
        traceback.print_exc(file=sys.stderr)
        return 2
    json.dump(doc, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
