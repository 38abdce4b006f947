"""The judge/jail channel: what crosses it, how, and what never does."""

from __future__ import annotations

import json
import os
import socket
import struct
import textwrap
import time

import numpy as np
import pytest

from grader.jail import confine
from grader.jailer import jail_client, jail_space
from grader.jailer import zygote as forks
from grader.jailer.remote import JailCachedLM
from grader.suites import common
from grader.wire import protocol as p
from grader.wire import views
from reference.model import Config, Model

from helpers import SETTLE

TINY = Config(vocab_size=12, d_model=16, n_layers=1, n_heads=2, n_kv_heads=1, d_ff=32, max_seq_len=32)


@pytest.fixture(scope="module")
def zygotes():
    """zygotes() -> a jail zygote (grader.jailer.zygote) of the confinement mode in force, as a runner starts
    one: started on first use, one per mode (a zygote forks jails of the mode it started in only)."""
    started: dict[str, forks.Zygote] = {}

    def of_this_mode() -> forks.Zygote:
        mode = confine.mode()
        if mode not in started:
            started[mode] = forks.Zygote()
        return started[mode]

    yield of_this_mode
    for zygote in started.values():
        zygote.stop()


@pytest.fixture(scope="module")
def zygote(zygotes):
    """A jail zygote of the mode this machine picks."""
    return zygotes()


# Every grading forks its jails from a zygote: the quick run tests that path; the slow tests add the fallback, a
# jail started as a new process (KATA_JAIL_FORKS=off, or a zygote that will not fork), which costs 2.5x the time.
@pytest.fixture(params=["forked", pytest.param("new process", marks=pytest.mark.slow)])
def jail_of(request, tmp_path, monkeypatch):
    """jail_of(source) -> the proxy of a kata module `k` holding that source, in its own jail:
    forked by a zygote of the mode in force when it is first called, or (KATA_JAIL_FORKS=off) a new process."""
    forked = request.param == "forked"
    monkeypatch.setenv(forks.VAR, "off")
    monkeypatch.setattr(forks, "_CONNECTION", [])  # this test's own connection
    monkeypatch.setattr(jail_client.SETTINGS, "target", str(tmp_path))
    monkeypatch.setattr(jail_client.SETTINGS, "deadline", None)

    def make(source: str, name: str = "k"):
        if forked and os.environ[forks.VAR] == "off":
            monkeypatch.setenv(forks.VAR, request.getfixturevalue("zygotes")().address())
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(source))
        return jail_client.kata_module(name)

    make.forked = forked
    yield make
    jail_client.stop_all()
    for connection in forks._CONNECTION:
        connection.sock.close()


def roundtrip(value):
    """value encoded by one codec and decoded by another, as over the channel."""
    buffers: list = []
    data = p.Codec().encode(value, buffers)
    return p.Codec().decode(data, buffers)


@pytest.mark.parametrize("dtype", sorted(p.DTYPES))
def test_arrays_of_every_numeric_dtype_cross_bit_for_bit(dtype):
    x = (np.arange(24) % 7).astype(dtype).reshape(2, 3, 4)
    got = roundtrip(x)
    assert got.dtype == x.dtype and got.shape == x.shape and got.tobytes() == x.tobytes()
    assert got.flags.writeable


def test_plain_values_keep_their_types():
    value = {"a": [1, 2.5, None, True], "b": (b"\x00\xff", "text"), 3: np.float32(1.5), "t": np.int8(-3)}
    got = roundtrip(value)
    assert got == value
    assert type(got["b"]) is tuple and type(got[3]) is np.float32 and type(got["t"]) is np.int8


def test_a_non_contiguous_view_crosses_as_its_values():
    x = np.arange(20.0).reshape(4, 5)[:, ::2]
    assert np.array_equal(roundtrip(x), x)


def test_an_array_repeated_in_one_message_crosses_once_and_arrives_as_separate_arrays():
    shared, tokens = np.arange(6.0), [1, 2]
    buffers: list = []
    text = json.dumps(p.Codec().encode([(shared, tokens), (shared, tokens)], buffers))  # as over the channel
    assert len(buffers) == 1
    (a, la), (b, lb) = p.Codec().decode(json.loads(text), buffers)
    a[0] = 99.0
    la.append(3)
    assert b[0] == 0.0 and lb == [1, 2] and shared[0] == 0.0 and tokens == [1, 2]
    buffers = []
    p.Codec().encode([shared.copy(), shared.copy()], buffers)
    assert len(buffers) == 2  # equal but distinct arrays both cross


def test_object_arrays_and_unknown_objects_are_refused():
    with pytest.raises(p.ProtocolError, match="cannot cross"):
        roundtrip(np.array([object()]))
    with pytest.raises(p.ProtocolError, match="cannot cross"):
        roundtrip(object())


def test_an_array_whose_bytes_do_not_fit_its_shape_is_refused():
    data = {"$": "nd", "dtype": "<f4", "shape": [3], "buf": 0}
    with pytest.raises(p.ProtocolError, match="does not fit"):
        p.Codec().decode(data, [b"\x00" * 8])


def test_a_value_nested_past_the_limit_is_refused():
    value: list = []
    for _ in range(p.MAX_DEPTH + 2):
        value = [value]
    with pytest.raises(p.ProtocolError, match="nested"):
        roundtrip(value)


def test_a_frame_of_another_version_or_too_large_is_refused():
    a, b = socket.socketpair()
    with a, b:
        a.sendall(struct.pack("!II", 2, 0) + b"{}")
        with pytest.raises(p.ProtocolError, match="version"):
            p.recv_frame(p.Reader(b))
        a.sendall(struct.pack("!II", p.MAX_HEADER + 1, 0))
        with pytest.raises(p.ProtocolError, match="too large"):
            p.recv_frame(p.Reader(b))


def test_digests_agree_up_to_float_order_and_tell_wrong_results_apart():
    x = np.random.default_rng(0).standard_normal((64, 32)).astype(np.float32)
    assert common.digests_agree(common.digest((x, 3)), common.digest((x[::-1][::-1].copy(), 3)))
    wrong = x.copy()
    wrong[5, 5] += 1
    assert not common.digests_agree(common.digest(wrong), common.digest(x))
    assert not common.digests_agree(common.digest(x[:, :31]), common.digest(x))


