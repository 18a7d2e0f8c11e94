"""The subprocess that runs a user's script kernel for the gpuemu daemon (docs/script-kernels.md).

Started as::

    python .../gpuemu/_script_runner.py --script FILE.py --function FUNC \
        --framework numpy|torch|cupy|jax|tensorflow [--device cpu]

It is run by file path, not as ``-m gpuemu._script_runner``: importing the ``gpuemu`` package would
load its compiled module, which this process must not depend on. Only the standard library and
numpy are imported up front (and ``_frameworks.py`` beside this file, by path); torch, CuPy, JAX or
TensorFlow only when ``--framework`` names it.

Protocol, on the stdin/stdout it was started with (binary): every message is a u64 little-endian
length followed by one frame in gpuemu's frame format (docs/protocol.md, "Framing")::

    "GEMU" | u32 LE header length H | H bytes of JSON | zero padding to a multiple of 64 |
    payload: each tensor's whole storage at its 64-byte aligned data_offset

where the header's ``"tensors"`` lists ``{key, dtype, shape, strides, offset, storage_nbytes,
data_offset}`` (strides and offset in elements, data_offset relative to the payload).

1. The runner sends a hello: ``{"ready": true, "python": ..., "framework": ..., "pid": ...}``, or
   ``{"ready": false, "stage": "framework"|"script", "error": ..., "traceback": ...}`` when numpy
   / torch, or the script and its function, cannot be loaded (and then exits).
2. Per request ``{"case": {op, dtype, dims, attrs, inputs: {name: {layout, ...}}}, "absent": [...]}``
   with tensors ``inputs/<name>``, it calls ``FUNC(inputs)`` (every input by name, every attr by
   name, schema inputs the case leaves out as None) and answers
   ``{"ok": true, "outputs": ["outputs/0", ...]}`` with contiguous output tensors, or
   ``{"ok": false, "error": "<type>: <message>", "traceback": ...}``.
3. End of input: the runner exits.

The kernel's own writes to stdout (print, os.write(1, ...)) go to stderr: the protocol uses a
private duplicate of the original stdout, and fd 0 is pointed at /dev/null.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import struct
import sys
import traceback

_ALIGN = 64
_MAX_FRAME = 4 << 30

class ProtocolError(Exception):
    pass


# ---------------------------------------------------------------------------------------------
# Frames


def _align(n: int) -> int:
    return (n + _ALIGN - 1) // _ALIGN * _ALIGN


def decode_frame(buf: bytearray):
    """(header, {key: (descriptor, memoryview of the storage bytes)})."""
    if len(buf) < 8 or bytes(buf[:4]) != b"GEMU":
        raise ProtocolError("frame does not start with the magic \"GEMU\"")
    (hlen,) = struct.unpack_from("<I", buf, 4)
    if 8 + hlen > len(buf):
        raise ProtocolError("header length runs past the end of the frame")
    header = json.loads(bytes(buf[8:8 + hlen]).decode("utf-8"))
    if not isinstance(header, dict):
        raise ProtocolError("header must be a JSON object")
    head = _align(8 + hlen)
    view = memoryview(buf)
    tensors = {}
    for d in header.pop("tensors", []) or []:
        start = head + int(d["data_offset"])
        end = start + int(d["storage_nbytes"])
        if end > len(buf):
            raise ProtocolError(f"tensor {d.get('key')!r} runs past the end of the frame")
        tensors[d["key"]] = (d, view[start:end])
    return header, tensors


def encode_frame(header: dict, tensors=()) -> bytearray:
    """tensors: [(key, dtype name, shape, contiguous storage bytes)]."""
    descs = []
    payload = 0
    for key, dtype, shape, data in tensors:
        shape = [int(s) for s in shape]
        strides = []
        step = 1
        for s in reversed(shape):
            strides.append(step)
            step *= max(s, 1)
        strides.reverse()
        descs.append({"key": key, "dtype": dtype, "shape": shape, "strides": strides, "offset": 0,
                      "storage_nbytes": len(data), "data_offset": payload})
        payload = _align(payload + len(data))
    header = dict(header)
    header["tensors"] = descs
    text = json.dumps(header, separators=(",", ":"), allow_nan=True, default=str).encode("utf-8")
    head = _align(8 + len(text))
    out = bytearray(head + payload)
    out[0:4] = b"GEMU"
    struct.pack_into("<I", out, 4, len(text))
    out[8:8 + len(text)] = text
    for desc, (_, _, _, data) in zip(descs, tensors):
        at = head + desc["data_offset"]
        out[at:at + len(data)] = data
    return out


class Channel:
    """Length-prefixed frames over two file descriptors."""

    def __init__(self, fd_in: int, fd_out: int):
        self.fd_in = fd_in
        self.fd_out = fd_out

    def _read_exact(self, n: int):
        buf = bytearray(n)
        view = memoryview(buf)
        got = 0
        while got < n:
            k = os.readv(self.fd_in, [view[got:]])
            if k == 0:
                if got == 0:
                    return None
                raise ProtocolError(f"input ended after {got} of {n} bytes")
            got += k
        return buf

    def receive(self):
        """The next frame's bytes, or None at end of input."""
        prefix = self._read_exact(8)
        if prefix is None:
            return None
        (n,) = struct.unpack("<Q", prefix)
        if n > _MAX_FRAME:
            raise ProtocolError(f"frame of {n} bytes exceeds the 4 GiB limit")
        body = self._read_exact(n) if n else bytearray()
        if body is None:
            raise ProtocolError("input ended inside a frame")
        return body

    def send(self, frame):
        for part in (struct.pack("<Q", len(frame)), frame):
            data = memoryview(part)
            while data:
                k = os.write(self.fd_out, data)
                data = data[k:]


