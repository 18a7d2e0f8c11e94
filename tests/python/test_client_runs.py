"""Runs on one Client (issue 46, point 6; docs/python.md, "Runs and threads"): each client-side run
is an object with its own state, so two runs on one Client, from two threads, each get their own
results; the cases of get_test_batch stay attached to the batch that handed them out; what cannot
be told apart is refused with an error that says why.

Against a real daemon in a temporary GPUEMU_HOME (its own socket and store), with torch kernels.
The interleavings are forced, not hoped for: a hook in the case hand-off (``_frameworks.make_input``,
which every batch of cases goes through) or in ``Client.request`` holds one thread until the other
has reached the same point, so the runs really overlap on every machine.
"""

from __future__ import annotations

import os
import threading
from typing import Any, Callable, Dict, List, Tuple

import pytest

from daemon_harness import DAEMON, GPUEMU, daemon  # noqa: F401 (daemon: the fixture)

torch = pytest.importorskip("torch")

import gpuemu  # noqa: E402
from gpuemu import Client  # noqa: E402
from gpuemu import _frameworks  # noqa: E402 (the hand-off the tests hook to force interleavings)

pytestmark = pytest.mark.skipif(not (os.path.exists(GPUEMU) and os.path.exists(DAEMON)),
                                reason="gpuemu / gpuemu-daemon not built")

WAIT = 60.0  # seconds a forced rendezvous may take before the test fails (never reached when it works)


# --- kernels -------------------------------------------------------------------------------------

def buggy_softmax(i: Dict[str, Any]) -> Any:
    """Softmax with a wrong scale: every case fails."""
    x = i["x"]
    return (torch.softmax(x.float(), dim=i["dim"]) * 1.05).to(x.dtype)


def correct_softmax(i: Dict[str, Any]) -> Any:
    x = i["x"]
    return torch.softmax(x.float(), dim=i["dim"]).to(x.dtype)


def correct_rms_norm(i: Dict[str, Any]) -> Any:
    x = i["x"].float()
    y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + i["eps"])
    if i["weight"] is not None:
        y = y * i["weight"].float()
    return y.to(i["x"].dtype)


# --- helpers -------------------------------------------------------------------------------------

class _Requests:
    """Every request a Client makes, with the thread that made it (forwarded as it is)."""

    def __init__(self, client: Client, after: Callable[[str, Dict[str, Any]], None] = lambda m, p: None):
        self.calls: List[Tuple[str, str, Dict[str, Any]]] = []
        self._lock = threading.Lock()
        forward = client.request

        def request(method, params=None, tensors=(), timeout=None):
            with self._lock:
                self.calls.append((threading.current_thread().name, method, dict(params or {})))
            reply = forward(method, params, tensors, timeout)
            after(method, dict(params or {}))
            return reply

        client.request = request

    def of(self, thread: str, method: str) -> List[Dict[str, Any]]:
        with self._lock:
            return [p for t, m, p in self.calls if t == thread and m == method]