def test_a_wrong_timed_result_is_told_by_what_differs_first():
    """The words a WrongWhileTimed says after "returned a wrong result while being timed:"."""
    x = np.random.default_rng(0).standard_normal((4, 8))
    said = {
        "an array of shape [4, 7] where shape [4, 8] was expected": (x[:, :7], x),
        "1 NaN or infinite value where the expected result has 0": (np.where(x == x[0, 0], np.nan, x), x),
        "2 NaN or infinite values where the expected result has 0": (np.where(x >= np.sort(x, None)[-2], np.inf, x), x),
        "an array of dtype kind 'f' where kind 'i' was expected": (x.round(), x.round().astype(np.int64)),
        "values whose sums differ from the expected result's": (x + 1, x),
        "1 results where 2 were expected": ([x], [x, x]),
        "a result of another kind than the expected one": (None, 4),
        "a result that could not be summed": ({**common.digest(x), "sum": None}, x),
        "": ([x.copy(), 3], [x, 3]),
    }
    for words, (got, want) in said.items():
        got = got if isinstance(got, dict) else common.digest(got)  # a digest made by hand stays as it is
        assert common.digest_difference(got, common.digest(want)) == words


def test_digests_tell_apart_a_result_whose_errors_cancel_in_its_sums_but_not_a_few_roundings_the_other_way(
    monkeypatch,
):
    """The red team's fake grouped quantization: one scale for every group, fitted to the timed input's range,
    so its codes sum (and their absolute values sum) to within a tolerance of the right ones', wrong at 8%.
    (The judge draws its projections' weights from fresh entropy; here they are fixed, so the test is.)"""
    weights = np.random.default_rng(2).standard_normal((common.PROJECTIONS, common.PROJECTION_WIDTH))
    monkeypatch.setattr(common, "_projection_weights", weights)
    gen = np.random.default_rng(1)
    x = gen.random((1024, 1024), dtype=np.float32) - np.float32(0.5)
    groups = x.reshape(1024, -1, 32)
    scales = np.abs(groups).max(axis=-1) / np.float32(7)
    codes = np.clip(np.rint(groups / scales[..., None]), -7, 7).astype(np.int8).reshape(x.shape)
    fake = np.clip(np.rint(x / np.float32(0.5 * 32 / 33 / 7)), -7, 7).astype(np.int8)
    right = common.digest([codes, scales])
    assert (
        abs(int(fake.sum(dtype=np.int64)) - int(codes.sum(dtype=np.int64))) <= common.DIGEST_RTOL * np.abs(codes).sum()
    )
    assert not common.digests_agree(common.digest([fake, scales]), right, common.DIGEST_RTOL)
    said = common.digest_difference(common.digest([fake, scales]), right, common.DIGEST_RTOL)
    assert said == "values whose sums match the expected result's but which differ from it"
    flipped = codes.copy()
    flipped.flat[gen.choice(codes.size, 3, replace=False)] += 1  # three ties rounded up instead of down
    assert common.digests_agree(common.digest([flipped, scales]), right, common.DIGEST_RTOL)


def test_views_of_one_buffer_cross_as_it_once_and_come_back_read_only_where_they_lay():
    buffer = np.arange(4 * 10 * 3, dtype=np.float32).reshape(4, 10, 3)
    apart = np.ones(5)
    value = [(buffer[1, :, :4], buffer[2, ::-2]), (buffer[1, :, :7].T, apart), apart]
    buffers: list = []
    planned = views.plan(value, buffers)
    assert len(buffers) == 1 and id(apart) not in planned and len(planned) == 3
    back = [views.decode(data, buffers) for _, data in planned.values()]
    for got, want in zip(back, (buffer[1, :, :4], buffer[2, ::-2], buffer[1, :, :7].T)):
        assert np.array_equal(got, want) and not got.flags.writeable
    # A view's bytes must lie inside what crossed, in a numeric dtype, with a layout that makes sense.
    data = next(iter(planned.values()))[1]
    for wrong in (
        {"offset": len(buffers[0])},
        {"offset": -4},
        {"shape": [99, 3]},
        {"strides": [4]},
        {"dtype": "|O"},
        {"buf": 1},
        {"shape": [0, 3]},
        {"strides": [0, 0], "shape": [2**30, 2**10]},
    ):
        with pytest.raises(p.ProtocolError):
            views.decode({**data, **wrong}, buffers)


def test_views_are_shared_only_where_that_sends_fewer_bytes():
    big = np.zeros((1000, 1000), np.float32)
    buffers: list = []
    assert views.plan([big[0, :4], big[-1, :4]], buffers) == {} and buffers == []  # far apart: each its own bytes
    assert views.plan([big[:2], 3], buffers) == {}  # alone


def test_a_learner_exception_keeps_its_name_its_builtin_base_and_its_line(jail_of):
    k = jail_of("""
        class CacheFullError(ValueError):
            pass

        def fill():
            raise CacheFullError("no room for 3 more tokens")
    """)
    with pytest.raises(k.CacheFullError) as info:
        k.fill()
    assert isinstance(info.value, ValueError) and type(info.value).__name__ == "CacheFullError"
    assert "no room for 3 more tokens" in str(info.value)
    assert "k.py:6 in fill" in str(info.value)


def test_sys_exit_in_learner_code_is_an_ordinary_error_here(jail_of):
    k = jail_of("""
        import sys

        def leave():
            sys.exit(3)
    """)
    with pytest.raises(jail_client.LearnerBaseException) as info:
        k.leave()
    assert type(info.value).__name__ == "SystemExit" and not isinstance(info.value, SystemExit)


def test_learner_objects_stay_in_the_jail_and_answer_through_proxies(jail_of):
    k = jail_of("""
        class Box:
            def __init__(self, n):
                self.items = list(range(n))

            def __len__(self):
                return len(self.items)

            def add(self, x):
                self.items.append(x)
                return self

            @property
            def total(self):
                return sum(self.items)
    """)
    box = k.Box(3)
    assert isinstance(box, jail_client.Remote)
    assert box.add(10) is box  # the same object comes back as the same proxy
    assert (len(box), box.total, box.items) == (4, 13, [0, 1, 2, 10])