# ---------------------------------------------------------------------------------------------
# Inputs and outputs: gpuemu/_frameworks.py, loaded by path (importing the gpuemu package would
# load its compiled module)


def load_frameworks():
    """gpuemu/_frameworks.py (beside this file) as a private module."""
    name = "_gpuemu_script_frameworks"
    if name in sys.modules:
        return sys.modules[name]
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_frameworks.py")
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def output_tensors(fw, result):
    """[(key, dtype name, shape, bytes)] of what the kernel returned: one output, or a tuple/list
    of them; an explicit (array, "bfloat16") pair is one output. Float values of bfloat16/fp8
    outputs are sent as they are (the daemon rounds them)."""
    if isinstance(result, (list, tuple)) and not (isinstance(result, tuple) and len(result) == 2
                                                  and isinstance(result[1], str)):
        items = list(result)
    else:
        items = [result]
    out = []
    for i, v in enumerate(items):
        name, arr = fw.output_array(v, None, None)
        out.append((f"outputs/{i}", name, arr.shape, arr.tobytes()))
    return out


# ---------------------------------------------------------------------------------------------
# The kernel


def load_function(script: str, function: str):
    path = os.path.abspath(script)
    directory = os.path.dirname(path)
    if directory not in sys.path:
        sys.path.insert(0, directory)  # the script's sibling modules import as usual
    stem = os.path.splitext(os.path.basename(path))[0]
    name = stem if stem.isidentifier() and stem not in sys.modules else "gpuemu_script_kernel"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path} as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    obj = module
    for part in function.split("."):
        if not hasattr(obj, part):
            raise AttributeError(f"{path} has no function '{function}'")
        obj = getattr(obj, part)
    if not callable(obj):
        raise TypeError(f"'{function}' in {path} is not callable ({type(obj).__name__})")
    return obj


def _is_ours(filename: str) -> bool:
    return (filename == __file__ or filename.startswith("<frozen importlib")
            or filename.endswith(os.path.join("gpuemu", "torch_ops", "_load.py")))


def _strip(te: traceback.TracebackException, seen=None) -> None:
    """Drops this runner's and importlib's frames, so the traceback shows the user's code only."""
    seen = set() if seen is None else seen
    if id(te) in seen:
        return
    seen.add(id(te))
    te.stack = traceback.StackSummary.from_list([f for f in te.stack if not _is_ours(f.filename)])
    for nested in (te.__cause__, te.__context__):
        if nested is not None:
            _strip(nested, seen)


def _traceback_text(exc: BaseException) -> str:
    te = traceback.TracebackException(type(exc), exc, exc.__traceback__)
    _strip(te)
    text = "".join(te.format())
    # Nothing of the user's code in it: the error line alone says it all.
    return "" if text == "".join(te.format_exception_only()) else text


def _error_text(exc: BaseException) -> str:
    msg = str(exc)
    return f"{type(exc).__name__}: {msg}" if msg else type(exc).__name__