def _in_threads(**fns: Callable[[], Any]) -> Dict[str, Any]:
    """Runs each function in a thread of its name; their results (or the exception one raised)."""
    out: Dict[str, Any] = {}

    def body(name: str, fn: Callable[[], Any]) -> None:
        try:
            out[name] = fn()
        except BaseException as e:  # noqa: BLE001 (reported by the caller)
            out[name] = e

    threads = [threading.Thread(target=body, args=(n, f), name=n) for n, f in fns.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
        assert not t.is_alive(), f"thread {t.name} did not finish"
    return out


def _results(out: Dict[str, Any]) -> Dict[str, Any]:
    for name, r in out.items():
        if isinstance(r, BaseException):
            raise AssertionError(f"thread {name} raised {type(r).__name__}: {r}") from r
    return out


@pytest.fixture
def rendezvous_in_hand_off(monkeypatch):
    """Two threads meet in the case hand-off: once armed with the two threads' names, the first
    batch of cases each of them receives stops at its first input until the other thread's first
    batch has arrived too. A run that kept its id, options or op on the Client would then read the
    other run's."""
    return _Rendezvous(monkeypatch)


class _Rendezvous:
    def __init__(self, monkeypatch) -> None:
        self.barrier = threading.Barrier(2, timeout=WAIT)
        self.waiting: set = set()
        make_input = _frameworks.make_input

        def hooked(*args, **kwargs):
            name = threading.current_thread().name
            if name in self.waiting:
                self.waiting.discard(name)
                self.barrier.wait()
            return make_input(*args, **kwargs)

        monkeypatch.setattr(_frameworks, "make_input", hooked)

    def arm(self, *names: str) -> None:
        assert len(names) == 2
        self.waiting = set(names)

    @property
    def met(self) -> bool:
        return not self.waiting and not self.barrier.broken


# --- two fuzz runs on one Client -----------------------------------------------------------------

RUNS = {
    "buggy": dict(op="softmax", run_op=buggy_softmax, iterations=40, seed=3, dtypes=["float32"],
                  framework="torch", diagnose_limit=1),
    "correct": dict(op="rms_norm", run_op=correct_rms_norm, iterations=40, seed=5, dtypes=["float32"],
                    framework="torch"),
}


def test_two_fuzz_runs_on_one_client_from_two_threads_each_get_their_own_results(daemon, rendezvous_in_hand_off):
    # what each run gives alone, on a client of its own
    with Client() as alone:
        expected = {name: alone.fuzz_op_client_side(**kw) for name, kw in RUNS.items()}
    assert not expected["buggy"].ok and expected["buggy"].failed > 0 and expected["correct"].ok

    client = Client()
    rec = _Requests(client)
    rendezvous_in_hand_off.arm(*RUNS)
    out = _results(_in_threads(**{name: (lambda kw=kw: client.fuzz_op_client_side(**kw))
                                  for name, kw in RUNS.items()}))
    buggy, correct = out["buggy"], out["correct"]
    assert rendezvous_in_hand_off.met
    # each run judged its own op's cases, under its own seed: the counts and failures are the ones
    # it gets alone, not mixed
    for name, r in out.items():
        e = expected[name]
        assert (r.op, r.seed, r.total, r.passed, r.failed) == (e.op, e.seed, e.total, e.passed, e.failed), name
        assert [f.index for f in r.failures] == [f.index for f in e.failures], name
        assert [f.seed for f in r.failures] == [f.seed for f in e.failures], name
    assert buggy.op == "softmax" and buggy.total == 40 and buggy.failed == expected["buggy"].failed > 0
    assert correct.op == "rms_norm" and correct.ok and correct.passed == 40
    assert all(client.failure(f.id)["op"] == "softmax" for f in buggy.failures)
    # each thread's submissions named its own daemon run, and the two runs differ
    run_ids = {}
    for name in RUNS:
        subs = rec.of(name, "submit_outputs")
        assert subs and all(p["op"] == RUNS[name]["op"] for p in subs)
        ids = {p.get("run_id") for p in subs if "held_id" not in p}
        assert len(ids) == 1 and next(iter(ids)).startswith("run-"), (name, ids)
        run_ids[name] = next(iter(ids))
    assert run_ids["buggy"] != run_ids["correct"]
    # ... and the daemon's books agree: each run's records under its own op, its own cases and failures
    for name, r in out.items():
        other = next(n for n in RUNS if n != name)
        records = client.request("runs", {"op": RUNS[name]["op"]})[0]["runs"]
        mine = [x for x in records if x.get("run_id") == run_ids[name]]
        assert mine and sum(x["total"] for x in mine) == r.total
        assert sorted(i for x in mine for i in x.get("failure_ids", [])) == sorted(f.id for f in r.failures)
        assert not any(x.get("run_id") == run_ids[other] for x in records), "the other run's records under this op"


def test_a_plain_run_beside_a_backward_run_is_not_made_part_of_it(daemon):
    """``backward=True`` runs two client-side runs that name the backward run they are part of; a
    run another thread makes meanwhile on the same Client is part of nothing."""
    client = Client()
    plain_submitted = threading.Event()

    def after(method: str, params: Dict[str, Any]) -> None:
        if threading.current_thread().name == "plain" and method == "submit_outputs":
            plain_submitted.set()

    rec = _Requests(client, after)
    first = [True]

    def rms_waiting_for_the_plain_run(i):  # the backward run stays open until the plain run submitted
        if first[0]:
            first[0] = False
            assert plain_submitted.wait(WAIT)
        x = i["x"]
        y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + i["eps"])
        return y * i["weight"] if i["weight"] is not None else y

    out = _results(_in_threads(
        backward=lambda: client.fuzz_op_client_side("rms_norm", rms_waiting_for_the_plain_run, iterations=20,
                                                    dtypes=["float32"], seed=7, backward=True),
        plain=lambda: client.fuzz_op_client_side("softmax", buggy_softmax, iterations=20, dtypes=["float32"],
                                                 seed=9, framework="torch", diagnose_limit=0)))
    assert out["backward"].ok and out["backward"].gradients.passed == 20, str(out["backward"])
    assert out["plain"].failed > 0 and out["plain"].gradients is None
    assert all("part_of" not in p for p in rec.of("plain", "submit_outputs"))
    parts = [p["part_of"]["part"] for p in rec.of("backward", "submit_outputs") if "held_id" not in p]
    assert parts and set(parts) == {"forward", "gradients"}
    records = client.request("runs", {"op": "softmax"})[0]["runs"]
    assert records and all(not r.get("part_of") for r in records)


def test_many_runs_on_one_client_from_four_threads(daemon):
    client = Client()
    jobs = {f"t{k}": dict(RUNS["buggy" if k % 2 else "correct"], seed=100 + k, iterations=24) for k in range(4)}
    with Client() as alone:
        expected = {name: alone.fuzz_op_client_side(**kw) for name, kw in jobs.items()}
    out = _results(_in_threads(**{name: (lambda kw=kw: client.fuzz_op_client_side(**kw))
                                  for name, kw in jobs.items()}))
    for name, r in out.items():
        e = expected[name]
        assert (r.op, r.total, r.passed, [f.index for f in r.failures]) == \
            (e.op, e.total, e.passed, [f.index for f in e.failures]), name