def test_a_generator_passed_in_advances_exactly_as_if_used_here(jail_of):
    k = jail_of("""
        def draw(rng, n):
            return rng.random(n)
    """)
    mine, same = np.random.default_rng(5), np.random.default_rng(5)
    got = k.draw(mine, 3)
    assert np.array_equal(got, same.random(3))
    assert mine.random() == same.random()


def test_a_model_is_counted_by_the_judge_while_the_suite_counts_its_work(jail_of):
    k = jail_of("""
        def run(model, tokens):
            return model.forward(tokens)
    """)
    model = Model.random(TINY, seed=1)
    with model.count_work() as work:
        got = k.run(model, [1, 2, 3])
    assert np.allclose(got, model.forward([1, 2, 3]), atol=1e-5)
    assert work.positions == {0: 3}
    assert np.allclose(k.run(model, [4, 5]), model.forward([4, 5]), atol=1e-5)  # a copy in the jail, uncounted


def test_a_counted_models_weights_can_be_neither_read_nor_fetched_in_the_jail(jail_of):
    k = jail_of("""
        from grader.wire import protocol as p
        from grader.jail import server as jail

        def read(model):
            return model.weights["out"]

        def fetch(model):  # the request the jail's proxy would make, forged
            header, _ = model._peer.request(p.Op.GETATTR, obj=jail._Raw(model._ref), name="weights")
            return header["op"], header.get("value")
    """)
    model = Model.random(TINY, seed=3)
    with model.count_work():
        op, value = k.fetch(model)
        assert (op, value) == (p.Op.ERR.value, None)  # the judge refuses, whatever the jail's proxy says
        with pytest.raises(AttributeError, match="keeps this model's weights"):
            k.read(model)


def test_a_secret_model_crosses_as_a_handle_even_while_uncounted_and_each_draw_is_new(jail_of):
    k = jail_of("""
        def run(model, tokens):
            return model.forward(tokens)

        def readable(model):
            return hasattr(model, "weights")
    """)
    model = common.secret_model(TINY)
    assert type(model) is jail_client.SecretModel
    assert not k.readable(model)
    assert np.allclose(k.run(model, [1, 2, 3]), model.forward([1, 2, 3]), atol=1e-5)  # its pieces ran here
    assert not np.array_equal(common.secret_model(TINY).weights["out"], model.weights["out"])


def test_a_jail_cached_lm_is_made_in_the_jail_around_a_copy_or_around_a_handle_that_counts(jail_of):
    k = jail_of("""
        def run(lm, tokens):
            lm.logits(tokens[:2])
            return type(lm).__name__, hasattr(lm.model, "weights"), lm.logits(tokens), lm.calls, lm.positions
    """)
    model = Model.random(TINY, seed=3)
    name, copied, logits, calls, positions = k.run(JailCachedLM(model), [1, 2, 3, 4])
    assert (name, copied, calls, positions) == ("CachedLM", True, 2, 4)  # its cache kept the prefix, there
    assert np.allclose(logits, model.forward([1, 2, 3, 4]), atol=1e-5)
    with model.count_work() as work:
        name, copied, logits, calls, positions = k.run(JailCachedLM(model), [1, 2, 3, 4])
    assert (name, copied, positions) == ("CachedLM", False, 4)  # its pieces ran here
    assert work.positions == {0: 4} and np.allclose(logits, model.forward([1, 2, 3, 4]), atol=1e-5)
    with pytest.raises(ValueError, match="wraps a reference.model.Model, got dict"):
        JailCachedLM({})


def test_a_model_built_in_the_jail_comes_back_as_a_checked_reference_model(jail_of):
    k = jail_of("""
        def halve(model):
            out = model.copy()
            for w in out.weights.values():
                w *= 0.5
            return out
    """)
    model = Model.random(TINY, seed=2)
    got = k.halve(model)
    assert type(got) is Model
    assert np.allclose(got.weights["out"], model.weights["out"] * 0.5)


def test_a_suite_object_offers_the_jail_only_the_methods_it_lists(jail_of):
    class LM:
        __jail_api__ = ("logits",)

        def logits(self, tokens):
            return np.ones((len(tokens), 3))

        def secret(self):
            return "judge internals"

    k = jail_of("""
        def use(lm):
            return lm.logits([1, 2]).shape

        def peek(lm):
            return lm.secret()
    """)
    assert k.use(LM()) == (2, 3)
    with pytest.raises(AttributeError, match="offers"):
        k.peek(LM())


def test_a_hang_times_out_the_check_and_the_next_use_gets_a_fresh_jail(jail_of, monkeypatch):
    import time

    k = jail_of("""
        def spin():
            while True:
                pass

        def one():
            return 1
    """)
    # Started and loaded without a deadline first: on a busy machine a new jail can take longer to import the
    # module than the short deadline below, and a module that does not load in time stays failed.
    assert k.one() == 1
    monkeypatch.setattr(jail_client.SETTINGS, "deadline", time.monotonic() + 0.5)
    with pytest.raises(jail_client.JailTimeout, match="did not finish"):
        k.spin()
    monkeypatch.setattr(jail_client.SETTINGS, "deadline", None)
    assert k.one() == 1


def test_a_dead_jail_is_a_crash_and_its_objects_are_gone(jail_of):
    k = jail_of("""
        import os

        class Thing:
            pass

        def die():
            os._exit(0)
    """)
    thing = k.Thing()
    with pytest.raises(jail_client.JailCrash, match="exited with code 0"):
        k.die()
    with pytest.raises(jail_client.JailCrash, match="before the kata process restarted"):
        thing.anything  # noqa: B018


def _confining_modes() -> list:
    """The confining modes this machine can run: root's own namespaces, and bubblewrap where installed."""
    import os

    modes = []
    if os.geteuid() == 0:
        modes.append("root")
    if confine._bwrap_works():
        modes.append("bwrap")
    return modes or [pytest.param("none", marks=pytest.mark.skip(reason="neither root nor a working bwrap here"))]