def handle(np, fw, framework, device, fn, header, tensors):
    case = header.get("case")
    if not isinstance(case, dict):
        raise ProtocolError("the request has no 'case' object")
    kwargs = {}
    attrs = case.get("attrs") or {}
    if isinstance(attrs, dict):
        kwargs.update(attrs)
    for name in header.get("absent") or []:
        kwargs[name] = None
    prefix = "inputs/"
    names = list((case.get("inputs") or {}).keys())
    names += [k[len(prefix):] for k in tensors if k.startswith(prefix) and k[len(prefix):] not in names]
    for name in names:
        key = prefix + name
        if key not in tensors:
            raise ProtocolError(f"the request carries no tensor '{key}'")
        desc, storage = tensors[key]
        kwargs[name] = fw.make_input(framework, desc["dtype"], desc["shape"], desc["strides"], desc["offset"],
                                     np.frombuffer(storage, dtype=np.uint8), device).tensor
    result = fn(dict(kwargs))
    k = header.get("derive_bounds")
    if isinstance(k, int) and k > 0 and framework == "numpy":
        values = list(result) if isinstance(result, (list, tuple)) else [result]
        if len(values) == k:  # a reference that returns values only: its condition term, derived
            c_acc = derived_bounds(fn, kwargs, k)
            if c_acc is not None:
                result = values + c_acc
    return output_tensors(fw, result)


def handle_torch_op(np, fw, op, header, tensors, checked):
    """One case's reference of a torch op (``--mode torch_op``): its value, c_acc and c_in per
    output (3k arrays, docs/torch-ops.md), from the case's exact inputs. The request carries the
    schema the daemon judges with (the run's, or a stored failure's); the op in the file must still
    infer it, or its references would belong to another op."""
    expected = header.get("schema")
    if expected is not None and not checked:
        import json

        want = json.loads(expected) if isinstance(expected, str) else expected
        have = json.loads(op.schema_json())
        if want != have:
            raise ValueError(f"the torch op '{op.name}' now infers another schema than the one this run or stored "
                             "failure holds (its file changed): run it again from the file as it is")
        checked.append(True)
    case = header.get("case")
    if not isinstance(case, dict):
        raise ProtocolError("the request has no 'case' object")
    inputs = {}
    prefix = "inputs/"
    for key, (desc, storage) in tensors.items():
        if not key.startswith(prefix):
            continue
        a = fw.make_input("numpy", desc["dtype"], desc["shape"], desc["strides"], desc["offset"],
                          np.frombuffer(storage, dtype=np.uint8), "cpu").tensor
        a = np.asarray(a)
        inputs[key[len(prefix):]] = a.astype(np.float64) if a.dtype.kind == "f" else a.astype(np.int64)
    parts = op.reference(inputs, dict(case.get("attrs") or {}), dict(case.get("dims") or {}), case["dtype"])
    arrays = [np.ascontiguousarray(p[0], dtype=np.float64) for p in parts]
    arrays += [np.ascontiguousarray(p[1], dtype=np.float64) for p in parts]
    arrays += [np.ascontiguousarray(p[2], dtype=np.float64) for p in parts]
    return output_tensors(fw, arrays)


def load_torch_op_here(script: str, name: str):
    """The torch op ``name`` in ``script``, through the gpuemu package this runner belongs to."""
    package_parent = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    try:
        import gpuemu  # noqa: F401  (the interpreter's own, when installed)
    except ImportError:
        sys.path.append(package_parent)
    from gpuemu.torch_ops._load import load_torch_op

    return load_torch_op(script, name)


_TRACER = []