# --- get_test_batch / submit_output ---------------------------------------------------------------

def test_interleaved_batches_of_two_threads_are_judged_against_their_own_cases(daemon, rendezvous_in_hand_off):
    client = Client()

    def batch_then_submit(op: str, kernel: Callable, seed: int) -> List[bool]:
        batch = client.get_test_batch(op, count=8, seed=seed, dtypes=["float32"], framework="torch")
        return [client.submit_output(op, c["inputs"], kernel({**c["inputs"], **c["attrs"]}), c["seed"]).passed
                for c in batch]

    rendezvous_in_hand_off.arm("softmax", "rms_norm")
    out = _results(_in_threads(softmax=lambda: batch_then_submit("softmax", correct_softmax, 3),
                               rms_norm=lambda: batch_then_submit("rms_norm", correct_rms_norm, 3)))
    assert rendezvous_in_hand_off.met
    assert out["softmax"] == [True] * 8 and out["rms_norm"] == [True] * 8


def test_two_batches_of_one_op_and_seed_under_other_options_keep_their_cases(daemon):
    """Two batches of softmax from the same seed, one float32 and one float16: their cases share
    case seeds, and each output is judged against the case that batch handed out."""
    client = Client()
    f32 = client.get_test_batch("softmax", count=4, seed=21, dtypes=["float32"], framework="torch")
    f16 = client.get_test_batch("softmax", count=4, seed=21, dtypes=["float16"], framework="torch")
    assert [c["seed"] for c in f32] == [c["seed"] for c in f16]
    assert {c["dtype"] for c in f32} == {"float32"} and {c["dtype"] for c in f16} == {"float16"}
    # interleaved: a case of the first batch, then the same seed's case of the second, ...
    for a, b in zip(f32, f16):
        for c in (a, b):
            v = client.submit_output("softmax", c["inputs"], correct_softmax({**c["inputs"], **c["attrs"]}),
                                     c["seed"])
            assert v.passed, (c["dtype"], v.message)
            assert (v.seed, v.index) == (c["seed"], c["index"])
        # the buggy output of the first batch's case fails as that case's
        v = client.submit_output("softmax", a["inputs"], buggy_softmax({**a["inputs"], **a["attrs"]}), a["seed"])
        assert not v.passed and "expected float16" not in v.message, v.message
    # the inputs the kernel got (not the dict around them) also tell the batches apart
    x = f32[0]["inputs"]["x"]
    assert client.submit_output("softmax", {"x": x}, correct_softmax({"x": x, **f32[0]["attrs"]}),
                                f32[0]["seed"]).passed


def test_a_case_two_batches_handed_out_differently_is_refused_when_nothing_tells_them_apart(daemon):
    client = Client()
    a = client.get_test_batch("softmax", count=1, seed=21, dtypes=["float32"], framework="torch")[0]
    client.get_test_batch("softmax", count=1, seed=21, dtypes=["float16"], framework="torch")
    with pytest.raises(gpuemu.ValidationError, match=rf"case seed {a['seed']} of 'softmax' was handed out by 2 "
                                                     r"batches.*pass the case's inputs"):
        client.submit_output("softmax", None, correct_softmax({**a["inputs"], **a["attrs"]}), a["seed"])
    # a batch fetched twice under the same options hands out the same case: no ambiguity
    b = client.get_test_batch("rms_norm", count=1, seed=4, dtypes=["float32"], framework="torch")[0]
    client.get_test_batch("rms_norm", count=1, seed=4, dtypes=["float32"], framework="torch")
    assert client.submit_output("rms_norm", None, correct_rms_norm({**b["inputs"], **b["attrs"]}), b["seed"]).passed
    with pytest.raises(gpuemu.NotFoundError, match="call get_test_batch first"):
        client.submit_output("softmax", None, correct_softmax({**a["inputs"], **a["attrs"]}), 12345)


# --- a run on a Client closed meanwhile -----------------------------------------------------------

def test_closing_the_client_during_a_run_of_another_thread_ends_that_run_with_connect_error(daemon):
    client = Client()
    started, closed = threading.Event(), threading.Event()

    def kernel(i):
        started.set()
        assert closed.wait(WAIT)
        return correct_softmax(i)

    def close_when_started():
        assert started.wait(WAIT)
        client.close()
        closed.set()

    out = _in_threads(run=lambda: client.fuzz_op_client_side("softmax", kernel, iterations=8, seed=1,
                                                             framework="torch", dtypes=["float32"]),
                      closer=close_when_started)
    assert out["closer"] is None
    assert isinstance(out["run"], gpuemu.ConnectError) and "closed" in str(out["run"])