@pytest.mark.parametrize("mode", _confining_modes())
def test_a_confined_jail_sees_no_checkout_no_solutions_no_other_process_and_cannot_fork(jail_of, monkeypatch, mode):
    import os

    from grader.kata import target

    monkeypatch.setenv("KATA_JAIL", mode)
    k = jail_of(f"""
        import os

        def probe():
            seen = [os.path.exists(p) for p in ({str(target.SOLUTIONS_DIR)!r}, {str(target.ROOT / "grader")!r})]
            others = [p for p in os.listdir("/proc") if p.isdigit()] if os.path.isdir("/proc") else []
            try:
                pid = os.fork()
                if pid == 0:
                    os._exit(0)
                forked = True
            except OSError:
                forked = False
            return seen, len(others), forked
    """)
    seen, others, forked = k.probe()
    assert seen == [False, False], "the jail can see the checkout or the solutions"
    assert others <= 2, f"the jail sees {others} processes; it should see itself (and bwrap's init) at most"
    # Under bwrap run by root (a forced mode: root normally uses its own namespaces) the limit on
    # processes does not bind root's uid; the PID namespace still ends any child with the jail.
    assert not forked or (mode == "bwrap" and os.geteuid() == 0), "the jail could start a process"


@pytest.mark.parametrize("mode", _confining_modes())
def test_a_confined_jail_sees_numpy_but_no_other_installed_package(jail_of, monkeypatch, mode):
    """The grader, its suites and their baselines, pytest and Hypothesis, installed beside
    numpy (as in the Gradescope image's venv), are nowhere the jail can read."""
    import os

    import hypothesis

    installed = os.path.dirname(os.path.dirname(os.path.realpath(hypothesis.__file__)))
    monkeypatch.setenv("KATA_JAIL", mode)
    k = jail_of(f"""
        import importlib.util, os
        import numpy

        def probe():
            found = [n for n in ("hypothesis", "pytest", "click", "grader.suites") if _found(n)]
            return found, sorted(os.listdir({installed!r})), float(numpy.linalg.norm(numpy.ones(4)))

        def _found(name):
            try:
                return importlib.util.find_spec(name) is not None
            except ImportError:
                return False
    """)
    found, listed, norm = k.probe()
    assert found == [], f"the jail finds {found}"
    assert set(listed) <= {"numpy", "numpy.libs"} and "numpy" in listed, listed
    assert norm == 2.0


def test_the_judge_refuses_a_forged_callback_for_a_method_it_does_not_offer(jail_of):
    class LM:
        __jail_api__ = ("logits",)

        def secret(self):
            raise AssertionError("the judge ran a method it does not offer")

    k = jail_of("""
        from grader.jail import server as jail

        def forge(lm):
            return jail.call_judge(lm._peer, lm._ref, "secret", (), {})
    """)
    with pytest.raises(Exception, match="offers"):
        k.forge(LM())


def test_two_live_jails_never_share_a_uid_however_often_one_restarts(jail_of, tmp_path):
    k = jail_of("""
        import os

        def die():
            os._exit(1)

        def one():
            return 1
    """)
    (tmp_path / "base.py").write_text("def two():\n    return 2\n")
    base = jail_client.baseline_module(tmp_path / "base.py")
    assert base.two() == 2
    base_uid = base._jail.uid
    for _ in range(confine.UIDS_PER_JUDGE + 2):
        with pytest.raises(jail_client.JailCrash):
            k.die()
        assert k.one() == 1 and k._jail.uid != base_uid


def test_one_array_passed_twice_arrives_as_two_arrays_each_call_its_own(jail_of):
    k = jail_of("""
        def scribble(a, b):
            a[0] = 99.0
            return float(b[0])
    """)
    x = np.zeros(3)
    assert k.scribble(x, x) == 0.0 and x[0] == 0.0
    assert jail_client.call_many(k.scribble, [(x, x)] * 3) == [0.0, 0.0, 0.0]


def test_a_value_put_in_the_jail_is_the_very_object_a_call_gets_and_a_kept_result_stays_there(jail_of):
    k = jail_of("""
        import numpy as np

        def halve(a):
            a /= 2
            return a.sum()

        def pair():
            return np.zeros(2), np.ones(2)
    """)
    x = np.full(3, 4.0)
    kept_x = jail_client.put(k.halve, x)
    assert k.halve(kept_x) == 6.0 and np.array_equal(kept_x.copy(), [2.0, 2.0, 2.0]) and x[0] == 4.0
    first, second = jail_client.kept(k.pair, items=(0, 1))
    first.fill(7.0)
    assert np.array_equal(first.copy(), [7.0, 7.0]) and np.array_equal(second.copy(), [1.0, 1.0])


def test_a_timed_call_takes_its_inputs_and_brings_back_its_whole_result_on_the_clock(jail_of):
    """Nothing reaches the jail before the clock starts (a module that computes the answer while an
    upload arrives gains nothing), and the judge reads the result itself: the summary the judge
    compares (grader.suites.common.digest) is not even in the jail's runtime, so no jail can forge it."""
    k = jail_of("""
        import grader.jail.server as server

        SEEN = []
        try:
            import grader.suites.common as common

            common.digest = lambda *args, **kwargs: {"forged": True}
            SEEN.append(("forged", 0))
        except ImportError:
            pass
        _serve = server.Server._serve

        def _spy(self, header, bufs):
            SEEN.append((header.get("op"), sum(len(b) for b in bufs)))
            return _serve(self, header, bufs)

        server.Server._serve = _spy

        def double(x):
            return x * 2

        def seen():
            return list(SEEN)
    """)
    x = np.arange(20_000, dtype=np.float64)
    seconds, result = jail_client.timed(k.double, (x,))
    assert seconds > 0 and isinstance(result, np.ndarray) and np.array_equal(result, x * 2)
    ops = k.seen()
    assert "put" not in [op for op, _ in ops] and ("call", x.nbytes) in ops, ops
    assert ("forged", 0) not in ops  # the jail found no grader.suites to import