def derived_bounds(fn, kwargs, k):
    """c_acc of each output of a numpy reference that returned values only, derived op by op
    (gpuemu/torch_ops/_numpy.py, loaded by path with the two modules it needs); None where torch is
    not installed here or the reference uses something the analysis does not follow (the reference's
    values then stand with output rounding alone, as before)."""
    if not _TRACER:
        try:
            import types

            pkg = types.ModuleType("_gpuemu_torch_ops")
            pkg.__path__ = [os.path.join(os.path.dirname(os.path.abspath(__file__)), "torch_ops")]
            sys.modules["_gpuemu_torch_ops"] = pkg
            import importlib

            _TRACER.append(importlib.import_module("_gpuemu_torch_ops._numpy"))
        except Exception:  # noqa: no torch here: no derivation
            _TRACER.append(None)
    tracer = _TRACER[0]
    if tracer is None:
        return None
    try:
        return tracer.derive(fn, kwargs, k)
    except Exception as exc:  # noqa: an op without a rule: the values stand alone
        print(f"gpuemu: the reference's condition term was not derived: {_error_text(exc)}", file=sys.stderr)
        return None


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="gpuemu script-kernel runner (spoken to by the daemon)")
    parser.add_argument("--script", required=True)
    parser.add_argument("--function", required=True)
    parser.add_argument("--framework", choices=("numpy", "torch", "cupy", "jax", "tensorflow"), default="numpy")
    parser.add_argument("--device", default="cpu")
    # torch_op: --function names a gpuemu.torch_op in the script, whose reference (value, c_acc,
    # c_in per output) answers each case (docs/torch-ops.md, "In gpuemu.toml")
    parser.add_argument("--mode", choices=("kernel", "torch_op"), default="kernel")
    args = parser.parse_args(argv)

    # The protocol gets private copies of fds 0 and 1; the kernel's stdout goes to stderr and its
    # stdin reads nothing.
    proto_in = os.dup(0)
    proto_out = os.dup(1)
    os.set_inheritable(proto_in, False)
    os.set_inheritable(proto_out, False)
    os.dup2(2, 1)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    try:
        sys.stdout.reconfigure(line_buffering=True)
    except (AttributeError, ValueError):
        pass
    channel = Channel(proto_in, proto_out)

    hello = {"ready": True, "python": sys.version.split()[0], "framework": args.framework,
             "device": args.device, "pid": os.getpid()}
    stage = "framework"  # then "script": which of the two could not be loaded
    try:
        import numpy as np

        hello["numpy"] = np.__version__
        fw = load_frameworks()
        if args.framework != "numpy":
            hello[args.framework] = getattr(fw.require(args.framework), "__version__", "")
        stage = "script"
        if args.framework == "numpy" and args.device != "cpu":
            raise ValueError(f"framework 'numpy' runs on the CPU only (device '{args.device}' asked)")
        if args.mode == "torch_op":
            fn = load_torch_op_here(args.script, args.function)
            hello["torch_op"] = fn.name
            hello["schema"] = fn.schema_json()  # what `gpuemu ci` reads (resolve_torch_ops)
            hello["notes"] = list(getattr(fn, "notes", []))
            hello["envelope"] = float(getattr(fn, "envelope", 2.0))
        else:
            fn = load_function(args.script, args.function)
    except BaseException as exc:  # noqa: the script's import may raise anything, SystemExit included
        refusal = {"ready": False, "stage": stage, "error": _error_text(exc), "traceback": _traceback_text(exc)}
        try:
            channel.send(encode_frame(refusal))
        except OSError:
            pass
        return 1
    try:
        channel.send(encode_frame(hello))
    except OSError:
        return 0

    checked = []  # torch_op: the schema was checked once against the request's
    while True:
        try:
            body = channel.receive()
        except ProtocolError as exc:
            print(f"gpuemu script runner: {exc}", file=sys.stderr)
            return 2
        if body is None:
            return 0
        try:
            header, tensors = decode_frame(body)
            if args.mode == "torch_op":
                outputs = handle_torch_op(np, fw, fn, header, tensors, checked)
            else:
                outputs = handle(np, fw, args.framework, args.device, fn, header, tensors)
            reply = encode_frame({"ok": True, "outputs": [o[0] for o in outputs]}, outputs)
        except BaseException as exc:  # noqa: a kernel's exception (even SystemExit) fails one case only
            reply = encode_frame({"ok": False, "error": _error_text(exc), "traceback": _traceback_text(exc)})
        finally:
            try:
                sys.stdout.flush()
                sys.stderr.flush()
            except Exception:  # noqa: a closed stream must not end the runner
                pass
        try:
            channel.send(reply)
        except OSError:  # the daemon went away
            return 0


if __name__ == "__main__":
    # Run by path, Python puts this file's directory (the gpuemu package) first on sys.path, where
    # its modules (errors.py, dtypes.py, ...) would shadow the user's imports: take it off.
    if sys.path and os.path.abspath(sys.path[0] or ".") == os.path.dirname(os.path.abspath(__file__)):
        del sys.path[0]
    sys.exit(main())
