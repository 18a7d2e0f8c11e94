"""The subprocess that runs a user's script kernel for the gpuemu daemon (docs/script-kernels.md).

Started as::

    python .../gpuemu/_script_runner.py --script FILE.py --function FUNC \
        --framework numpy|torch [--device cpu]

It is run by file path, not as ``-m gpuemu._script_runner``: importing the ``gpuemu`` package would
load its compiled module, which this process must not depend on. Only the standard library and
numpy are imported up front; torch only with ``--framework torch``.

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

# gpuemu dtype name <-> numpy dtype string, for dtypes numpy holds natively.
_NUMPY_NATIVE = {
    "float64": "<f8",
    "float32": "<f4",
    "float16": "<f2",
    "int8": "i1",
    "int16": "<i2",
    "int32": "<i4",
    "int64": "<i8",
    "uint8": "u1",
    "bool": "?",
}
# Dtypes numpy has no type for: their storage (bits) dtype.
_BITS = {"bfloat16": "<u2", "float8_e4m3fn": "u1", "float8_e5m2": "u1"}


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
# Inputs

_FP8_TABLES = {}


def _fp8_table(np, dtype: str):
    """float32 value of each of the 256 bit patterns (exact)."""
    table = _FP8_TABLES.get(dtype)
    if table is not None:
        return table
    bits = np.arange(256, dtype=np.uint32)
    if dtype == "float8_e5m2":
        # e5m2 is the upper byte of an IEEE binary16.
        table = (bits.astype(np.uint16) << 8).view(np.float16).astype(np.float32)
    else:  # float8_e4m3fn: bias 7, no infinities, S.1111.111 is NaN
        sign = np.where(bits & 0x80, -1.0, 1.0)
        exp = (bits >> 3) & 0xF
        man = (bits & 0x7).astype(np.float64)
        mag = np.where(exp == 0, man * 2.0 ** -9, (1.0 + man / 8.0) * np.exp2(exp.astype(np.float64) - 7.0))
        mag = np.where((bits & 0x7F) == 0x7F, np.nan, mag)
        table = np.copysign(mag, sign).astype(np.float32)
    _FP8_TABLES[dtype] = table
    return table


def _decode_to_f32(np, dtype: str, storage):
    """The whole storage of a bfloat16 or fp8 tensor as exact float32 values."""
    if dtype == "bfloat16":
        bits = np.frombuffer(storage, dtype="<u2")
        return (bits.astype(np.uint32) << 16).view(np.float32)
    return _fp8_table(np, dtype)[np.frombuffer(storage, dtype=np.uint8)]


def numpy_input(np, desc, storage):
    dtype = desc["dtype"]
    shape = tuple(int(s) for s in desc["shape"])
    strides = [int(s) for s in desc["strides"]]
    offset = int(desc["offset"])
    if dtype in _NUMPY_NATIVE:
        base = np.frombuffer(storage, dtype=_NUMPY_NATIVE[dtype]) if len(storage) else np.empty(0, _NUMPY_NATIVE[dtype])
    elif dtype in _BITS:
        base = _decode_to_f32(np, dtype, storage)
    else:
        raise ProtocolError(f"unknown dtype {dtype!r}")
    if len(base) == 0:
        return np.empty(shape, dtype=base.dtype)
    base = base.copy() if not base.flags.writeable else base
    item = base.dtype.itemsize
    return np.ndarray(shape, dtype=base.dtype, buffer=base, offset=offset * item,
                      strides=tuple(s * item for s in strides))


class TorchSupport:
    def __init__(self, device: str):
        import torch  # noqa: deferred: only --framework torch needs it

        self.torch = torch
        self.device = torch.device(device)
        self.native = {
            "float64": torch.float64, "float32": torch.float32, "float16": torch.float16,
            "bfloat16": torch.bfloat16, "int8": torch.int8, "int16": torch.int16,
            "int32": torch.int32, "int64": torch.int64, "uint8": torch.uint8, "bool": torch.bool,
        }
        self.fp8 = {}
        for name in ("float8_e4m3fn", "float8_e5m2"):
            if hasattr(torch, name):
                self.fp8[name] = getattr(torch, name)

    def input(self, np, desc, storage):
        torch = self.torch
        dtype = desc["dtype"]
        shape = [int(s) for s in desc["shape"]]
        strides = [int(s) for s in desc["strides"]]
        offset = int(desc["offset"])
        if dtype in self.fp8:
            storage_dtype, view_dtype = torch.uint8, self.fp8[dtype]
        elif dtype in ("float8_e4m3fn", "float8_e5m2"):
            # This torch has no fp8 dtypes: exact float32 values instead.
            base = torch.from_numpy(_decode_to_f32(np, dtype, storage).copy())
            return self._place(base.as_strided(shape, strides, offset))
        elif dtype == "bfloat16":
            storage_dtype, view_dtype = torch.int16, torch.bfloat16
        elif dtype in self.native:
            storage_dtype, view_dtype = self.native[dtype], self.native[dtype]
        else:
            raise ProtocolError(f"unknown dtype {dtype!r}")
        if len(storage) == 0:
            base = torch.empty(0, dtype=storage_dtype)
        else:
            base = torch.frombuffer(bytearray(storage), dtype=storage_dtype)
        if view_dtype is not storage_dtype:
            base = base.view(view_dtype)
        return self._place(base.as_strided(shape, strides, offset))

    def _place(self, t):
        return t if self.device.type == "cpu" else t.to(self.device)

    def is_tensor(self, v) -> bool:
        return isinstance(v, self.torch.Tensor)

    def output(self, np, t):
        """(gpuemu dtype name, numpy array of the contiguous storage) of a torch tensor."""
        torch = self.torch
        t = t.detach()
        if t.device.type != "cpu":
            t = t.cpu()
        t = t.contiguous()
        if t.dtype == torch.bfloat16:
            return "bfloat16", t.view(torch.int16).numpy().view(np.uint16)
        for name, dt in self.fp8.items():
            if t.dtype == dt:
                return name, t.view(torch.uint8).numpy()
        for name, dt in self.native.items():
            if t.dtype == dt:
                return name, t.numpy()
        raise TypeError(f"output dtype {t.dtype} is not one gpuemu takes "
                        f"({', '.join(self.native)}{', ' + ', '.join(self.fp8) if self.fp8 else ''})")


# ---------------------------------------------------------------------------------------------
# Outputs


def _numpy_name(np, arr, value) -> str:
    if arr.dtype == np.dtype(object):
        raise TypeError(f"the kernel returned a {type(value).__name__}, not an array or tensor")
    for name, code in _NUMPY_NATIVE.items():
        if arr.dtype == np.dtype(code):
            return name
    raise TypeError(f"output dtype {arr.dtype} is not one gpuemu takes ({', '.join(_NUMPY_NATIVE)}; "
                    "bfloat16/fp8 cases may return float32)")


def output_tensors(np, torch_support, result):
    """[(key, dtype name, shape, bytes)] of what the kernel returned."""

    def is_pair(v):
        return isinstance(v, tuple) and len(v) == 2 and isinstance(v[1], str)

    def one(v):
        if v is None:
            raise TypeError("the kernel returned None where an output was expected")
        if torch_support is not None and torch_support.is_tensor(v):
            name, arr = torch_support.output(np, v)
        elif is_pair(v):
            arr, name = np.asarray(v[0]), v[1]
            if name in _BITS and arr.dtype == np.dtype(_BITS[name]):
                pass  # the dtype's bits
            elif name in _BITS and arr.dtype.kind == "f":
                arr, name = arr.astype(np.float32), "float32"  # rounded by the daemon
            elif name in _NUMPY_NATIVE:
                arr = arr.astype(_NUMPY_NATIVE[name])
            else:
                raise TypeError(f"({type(v[0]).__name__}, {name!r}): unknown dtype {name!r}")
        else:
            arr = np.asarray(v)
            name = _numpy_name(np, arr, v)
        arr = np.ascontiguousarray(arr)
        if arr.dtype.byteorder == ">":
            arr = arr.astype(arr.dtype.newbyteorder("<"))
        return name, arr.shape, arr.tobytes()

    if isinstance(result, (list, tuple)) and not is_pair(result):
        items = list(result)
    else:
        items = [result]
    out = []
    for i, v in enumerate(items):
        name, shape, data = one(v)
        out.append((f"outputs/{i}", name, shape, data))
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
    return filename == __file__ or filename.startswith("<frozen importlib")


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


def handle(np, torch_support, fn, header, tensors):
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
        if torch_support is not None:
            kwargs[name] = torch_support.input(np, desc, storage)
        else:
            kwargs[name] = numpy_input(np, desc, storage)
    result = fn(kwargs)
    return output_tensors(np, torch_support, result)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="gpuemu script-kernel runner (spoken to by the daemon)")
    parser.add_argument("--script", required=True)
    parser.add_argument("--function", required=True)
    parser.add_argument("--framework", choices=("numpy", "torch"), default="numpy")
    parser.add_argument("--device", default="cpu")
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
        torch_support = None
        if args.framework == "torch":
            torch_support = TorchSupport(args.device)
            hello["torch"] = torch_support.torch.__version__
        stage = "script"
        if args.framework == "numpy" and args.device != "cpu":
            raise ValueError(f"framework 'numpy' runs on the CPU only (device '{args.device}' asked)")
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
            outputs = handle(np, torch_support, fn, header, tensors)
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