def test_a_timed_result_of_views_comes_back_whole_as_its_buffer_once_and_copies_one_by_one(jail_of):
    """Nothing of a timed result is left in the jail to be read later: its arrays come back inside the
    round trip, views of one buffer as that buffer once (so they share memory here, read-only), copies
    each as their own bytes; an untimed call gets arrays of its own, as always."""
    k = jail_of("""
        import numpy as np

        BUFFER = np.arange(600, dtype=np.float32).reshape(6, 100)

        def view(n):
            return BUFFER[:n], BUFFER[n:]

        def copied(n):
            return BUFFER[:n].copy(), BUFFER[n:].copy()
    """)
    buffer = np.arange(600, dtype=np.float32).reshape(6, 100)
    _, got = jail_client.timed(k.view, [(n,) for n in (1, 2, 3)], batch=True)
    for n, (first, rest) in zip((1, 2, 3), got):
        assert np.array_equal(first, buffer[:n]) and np.array_equal(rest, buffer[n:]) and not first.flags.writeable
    assert np.shares_memory(got[1][0], got[0][1])  # rows 0-1 and rows 1-5: one buffer here too
    _, copies = jail_client.timed(k.copied, [(n,) for n in (1, 2)], batch=True)
    assert np.array_equal(copies[1][0], buffer[:2]) and not np.shares_memory(copies[0][0], copies[1][0])
    untimed = k.view(2)
    assert untimed[0].flags.writeable and not np.shares_memory(untimed[0], untimed[1])


def test_a_jail_that_sends_views_unasked_breaks_the_protocol(jail_of):
    k = jail_of("""
        import numpy as np
        import grader.jail.server as server

        BUFFER = np.zeros(8)

        def pair():
            return server._Views([BUFFER[:4], BUFFER[2:]])
    """)
    with pytest.raises(jail_client.BadResult):
        k.pair()


# ------------------------------------------------------------------ the zygote


def _parent_of(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def _gone(pid: int, seconds: float = SETTLE) -> bool:
    """Whether process pid has ended (or is a zombie) within `seconds`. Reaped between the open and the read
    of its stat file, it is gone too (the read then raises ProcessLookupError, not FileNotFoundError)."""
    import os
    import time

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return True
        except (FileNotFoundError, ProcessLookupError):
            return True
        time.sleep(0.02)
    return not os.path.exists(f"/proc/{pid}")


def _forked_module(started: forks.Zygote, monkeypatch, tmp_path):
    """The proxy of kata module `k` (returning its pid), in a jail forked by the zygote `started`."""
    monkeypatch.setenv(forks.VAR, started.address())
    monkeypatch.setattr(forks, "_CONNECTION", [])
    monkeypatch.setattr(jail_client.SETTINGS, "target", str(tmp_path))
    monkeypatch.setattr(jail_client.SETTINGS, "deadline", None)
    (tmp_path / "k.py").write_text("import os\n\ndef pid():\n    return os.getpid()\n")
    k = jail_client.kata_module("k")
    assert k.pid() > 0  # the jail answers (its own pid namespace may number it otherwise)
    assert isinstance(k._jail.proc, forks.ForkedJail) and _parent_of(k._jail.proc.pid) == started.proc.pid
    return k


def test_a_forked_jail_is_the_zygotes_child_and_dies_when_its_judges_connection_closes(zygote, monkeypatch, tmp_path):
    try:
        pid = _forked_module(zygote, monkeypatch, tmp_path)._jail.proc.pid
        forks._CONNECTION[0].sock.close()  # as when the judge dies
        assert _gone(pid), "a jail outlived its judge's connection to the zygote"
    finally:
        jail_client.stop_all()


def test_the_zygote_kills_its_jails_and_ends_when_its_runner_is_gone(monkeypatch, tmp_path):
    started = forks.Zygote()
    try:
        pid = _forked_module(started, monkeypatch, tmp_path)._jail.proc.pid
        started.life.close()  # the runner's end of its socket: closed as when the runner dies
        assert _gone(started.proc.pid) and _gone(pid), "the zygote or its jail outlived the runner"
    finally:
        jail_client.stop_all()
        started.stop()


@pytest.mark.skipif(not forks.serves_this_mode(), reason="no zygote forks jails under bubblewrap")
def test_a_process_without_a_runner_forks_its_jails_from_a_zygote_of_its_own(monkeypatch, tmp_path):
    """kata play: zygote.own() starts one zygote, which every later call and every jail of the process uses, a new
    one once it died; none where KATA_JAIL_FORKS names one already."""
    monkeypatch.delenv(forks.VAR, raising=False)
    monkeypatch.setattr(forks, "_OWN", [])
    monkeypatch.setattr(forks, "_CONNECTION", [])
    monkeypatch.setattr(jail_client.SETTINGS, "target", str(tmp_path))
    monkeypatch.setattr(jail_client.SETTINGS, "deadline", None)
    (tmp_path / "k.py").write_text("def one():\n    return 1\n")
    try:
        first = forks.own()
        assert forks.own() == first and len(forks._OWN) == 1
        zygote = forks._OWN[0]
        k = jail_client.kata_module("k")
        assert k.one() == 1 and _parent_of(k._jail.proc.pid) == zygote.proc.pid, "the jail was not forked by it"
        jail_client.stop_all()
        zygote.proc.kill()
        assert _gone(zygote.proc.pid)
        assert forks.own() != first and forks._OWN[0].proc.poll() is None, "a dead zygote was not replaced"
        second = forks._OWN[0]
        second.proc.kill()
        monkeypatch.setenv(forks.VAR, "off")
        assert forks.own() == "off" and forks._OWN == [second], "a zygote was started beside KATA_JAIL_FORKS's"
    finally:
        jail_client.stop_all()
        for started in forks._OWN:
            started.stop()


def test_two_threads_stopping_one_jail_at_once_both_return_and_leave_nothing_behind(jail_of):
    """kata play --web: Ctrl-C stops every jail while the thread of a run cut short stops its own."""
    import threading

    for _ in range(3):
        jail = jail_of("def f():\n    return 1\n")._jail
        assert jail.module().f() == 1
        folder, proc = jail.dir, jail.proc
        start, failures = threading.Barrier(2), []

        def stop():
            start.wait()
            try:
                jail.stop()
            except Exception as exc:  # noqa: BLE001 (the test reports it)
                failures.append(exc)

        threads = [threading.Thread(target=stop, daemon=True) for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=20)
        assert not any(thread.is_alive() for thread in threads), "a second stop of one jail hung"
        assert not failures, failures
        assert not os.path.exists(folder) and proc.poll() is not None and jail.proc is None
        jail_client.stop_all()


def test_removing_a_jail_folder_tolerates_a_file_that_goes_meanwhile(tmp_path, monkeypatch):
    """Its server's bytecode, say, removed by another stop of the same jail between the walk and the chmod."""
    folder = tmp_path / "jail"
    (folder / "runtime").mkdir(parents=True)
    for name in ("a.pyc", "b.pyc"):
        (folder / "runtime" / name).write_bytes(b"x")
        (folder / "runtime" / name).chmod(0o400)
    chmod = os.chmod

    def chmod_after_another_removal(path, mode):
        if str(path).endswith("a.pyc"):
            os.unlink(path)
        chmod(path, mode)

    monkeypatch.setattr(forks.os, "chmod", chmod_after_another_removal)
    forks.remove_tree(str(folder))
    assert not folder.exists()


@pytest.mark.skipif(not hasattr(socket, "SO_PEERCRED"), reason="needs Linux")
def test_the_zygote_answers_no_process_of_another_uid(zygote):
    """A jail runs as a uid of its own (root and uid modes): were it to reach the zygote's
    socket, the zygote would still fork nothing for it."""
    import os

    if os.geteuid() != 0:
        pytest.skip("needs root, to connect as another uid")
    name = json.loads(zygote.address())["socket"]
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # as a jail's uid: connect and ask for a fork
        answer = b"no answer"
        try:
            os.setuid(confine.UID_BASE - 1)
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            sock.connect(name)
            sock.settimeout(5)
            socket.send_fds(sock, [json.dumps({"config": {}}).encode()], [0, 1])
            answer = sock.recv(1 << 16) or b"closed"
        except OSError as exc:
            answer = f"closed: {exc}".encode()
        finally:
            os.write(write, answer[:200])
            os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    answer = os.read(read, 200)
    assert answer.startswith(b"closed"), f"the zygote answered another uid: {answer!r}"
    # It cannot even connect: the socket is a file in a folder of the zygote's uid alone.
    assert answer.startswith(b"closed: [Errno 13] Permission denied"), answer
    assert not name.startswith("\0") and oct(os.stat(os.path.dirname(name)).st_mode & 0o777) == "0o700"
    test = forks.Connection(json.loads(zygote.address()))  # while its own uid is still served
    with pytest.raises(OSError, match="could not fork"):
        test.spawn({"config": {}}, [0, 1])
    test.sock.close()


def test_what_learner_code_prints_is_taken_once_in_order_capped_and_kept_past_a_crash(jail_of):
    k = jail_of("""
        import os, sys

        def talk(n):
            print("to stdout", n)
            print("to stderr", n, file=sys.stderr)
            print("no newline yet", end="")
            return n

        def flood():
            for i in range(10_000):
                print("line", i)

        def die():
            print("last words")
            os._exit(3)
    """)
    jail_client.printed()  # nothing is left from the load
    assert k.talk(1) == 1
    assert jail_client.printed() == "to stdout 1\nto stderr 1\nno newline yet"
    assert jail_client.printed() == ""  # taken once
    k.flood()
    text = jail_client.printed()
    lines = text.splitlines()
    assert lines[: jail_client.PRINTED_LINES] == [f"line {i}" for i in range(jail_client.PRINTED_LINES)]
    total = sum(len(f"line {i}\n") for i in range(10_000))
    shown = sum(len(f"line {i}\n") for i in range(jail_client.PRINTED_LINES))
    assert lines[-1] == f"[... {total - shown:,} more bytes printed, not shown]" and len(lines) == 51
    with pytest.raises(jail_client.JailCrash):
        k.die()
    assert jail_client.printed() == "last words\n"  # the jail is gone; what it printed is not


def test_a_baselines_prints_are_never_shown(jail_of, tmp_path):
    (tmp_path / "base.py").write_text("def talk():\n    print('baseline speaking')\n")
    jail_client.baseline_module(tmp_path / "base.py").talk()
    assert jail_client.printed() == ""


def test_a_message_that_would_decode_past_the_cap_is_refused_not_copied():
    """One array repeated in a frame crosses once but decodes to a copy per use: a frame naming a 1 MiB
    buffer 300 times would cost 300 MiB. Past MAX_DECODED it is refused as a protocol error."""
    block = np.zeros(1 << 17)  # 1 MiB
    buffers: list = []
    data = json.loads(json.dumps(p.Codec().encode([block] * 300, buffers)))
    assert len(buffers) == 1
    with pytest.raises(p.ProtocolError, match="decodes to more than 256 MiB"):
        p.Codec().decode(data, buffers)
    few = p.Codec().decode(json.loads(json.dumps(p.Codec().encode([block] * 3, buffers := []))), buffers)
    assert len(few) == 3 and few[0] is not few[1]


@pytest.mark.skipif(os.geteuid() != 0, reason="uid mode needs root")
def test_in_uid_mode_a_jail_cannot_read_another_jails_folder(jail_of, monkeypatch):
    """uid mode shares the file system: each jail's folder (its copy of the submission, its work folder) is
    its own uid's, 0700, so one student's jail cannot read another's module in a class grading."""
    if not jail_of.forked:  # the folder's owner and mode do not depend on how the jail starts
        pytest.skip("a new process under another uid may not reach this Python (a pyenv under /root)")
    monkeypatch.setenv("KATA_JAIL", "uid")
    other = jail_of("SECRET = 42\n\ndef here():\n    return 1\n", name="other")
    assert other.here() == 1
    theirs = next(j for j in jail_client._JAILS.values() if j.kata == "other")
    k = jail_of(f"""
        def peek():
            try:
                return open({theirs.sub + "/other.py"!r}).read()
            except PermissionError:
                return "refused"
    """)
    assert k.peek() == "refused"
    assert oct(os.stat(theirs.dir).st_mode & 0o777) == "0o700" and os.stat(theirs.dir).st_uid == theirs.uid


@pytest.mark.skipif(os.geteuid() != 0, reason="uid mode needs root")
def test_a_uid_mode_jail_raises_and_seeds_from_entropy_where_it_cannot_read_the_standard_library(jail_of, monkeypatch):
    """A uid-mode jail runs as a uid of its own on the shared file system: where the Python lies in a folder
    other uids cannot read (a pyenv under /root, as here), it has only what the zygote imported before the
    fork. Raising an error (the traceback module) and a Generator seeded from fresh entropy (secrets) must
    still work: both once crashed such a jail, and every check of a reference solution that raised failed.
    So must NumPy's submodules that `import numpy` leaves to their first use, where the virtual environment
    is private too (tests/jail/test_private_folder.py runs this test there)."""
    if not jail_of.forked:
        pytest.skip("a new process under another uid may not reach this Python (a pyenv under /root)")
    monkeypatch.setenv("KATA_JAIL", "uid")
    k = jail_of("""
        import numpy as np

        def refuse():
            raise ValueError("max_len must be at least 1")

        def draw():
            return float(np.random.default_rng().random())

        def lazily():
            x = np.arange(4.0)
            poly = np.polynomial.polynomial.polyval(2.0, [1.0, 1.0])
            masked = np.ma.masked_less(x, 1).sum()
            return float(np.fft.rfft(x)[0].real), float(np.linalg.norm(x)), float(poly), float(masked)
    """)
    with pytest.raises(ValueError, match="max_len must be at least 1"):
        k.refuse()
    assert 0.0 <= k.draw() < 1.0
    assert k.lazily() == (6.0, 14.0**0.5, 3.0, 6.0)


@pytest.mark.skipif(os.geteuid() != 0, reason="root mode needs root")
def test_in_root_mode_all_a_jail_writes_together_is_capped_not_only_each_file(jail_of, monkeypatch):
    """A jail's files are capped one by one (RLIMIT_FSIZE) in every mode; in root mode its working folder
    is also a tmpfs of confine.WORK_MB, so many files under the per-file cap cannot fill the grader's disk."""
    monkeypatch.setenv("KATA_JAIL", "root")
    k = jail_of("""
        import errno, os

        def fill(files, mb):
            block = b"x" * (1 << 20)
            for i in range(files):
                with open(f"part{i}", "wb") as f:
                    for _ in range(mb):
                        try:
                            f.write(block)
                            f.flush()
                        except OSError as exc:
                            return i, exc.errno == errno.ENOSPC
            return files, False
    """)
    assert k.fill(1, 8) == (1, False)  # a little is fine
    written, full = k.fill(8, 16)  # 128 MiB in 16 MiB files, each under the per-file cap
    assert full and written < 8


def _state_of(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]


def test_while_one_side_of_a_speed_check_is_timed_every_other_jail_is_stopped(jail_of, tmp_path):
    """A learner's module could burn CPU (a signal handler, a timer) exactly while the baseline is on the
    clock, and make its own code look fast: the other jails are stopped (SIGSTOP, which nothing catches)
    for the length of each timed call, and go on afterwards."""
    import threading

    k = jail_of("def ready():\n    return 1\n")
    assert k.ready() == 1
    (tmp_path / "base.py").write_text("import time\n\ndef slow(seconds):\n    time.sleep(seconds)\n    return 2\n")
    base = jail_client.baseline_module(tmp_path / "base.py")
    assert base.slow(0) == 2
    learner = next(j for j in jail_client._JAILS.values() if j.learner).proc.pid
    seen = []
    timing = threading.Thread(target=lambda: seen.append(jail_client.timed(base.slow, [0.4])))
    timing.start()
    during = ""
    while during != "T" and timing.is_alive():  # the learner's jail, looked at while the baseline is timed
        during = _state_of(learner)
        time.sleep(0.01)
    timing.join()
    assert during == "T" and seen and seen[0][0] >= 0.4, (during, seen)
    assert _state_of(learner) != "T" and k.ready() == 1  # going on again


# ------------------------------------------------------- confinement that fails closed

# What a jail's code does to ask the zygote for a fork: connect to its socket, send a request, read the answer.
_ASK_ZYGOTE = """
    import json, os, socket, time

    def _ask(name):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            sock.connect(name)
            sock.settimeout(5)
            socket.send_fds(sock, [json.dumps({"confine": {}}).encode()], [0, 1])
            return (sock.recv(1 << 16) or b"closed").decode()
        except OSError as exc:
            return f"closed: {exc}"

    def ask(name):
        return _ask(name)

    def ask_from_a_daemon(name):
        answer = "answer.txt"
        if os.fork() == 0:  # a child, which starts a session of its own and a grandchild, then exits
            os.setsid()
            if os.fork() == 0:
                text = _ask(name)
                with open(answer + ".part", "w") as f:
                    f.write(text)
                os.rename(answer + ".part", answer)
            os._exit(0)
        os.wait()
        for _ in range(3000):  # 30 s: a loaded machine may take seconds to run the grandchild
            if os.path.exists(answer):
                return open(answer).read()
            time.sleep(0.01)
        return "no answer"
"""


@pytest.mark.parametrize("asker", ["ask", "ask_from_a_daemon"])
def test_a_plain_mode_jail_and_its_daemonised_grandchild_get_no_fork_from_the_zygote(jail_of, monkeypatch, asker):
    """A plain-mode jail runs as the user, so the zygote's uid check lets it connect; the zygote still
    answers nothing to one of its own jails or anything a jail started, orphaned and in a session of its own
    (the zygote adopts orphans: they stay in its tree)."""
    if not jail_of.forked:
        pytest.skip("the zygote's own jails")
    if os.geteuid() != 0:
        pytest.skip("needs root, whom the limit on processes does not bind: a plain user's jail cannot fork")
    monkeypatch.setenv("KATA_JAIL", "plain")
    k = jail_of(_ASK_ZYGOTE)
    name = json.loads(os.environ[forks.VAR])["socket"]
    answer = getattr(k, asker)(name)
    assert answer.startswith("closed"), f"the zygote answered a jail: {answer!r}"


def test_the_zygote_forks_only_the_mode_it_started_in(zygote):
    """The mode is the zygote's, fixed when the runner started it: a request for another is refused (the
    judge then starts its jail as a new process), as is a uid outside the jails' range."""
    other = "plain" if zygote.mode != "plain" else "uid"
    judge = forks.Connection(json.loads(zygote.address()))
    try:
        with pytest.raises(OSError, match=f"forks {zygote.mode}-mode jails only, not '{other}'"):
            judge.spawn({"confine": {"mode": other, "uid": confine.UID_BASE}}, [0, 1])
        with pytest.raises(OSError, match=f"a jail's uid is {confine.UID_BASE} or more, not 0"):
            judge.spawn({"confine": {"mode": zygote.mode, "uid": 0}}, [0, 1])
    finally:
        judge.sock.close()


def test_a_judge_whose_mode_is_not_the_zygotes_starts_its_jail_itself(zygotes, monkeypatch, tmp_path):
    monkeypatch.setenv("KATA_JAIL", "plain")
    plain = zygotes()
    monkeypatch.setenv("KATA_JAIL", "root" if os.geteuid() == 0 else "bwrap")
    if confine.mode() == "bwrap" and not confine._bwrap_works():
        pytest.skip("neither root nor a working bwrap here")
    monkeypatch.setenv(forks.VAR, plain.address())
    monkeypatch.setattr(forks, "_CONNECTION", [])
    monkeypatch.setattr(jail_client.SETTINGS, "target", str(tmp_path))
    (tmp_path / "k.py").write_text("import os\n\ndef uid():\n    return os.getuid()\n")
    try:
        k = jail_client.kata_module("k")
        assert k.uid() == k._jail.uid or confine.mode() == "bwrap"
        assert not isinstance(k._jail.proc, forks.ForkedJail), "a plain-mode zygote forked a confined jail"
    finally:
        jail_client.stop_all()


@pytest.mark.skipif(os.geteuid() != 0, reason="root mode needs root")
def test_in_root_mode_a_jail_cannot_list_a_checkout_that_lies_inside_a_bound_folder(jail_of, monkeypatch):
    """A checkout (or copy of the project) put inside a folder the jail reads, here the Python installation,
    is hidden whole: not its solutions only, nothing of it."""
    import sys
    import tempfile

    try:
        checkout = tempfile.mkdtemp(prefix="kata-checkout-", dir=sys.prefix)
    except OSError:
        pytest.skip(f"cannot write into {sys.prefix}")
    try:
        for rel in ("grader/__init__.py", "reference/__init__.py", "reference/solutions/moe.py", "tests/t.py"):
            os.makedirs(os.path.dirname(os.path.join(checkout, rel)), exist_ok=True)
            open(os.path.join(checkout, rel), "w").close()
        monkeypatch.setattr(sys, "path", [*sys.path, checkout])  # the judge imports from it too
        monkeypatch.setenv("KATA_JAIL", "root")
        k = jail_of(f"""
            import os

            def look():
                return os.path.isdir({checkout!r}) and sorted(os.listdir({checkout!r}))
        """)
        assert k.look() in (False, []), f"the jail lists the checkout: {k.look()}"
    finally:
        forks.remove_tree(checkout)


# A learner's module that fills the places it may write with 1 MiB files, until it is stopped or has written `most`.
_FILLS = """
    import os

    def fill(where, most):
        os.makedirs(where, exist_ok=True)
        block = b"x" * (1 << 20)
        for i in range(most):
            with open(os.path.join(where, f"part{i}"), "wb") as f:
                f.write(block)
        return most

    def touch(count):
        for i in range(count):
            open(f"empty{i}", "w").close()
        return count

    def folder():
        return os.getcwd()
"""


def _writing_modes() -> list:
    return [("plain", "work"), ("uid", "work"), ("uid", "shared")] if os.geteuid() == 0 else [("plain", "work")]


@pytest.mark.slow
@pytest.mark.parametrize("mode, where", _writing_modes())
def test_outside_root_mode_a_jail_that_writes_past_its_cap_is_stopped_and_its_files_removed(
    jail_of, monkeypatch, mode, where
):
    """RLIMIT_FSIZE caps one file; the judge adds up all of them, in the jail's folder and (uid mode) in the
    folders every uid may write, and stops a jail past confine.WORK_MB: the check crashes saying why, and what
    the jail wrote is gone."""
    if mode == "uid" and not jail_of.forked:
        pytest.skip("a new process under another uid may not reach this Python (a pyenv under /root)")
    monkeypatch.setenv("KATA_JAIL", mode)
    k = jail_of(_FILLS)
    jail = k._jail
    target = "part" if where == "work" else f"/tmp/kata-test-fill-{os.getpid()}"
    assert k.fill(target, 8) == 8  # a little is fine
    most = 4 * confine.WORK_MB  # what it would write, were it not stopped
    with pytest.raises(jail_client.JailCrash, match=f"wrote more than {confine.WORK_MB} MiB"):
        k.fill(target, most)  # stopped while it writes or once it answers, when the judge's last look is old enough,
        time.sleep(jail_space.CHECK_SECONDS)
        k.folder()  # else before the next request
    assert jail.dir is None and not os.path.exists(target if where == "shared" else "/nonexistent")
    assert k.fill("small", 1) == 1  # a fresh jail, with room again


@pytest.mark.slow
def test_a_jail_that_makes_more_files_than_the_cap_is_stopped(jail_of, monkeypatch):
    monkeypatch.setenv("KATA_JAIL", "plain")
    k = jail_of(_FILLS)
    assert k.touch(100) == 100
    with pytest.raises(jail_client.JailCrash, match="more than 10,000 files and folders"):
        k.touch(jail_space.WORK_ENTRIES + 1)  # stopped while or after it makes them, if the judge looks by then,
        time.sleep(jail_space.CHECK_SECONDS)
        k.folder()  # else before it asks anything more
