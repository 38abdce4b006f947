"""`kata play`'s demos: each renders to a plain console (CliRunner: no
terminal, no colour) with figures this file computes on its own, and runs
the learner's code, swapped here for fixture modules that are easy to tell
from the reference: a cache that re-reads everything, a router that picks
the least likely experts."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from click.testing import CliRunner

from grader.cli.commands import main
from grader.jail import confine
from grader.jailer import zygote as forks
from grader.judge.events import Status
from grader.kata.registry import find_kata
from grader.kata.target import SOLUTIONS_DIR
from grader.learn import play as demos
from grader.learn import play_jails, play_screens, play_stack, table_draft, vouch
from grader.learn import progress as state
from grader.run.results import GradeResult, KataResult, TaskResult
from reference.lm import generate, shipped_model
from reference.model import Config, Model, rms_norm, softmax, top_k_route
from reference.ngram import NGramLM
from reference.sampling import generate_naive
from reference.tokenizer import decode, encode

from helpers import SETTLE, spawn, wait_for_processes

TEACHER = shipped_model("teacher")
LINEAR = ("wq", "wk", "wv", "wo", "w_gate", "w_up", "w_down", "router", "out")  # the weights quantize_model quantizes
pytestmark = pytest.mark.skipif(TEACHER is None, reason="the shipped teacher's weights are missing")

# A kv_cache whose "cache" keeps the tokens and re-reads all of them every call.
REREADING_CACHE = """
class KVCache:
    def __init__(self):
        self.tokens = []

    @classmethod
    def for_model(cls, model):
        return cls()


def forward_cached(model, tokens, cache):
    cache.tokens += [int(t) for t in tokens]
    return model.forward(cache.tokens)[-len(tokens):]
"""

# A moe whose router ranks the experts from the least likely up.
BACKWARD_ROUTER = """
import numpy as np


def router_probs(x, w_router):
    z = x @ w_router
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def top_k_gating(probs, k, normalize=True):
    idx = np.argsort(probs, axis=-1, kind="stable")[:, :k]
    w = np.take_along_axis(probs, idx, axis=-1)
    return idx, w / w.sum(axis=-1, keepdims=True)
"""


@pytest.fixture()
def cli(tmp_path, monkeypatch):
    """A CliRunner whose grade state and work directory are tmp_path's own."""
    monkeypatch.setenv("KATA_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("KATA_WORKDIR", str(tmp_path / "katas"))
    (tmp_path / "katas").mkdir()
    return CliRunner()


def _passes(tmp_path, kata: str, tasks: list[str]) -> None:
    """Record a last grade in which kata's tasks pass, as this account's grader records one (with its seal)."""
    k = find_kata(kata)
    graded = [TaskResult(t, t, Status.PASS, 1, 1, 1, 1, "", "") for t in tasks]
    state.record_grade([k], GradeResult("katas", 0, 1, 1, 1.0, [KataResult(kata, k.title, 1, 1, 1.0, graded)]))


def test_a_state_file_written_by_hand_or_a_file_changed_since_its_pass_runs_no_learner_code(cli, tmp_path, monkeypatch):
    """kata play runs the learner's module outside a jail, so only on a pass this account's grader recorded
    of the file as it is: not on a last_grade.json written by hand (a submission's folder can hold one), not
    on seals another account's key made, not after the file changed."""
    (tmp_path / "katas" / "kv_cache.py").write_text(REREADING_CACHE)
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "last_grade.json").write_text(json.dumps({"kv_cache": {"cache": "pass", "forward": "pass"}}))
    forged = cli.invoke(main, ["play", "cache", "R", "-n", "5"])
    assert "the model's own: your kv_cache tasks cache and forward do not pass in a grade this account" in forged.output
    assert _passes_per_layer(forged.output) == [15, 5]  # the model's own cache ran

    _passes(tmp_path, "kv_cache", ["cache", "forward"])
    assert "yours, " in cli.invoke(main, ["play", "cache", "R", "-n", "5"]).output  # the control: vouched for
    seals = (tmp_path / "state" / "seals.json").read_text()
    (tmp_path / "katas" / "kv_cache.py").write_text(REREADING_CACHE + "\n# edited since\n")
    assert "yours, " not in cli.invoke(main, ["play", "cache", "R", "-n", "5"]).output

    (tmp_path / "katas" / "kv_cache.py").write_text(REREADING_CACHE)
    (tmp_path / "state" / "seals.json").write_text(seals)
    assert "yours, " in cli.invoke(main, ["play", "cache", "R", "-n", "5"]).output  # the file as it was: vouched
    monkeypatch.setenv(vouch.KEY_ENV, str(tmp_path / "another account" / "grades.key"))
    vouch.KEYS.make(vouch.key_path())  # another account's key: the same seals vouch for nothing there
    assert "yours, " not in cli.invoke(main, ["play", "cache", "R", "-n", "5"]).output


def _passes_per_layer(output: str) -> list[int]:
    return [int(n.replace(",", "")) for n in re.findall(r"([\d,]+) token passes per layer", output)]


def _expected_experts(text: str, layer: int, rank) -> np.ndarray:
    """(T, K) experts of the teacher's router at layer, from the model's own pieces, best first (or as rank says)."""
    m, ids = TEACHER, encode(text)
    x, pos = m.embed(ids), np.arange(len(ids))
    for i in range(layer + 1):
        q, k, v = m.qkv(i, x, pos)
        x = x + m.attend(i, q, k, v, pos, pos)
        if i < layer:
            x = x + m.mlp(i, x)
    h = rms_norm(x, m.weights[f"layers.{layer}.mlp_norm"], m.config.norm_eps)
    return rank(softmax(h.astype(np.float64) @ m.weights[f"layers.{layer}.router"]), m.config.top_k)


def _shown_experts(output: str) -> list[str]:
    return [line.split()[1] for line in output.splitlines() if line.startswith(("first ", "second "))]


def test_play_lists_its_demos_in_its_help():
    out = CliRunner().invoke(main, ["play", "--help"]).output
    assert "kata play cache" in out and "kata play moe" in out and "kata play [PROMPT]" in out


def test_play_cache_writes_the_teachers_sentence_twice_with_a_fifth_of_the_work(cli):
    result = cli.invoke(main, ["play", "cache", "R", "-n", "9"])
    assert result.exit_code == 0, result.output
    text = "R" + decode(generate_naive(TEACHER, encode("R"), 9))
    assert result.output.count(text) == 2, result.output
    # Naive: 9 forwards over 1, 2, ..., 9 tokens; cached: the prompt, then one token a step.
    assert _passes_per_layer(result.output) == [sum(range(1, 10)), 9]
    assert "same sentence, 1/5 of the work" in result.output
    assert "\x1b[" not in result.output


def test_play_cache_runs_the_learners_cache_only_once_its_tasks_pass(cli, tmp_path):
    (tmp_path / "katas" / "kv_cache.py").write_text(REREADING_CACHE)
    before = cli.invoke(main, ["play", "cache", "R", "-n", "5"])
    assert "the model's own, since your kv_cache tasks" in before.output, before.output
    assert _passes_per_layer(before.output) == [15, 5]
    _passes(tmp_path, "kv_cache", ["cache", "forward"])
    after = cli.invoke(main, ["play", "cache", "R", "-n", "5"])
    assert after.exit_code == 0, after.output
    assert f"yours, {tmp_path / 'katas' / 'kv_cache.py'}" in after.output
    # The learner's cache re-reads 1 + 1, 2 + 1, ... tokens: as much work as no cache at all.
    assert _passes_per_layer(after.output) == [15, 15]
    assert "same sentence, 1 of the work" in after.output


def test_play_moe_shows_the_experts_the_teachers_router_chooses(cli):
    text = "Return the queue."
    result = cli.invoke(main, ["play", "moe", text, "--layer", "1"])
    assert result.exit_code == 0, result.output
    experts, _ = _expected_experts(text, 1, top_k_route)
    assert _shown_experts(result.output) == ["".join(map(str, experts[:, r])) for r in range(2)]
    load = np.bincount(experts.ravel(), minlength=TEACHER.config.n_experts)
    even = experts.size / TEACHER.config.n_experts
    for e, n in enumerate(load):
        assert f"expert {e}: {n:>3} ({n / even:.2f}x)" in result.output
    assert "\x1b[" not in result.output


def test_play_moe_runs_the_learners_router(cli, tmp_path):
    (tmp_path / "katas" / "moe.py").write_text(BACKWARD_ROUTER)
    _passes(tmp_path, "moe", ["router", "top_k"])
    text = "def queue"
    result = cli.invoke(main, ["play", "moe", text])
    assert result.exit_code == 0, result.output
    backward = _expected_experts(text, 0, lambda p, k: np.argsort(p, axis=-1, kind="stable")[:, :k])
    assert _shown_experts(result.output) == ["".join(map(str, backward[:, r])) for r in range(2)]


def test_play_names_what_was_wrong(cli, tmp_path):
    assert "give a prompt of at most 247 characters" in cli.invoke(main, ["play", "cache", "x" * 300]).output
    layer = cli.invoke(main, ["play", "moe", "--layer", "7"])
    assert layer.exit_code == 2 and "layer must be in [0, 4)" in layer.output  # a usage error, not code's failure
    (tmp_path / "katas" / "kv_cache.py").write_text("def forward_cached(*a):\n    raise NotImplementedError\n")
    _passes(tmp_path, "kv_cache", ["cache", "forward"])
    broken = cli.invoke(main, ["play", "cache"])
    assert broken.exit_code == 1 and "raised AttributeError" in broken.output, broken.output


@pytest.mark.parametrize(
    "args, said",
    [
        # the prompt's room: "needs 1 to -999999744 characters", "room for -544 new characters" before
        (["cache", "x", "-n", "1000000000"], "1000000000 new characters do not fit: the model holds 256 in all"),
        (["write", "y" * 300], "a prompt of 300 characters and 120 new ones do not fit the model's 256"),
        (["write", ""], "the prompt is empty"),  # "got array([], dtype=float64)" before
        (["quantize", "--prompt", "a" * 240], "give a prompt of at most 232 characters"),  # "257 tokens" before
        (["cache", "\u00e9"], "is not in the vocabulary"),
        (["distill", "ab", "--at", "7"], "--at positions must lie in [1, 2) for a text of 2 characters, got [7]"),
        (["distill", ""], "the text needs 2 characters at least"),  # "positions must lie in [1, 0)" before
        (["distill", "--at", "x"], "Invalid value for '--at': 'x' is not a comma-separated list of whole numbers"),
        (["write", "x", "-t", "nan"], "Invalid value for '--temperature' / '-t': 'nan' is not a finite number"),
        (["write", "x", "-t", "1", "--seed", "-1"], "Invalid value for '--seed'"),  # numpy's words before
        (["speculate", "--k", "1000000000"], "Invalid value for '--k'"),  # a 5 GB table before
        (["stack", "--rounds", "1000000"], "Invalid value for '--rounds'"),
    ],
    ids=[
        "huge-n",
        "long-prompt",
        "empty-prompt",
        "quantize-prompt",
        "non-ascii",
        "at-past",
        "short-text",
        "at-word",
        "nan-t",
        "seed",
        "k",
        "rounds",
    ],
)
def test_play_refuses_what_it_was_asked_with_a_usage_error_naming_the_limit(cli, args, said):
    result = cli.invoke(main, ["play", *args, "--target", "reference"] if args[0] != "write" else ["play", *args])
    assert result.exit_code == 2 and said in result.output, result.output


def test_a_tiny_temperature_samples_the_greedy_text():
    # 1 / 1e-320 overflows: the logits' shift came after the division, which made NaN of every probability
    assert (
        play_screens.write("x", "teacher", 8, 1e-320, 0, False)[0]
        == play_screens.write("x", "teacher", 8, 0.0, 0, False)[0]
    )


# A speculative kata whose greedy_accept never keeps a guess: the teacher writes every character itself.
KEEPS_NOTHING = """
import numpy as np


def greedy_accept(draft_tokens, target_logits):
    return [int(np.argmax(np.asarray(target_logits)[0]))]
"""

# A quantization kata that rounds every code toward zero.
TRUNCATES = """
import numpy as np


def quantize_grouped(x, bits, group_size):
    qmax = 2 ** (bits - 1) - 1
    g = np.asarray(x, dtype=np.float64).reshape(*np.shape(x)[:-1], -1, group_size)
    scales = np.abs(g).max(axis=-1) / qmax
    return np.trunc(g / scales[..., None]).reshape(np.shape(x)).astype(np.int8), scales


def dequantize_grouped(q, scales, group_size):
    q = np.asarray(q, dtype=np.float64)
    return (q.reshape(*q.shape[:-1], -1, group_size) * np.asarray(scales)[..., None]).reshape(q.shape)


def quantize_symmetric(x, bits, axis=None):
    scale = np.abs(x).max() / (2 ** (bits - 1) - 1)
    return np.trunc(x / scale).astype(np.int8), scale


def dequantize_symmetric(q, scale):
    return q * scale


def quantize_model(model, bits, group_size=32):
    return model
"""


def _rounds(output: str) -> list[tuple[int, int]]:
    """(round, kept) of every row of the speculate table."""
    return [(int(m[1]), int(m[2])) for m in re.finditer(r"^\s*(\d+)  '.*?'\s+(\d+)  ", output, re.M)]


def test_play_speculate_keeps_what_the_teacher_would_write_and_says_how_many_calls(cli):
    draft = shipped_model("draft")
    prompt, n, k = encode("Return the "), 24, 4
    own = generate_naive(TEACHER, prompt, n)
    result = cli.invoke(main, ["play", "speculate", "Return the ", "-n", str(n), "--k", str(k)])
    assert result.exit_code == 0, result.output
    # Each round keeps the draft's guesses up to the first that differs from the teacher's own text.
    seq, done, want = list(prompt), 0, []
    while done < n:
        k_round = min(k, n - done - 1)
        guesses = generate_naive(draft, seq, k_round) if k_round else []
        kept = next((i for i, (g, t) in enumerate(zip(guesses, own[done:])) if g != t), k_round)
        want.append(kept)
        seq += own[done : done + kept + 1]
        done += kept + 1
    assert [kept for _, kept in _rounds(result.output)] == want
    assert f"{len(want)} teacher calls for {n} characters" in result.output
    assert "the same text as the teacher's own greedy decoding: yes" in result.output
    assert "Return the " + decode(own) in result.output


def test_play_speculate_runs_the_learners_greedy_accept(cli, tmp_path):
    (tmp_path / "katas" / "speculative.py").write_text(KEEPS_NOTHING)
    _passes(tmp_path, "speculative", ["greedy"])
    result = cli.invoke(main, ["play", "speculate", "-n", "10"])
    assert result.exit_code == 0, result.output
    assert {kept for _, kept in _rounds(result.output)} == {0}
    assert "10 teacher calls for 10 characters" in result.output


def _quantize_rows(output: str) -> dict[int, list[float]]:
    """bits -> (grouped, error, per tensor, error) of the quantize table."""
    rows = re.findall(r"^\s*(\d)\s+([+-][\d.]+)\s+([+-][\d.]+)\s+([+-][\d.]+)\s+([+-][\d.]+)\s+([\d,]+)", output, re.M)
    return {int(r[0]): [float(v) for v in r[1:5]] + [int(r[5].replace(",", ""))] for r in rows}


def test_play_quantize_snaps_the_weight_to_its_nearest_level_at_every_width(cli):
    name, index = "layers.1.w_up", 77
    result = cli.invoke(main, ["play", "quantize", "--weight", name, "--index", str(index)])
    assert result.exit_code == 0, result.output
    rows = np.swapaxes(TEACHER.weights[name], -1, -2).astype(np.float64)
    flat = rows.reshape(-1)
    group = flat[index - index % 32 : index - index % 32 + 32]
    linear = sum(
        w.size
        for n, w in TEACHER.weights.items()
        if n.split(".")[-1] in ("wq", "wk", "wv", "wo", "w_gate", "w_up", "w_down", "router", "out")
    )
    shown = _quantize_rows(result.output)
    assert sorted(shown) == [2, 3, 4, 6, 8]
    for bits, (grouped, _, per_tensor, _, size) in shown.items():
        qmax = 2 ** (bits - 1) - 1
        step, tensor_step = np.abs(group).max() / qmax, np.abs(rows).max() / qmax
        assert grouped == pytest.approx(np.round(flat[index] / step) * step, abs=1e-5)
        assert per_tensor == pytest.approx(np.round(flat[index] / tensor_step) * tensor_step, abs=1e-5)
        assert size == linear * bits // 8 + linear // 32 * 2 + (TEACHER.config.n_params() - linear) * 4
        assert f"{2 * qmax + 1} levels" in result.output


def test_play_quantize_says_why_it_shows_no_mixed_precision_rows_before_those_tasks_pass(cli):
    result = cli.invoke(main, ["play", "quantize"])
    assert result.exit_code == 0, result.output
    assert "no mixed-precision or activation-aware rows" in result.output
    assert "tasks sensitive and salient do not pass yet" in result.output


def test_spent_gives_a_mixed_plan_at_the_bytes_of_uniform_weights_and_the_matrices_it_protects():
    from reference.model import Config, Model

    config = Config(vocab_size=96, d_model=64, n_layers=1, n_heads=2, n_kv_heads=1, d_ff=64, n_experts=2, top_k=1)
    model = Model.random(config, seed=2)
    gen = np.random.default_rng(0)
    calib, held_out = ([int(t) for t in gen.integers(0, 96, 48)] for _ in range(2))
    with play_jails.jails():
        source = demos.kata_source("quantization", demos.ART_FUNCTIONS, "reference")
        rows = demos.spent(model, (4, 3), calib, held_out, encode("Return "), 5, source)
        uniform = {r.bits: source.module.quantize_model(model, r.bits) for r in rows}
    assert [r.bits for r in rows] == [4, 3]
    for r in rows:
        p = softmax(model.forward(held_out).astype(np.float64))
        q = softmax(uniform[r.bits].forward(held_out).astype(np.float64))
        assert r.kl["uniform"] == pytest.approx(float(np.mean(np.sum(p * np.log(p / q), axis=-1))), rel=1e-6)
        assert set(r.text) == {"uniform", "mixed", "awq"} and all(len(t) == 5 for t in r.text.values())
        assert r.protected and all(b > r.bits for _, b, _ in r.protected)
        assert [kl for _, _, kl in r.protected] == sorted((kl for _, _, kl in r.protected), reverse=True)


def test_play_quantize_runs_the_learners_quantizers(cli, tmp_path):
    (tmp_path / "katas" / "quantization.py").write_text(TRUNCATES)
    _passes(tmp_path, "quantization", ["symmetric", "grouped", "model"])
    result = cli.invoke(main, ["play", "quantize", "--index", "5"])
    assert result.exit_code == 0, result.output
    w = np.swapaxes(TEACHER.weights["layers.0.wq"], -1, -2).reshape(-1).astype(np.float64)
    step = np.abs(w[:32]).max() / 7
    assert _quantize_rows(result.output)[4][0] == pytest.approx(np.trunc(w[5] / step) * step, abs=1e-5)


# A distillation kata whose students never learn: a table of zeros, so every next character gets 1/V.
UNIFORM_STUDENT = """
import numpy as np


def distill_bigram(teacher_logits, prev_tokens, labels, *, temperature, alpha, steps, lr, rng):
    V = np.shape(teacher_logits)[1]
    return np.zeros((V, V))
"""


def _shown_probs(output: str, name: str) -> list[list[int]]:
    """Per position shown, the percentages on `name`'s row."""
    return [
        [int(p) for p in re.findall(r"'.{1,2}'\s+(\d+)%", line)]
        for line in output.splitlines()
        if line.startswith(f"  {name} ")
    ]


def test_play_distill_sets_the_teachers_next_character_beside_its_draft(cli):
    text, at = "Return the number.", [7, 11]
    result = cli.invoke(main, ["play", "distill", text, "--at", "7,11"])
    assert result.exit_code == 0, result.output
    ids = encode(text)
    teacher, draft = (
        softmax(TEACHER.forward(ids).astype(np.float64)),
        softmax(shipped_model("draft").forward(ids).astype(np.float64)),
    )
    for shown_t, shown_d, i in zip(_shown_probs(result.output, "teacher"), _shown_probs(result.output, "draft"), at):
        top = np.argsort(-teacher[i - 1], kind="stable")[:3]
        assert shown_t == [round(100 * teacher[i - 1][t]) for t in top]
        assert shown_d == [round(100 * draft[i - 1][t]) for t in top]
    kl = np.sum(teacher * (np.log(teacher) - np.log(draft)), axis=-1)
    assert f"draft {np.mean(kl[:-1]):.2f}" in result.output
    assert "the bigram students join once" in result.output


def test_play_distill_trains_the_students_with_the_learners_distill_bigram(cli, tmp_path):
    (tmp_path / "katas" / "distillation.py").write_text(UNIFORM_STUDENT)
    _passes(tmp_path, "distillation", ["distill"])
    result = cli.invoke(main, ["play", "distill", "Return the number.", "--at", "7"])
    assert result.exit_code == 0, result.output
    assert _shown_probs(result.output, "bigram, soft") == [[1, 1, 1]]  # 1/96 each
    assert _shown_probs(result.output, "bigram, hard") == [[1, 1, 1]]


STACK = ("re-read everything", "+ KV cache", "+ int8 weights (grouped, G=32)", "+ speculative (n-gram, k=5)")


def _stack_rows(output: str) -> dict[str, list[str]]:
    """Row name -> (weights, cache, MACs/char, text as float32) of the stack table (its name is 32 wide), after
    chars/s and the speed-up over the row before (which the first row has not)."""
    rows = {line[:32].strip(): line[32:].split() for line in output.splitlines() if line[:32].strip() in STACK}
    return {name: cells[2:] if name != STACK[0] else cells[1:] for name, cells in rows.items()}


@pytest.fixture(scope="module")
def stack_of_16(tmp_path_factory):
    """`kata play stack -n 16 --rounds 1` in a fresh state and work directory (as the `cli` fixture makes them),
    run once for the tests below that only read what it printed."""
    tmp = tmp_path_factory.mktemp("stack")
    (tmp / "katas").mkdir()
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("KATA_STATE_DIR", str(tmp / "state"))
        patch.setenv("KATA_WORKDIR", str(tmp / "katas"))
        return CliRunner().invoke(main, ["play", "stack", "-n", "16", "--rounds", "1"])


def test_play_stack_adds_one_bargain_at_a_time_and_keeps_the_text(stack_of_16):
    n, prompt, result = 16, encode(play_stack.PROMPT), stack_of_16
    assert result.exit_code == 0, result.output
    rows = _stack_rows(result.output)
    assert list(rows) == list(STACK)
    assert "draft: the shipped n-gram table (reference/weights/ngram.npz), since your distillation" in result.output
    c, params = TEACHER.config, TEACHER.config.n_params()
    linear = sum(w.size for n_, w in TEACHER.weights.items() if n_.split(".")[-1] in LINEAR)
    int8 = linear + linear // 32 * 2 + (params - linear) * 4
    cache = 2 * c.n_layers * c.n_kv_heads * c.head_dim * 4 * (len(prompt) + n)
    with TEACHER.count_work() as work:
        generate_naive(TEACHER, prompt, n)
    assert rows["re-read everything"] == [f"{params * 4:,}", "0", f"{work.macs / n:,.0f}", "same"]
    assert rows["+ KV cache"][:2] == [f"{params * 4:,}", f"{cache:,}"] and rows["+ KV cache"][3] == "same"
    assert rows["+ int8 weights (grouped, G=32)"][:2] == [f"{int8:,}", f"{cache:,}"]
    assert "wrote exactly what the int8 teacher writes on its own: yes" in result.output
    assert "x before" in result.output and "BLAS: " in result.output
    projection = " ".join(result.output.split("+ int8 weights (grouped, G=32)")[1].split("+ speculative")[0].split())
    assert "buy size, not speed" in projection and "(a projection, not a measurement)" in projection
    table = NGramLM.pretrained()
    assert rows[STACK[3]][0] == f"{int8 + table.contexts.size + table.probs.size:,}"


def test_the_stack_defaults_to_its_own_prompt_and_k_in_the_terminal_and_on_the_page():
    """kata play stack and the web stack page start from the same text and k (play_stack's)."""
    params = {p.name: p.default for p in main.commands["play"].commands["stack"].params}
    assert (params["prompt"], params["k"]) == (play_stack.PROMPT, play_stack.K)
    from grader.learn import web_runs

    page = web_runs.PARAMS["stack"]
    assert (page["prompt"].default, page["k"].default) == (play_stack.PROMPT, play_stack.K)


def test_each_x_before_of_the_stack_is_its_chars_per_second_over_the_row_befores(stack_of_16):
    """The two columns come from the same medians: chars/s is printed rounded to a whole number, so the ratio
    of the printed figures may differ from x before only by that rounding and x before's own."""
    result = stack_of_16
    assert result.exit_code == 0, result.output
    lines = [line for line in result.output.splitlines() if line[:32].strip() in STACK]
    speeds = [float(line[32:].split()[0]) for line in lines]
    for line, before, now in zip(lines[1:], speeds, speeds[1:]):
        shown = float(line[32:].split()[1].rstrip("x"))
        low, high = (now - 0.5) / (before + 0.5), (now + 0.5) / max(before - 0.5, 1e-9)
        assert low - 0.005 <= shown <= high + 0.005, f"{line.strip()}: {shown}x after {before:.0f} chars/s"


def test_each_x_before_is_the_median_of_the_rounds_ratios_with_the_row_before(monkeypatch):
    """A row's speed-up comes from the rounds it took turns with the row before, ratio by ratio, and its
    seconds are the row before's over it: not the row before's median from its own, earlier pairing over
    this row's median (here 1.0 / 0.25 = 4x where the rounds' ratios, 2, 5 and 8, say 5x)."""
    model = Model.random(Config(vocab_size=8, d_model=8, n_layers=1, n_heads=2, n_kv_heads=1, d_ff=8), seed=0)
    ways = [play_stack._Way(name, [model], lambda: [1, 2], 100, 0, 32) for name in ("slow", "fast")]
    monkeypatch.setattr(play_stack, "_ways", lambda *args: iter(ways))
    rounds = iter([[[1.0, 1.0, 1.0]], [[0.5, 0.2, 0.25], [1.0, 1.0, 2.0]]])  # seconds[run][round]: this row, before
    monkeypatch.setattr(play_stack.timing, "interleave", lambda runs, **kw: play_stack.timing.Rounds(next(rounds)))
    first, second = play_stack.stack(model, None, [1], 2, 2, {})
    assert (first.seconds, first.speedup) == (1.0, None)
    assert second.speedup == 5.0 and second.seconds == pytest.approx(0.2)


def test_play_stack_runs_the_learners_quantize_model(cli, tmp_path):
    (tmp_path / "katas" / "quantization.py").write_text(TRUNCATES)  # its quantize_model hands the model back
    _passes(tmp_path, "quantization", ["grouped", "model"])
    rows = _stack_rows(cli.invoke(main, ["play", "stack", "-n", "16", "--rounds", "1"]).output)
    assert rows["+ int8 weights (grouped, G=32)"][3] == "same"


# A speculative kata whose loop writes the draft's own greedy text, calling the models it was handed where it runs.
DRAFT_ONLY = """
import numpy as np


def greedy_accept(draft_tokens, target_logits):
    return [int(np.argmax(np.asarray(target_logits)[0]))]


def speculative_generate(target, draft, prompt, n_new, *, k=4, temperature=1.0, rng=None):
    # language models made here: the target around a model of this process, the draft from its table
    assert type(target).__name__ == "CachedLM" and type(target.model).__name__ == "Model", type(target)
    assert type(draft).__name__ == "NGramLM", type(draft)
    seq, new = list(prompt), []
    for _ in range(n_new):
        new.append(int(np.argmax(draft.logits(seq + new)[-1])))
    target.logits(seq + new)
    return new, None
"""


def test_play_stack_runs_the_learners_speculative_generate_whole_in_its_jail(cli, tmp_path):
    (tmp_path / "katas" / "speculative.py").write_text(DRAFT_ONLY)
    _passes(tmp_path, "speculative", ["greedy", "loop"])
    n, prompt = 24, encode(play_stack.PROMPT)  # the table's text, where the int8 teacher's differs
    result = cli.invoke(main, ["play", "stack", "-n", str(n), "--rounds", "1"])
    assert result.exit_code == 0, result.output
    assert f"{play_stack.PROMPT}{decode(generate(NGramLM.pretrained(), prompt, n))}" in result.output
    assert "wrote exactly what the int8 teacher writes on its own: NO" in result.output


def test_play_stack_drafts_with_the_learners_own_table_once_their_ngram_task_passes(cli, tmp_path, monkeypatch):
    """The learner's distill_ngram runs in its jail on the teacher's logits (a short text here), its table is
    kept under the file's digest, and the next run takes it from there."""
    monkeypatch.setattr(table_draft, "LEARNER_CHARS", 1500)
    solution = (SOLUTIONS_DIR / "distillation.py").read_text()
    (tmp_path / "katas" / "distillation.py").write_text(solution)
    _passes(tmp_path, "distillation", ["ngram"])
    first = cli.invoke(main, ["play", "stack", "-n", "8", "--rounds", "1"])
    assert first.exit_code == 0, first.output
    assert "draft: your distill_ngram's table" in first.output and "distilled on 1,500 characters" in first.output
    kept = list((tmp_path / "state").glob("ngram-*.npz"))
    assert len(kept) == 1
    again = cli.invoke(main, ["play", "stack", "-n", "8", "--rounds", "1"])
    assert f"kept in {kept[0]}" in again.output


# A kv_cache whose forward_cached says which process, and which account, ran it.
TELLS_WHERE_IT_RUNS = """
import os


class KVCache:
    @classmethod
    def for_model(cls, model):
        return cls()


def forward_cached(model, tokens, cache):
    raise RuntimeError(f"pid {os.getpid()} uid {os.getuid()}")
"""


def _descendants() -> set[int]:
    """The live processes this one started, and theirs, but for the jail zygote of its own that demos start
    their jails from (grader.jailer.zygote.own), which lives as long as this process by design."""
    parents = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z":
            parents[int(pid)] = int(fields[1])
    zygotes = {z.proc.pid for z in forks._OWN}
    found, new = set(), {os.getpid()}
    while new:
        new = {pid for pid, parent in parents.items() if parent in new and pid not in found}
        found |= new
    return found - zygotes


def test_the_learners_code_runs_in_a_jail_of_its_own_and_the_jail_ends_with_the_demo(cli, tmp_path):
    """An instructor who runs `kata play` in a student's folder whose grade passed runs the student's code:
    in a process of its own (as another account where the jail has one), never in the command's."""
    (tmp_path / "katas" / "kv_cache.py").write_text(TELLS_WHERE_IT_RUNS)
    _passes(tmp_path, "kv_cache", ["cache", "forward"])
    before = _descendants()
    result = cli.invoke(main, ["play", "cache", "R", "-n", "3"])
    assert result.exit_code == 1 and "yours, " in result.output, result.output
    pid, uid = map(int, re.search(r"raised RuntimeError: pid (\d+) uid (\d+)", result.output).groups())
    assert pid != os.getpid()
    if confine.mode() in ("root", "uid"):
        assert uid != os.getuid()
    assert _descendants() <= before, "a jail outlived the demo"


# A quantization kata whose quantizer raises with a message that would drive the terminal: clear the screen,
# write the clipboard (OSC 52), and start a line of its own.
HOSTILE_MESSAGE = """
def quantize_grouped(x, bits, group_size):
    raise ValueError("\\x1b[2J\\x1b]52;c;ZWNobyBoaQ==\\x07\\nTotal: 100/100 points")
"""


def test_what_the_learners_code_raises_is_shown_on_one_line_with_its_control_characters_escaped(cli, tmp_path):
    (tmp_path / "katas" / "quantization.py").write_text(HOSTILE_MESSAGE)
    _passes(tmp_path, "quantization", ["symmetric", "grouped", "model"])
    result = cli.invoke(main, ["play", "quantize"])
    assert result.exit_code == 1, result.output
    assert "\x1b" not in result.output and "\x07" not in result.output
    assert not any(line.startswith("Total") for line in result.output.splitlines())
    (said,) = [line for line in result.output.splitlines() if "raised ValueError" in line]
    assert (
        "raised ValueError: \\x1b[2J\\x1b]52;c;ZWNobyBoaQ==\\x07\\nTotal: 100/100 points (at quantization.py:3" in said
    )


def test_a_learners_jail_that_crashes_ends_the_demo_with_one_line(cli, tmp_path):
    folder = tmp_path / "sub"
    folder.mkdir()
    (folder / "moe.py").write_text("import os\n\n\ndef router_probs(x, w):\n    os._exit(3)\n")
    result = cli.invoke(main, ["play", "moe", "--target", str(folder)])
    assert result.exit_code == 1 and "Traceback" not in result.output, result.output
    assert result.output.strip().splitlines()[-1] == (
        f"Error: the one in that folder, {folder / 'moe.py'} crashed its process (the kata process exited with code 3)"
    )


def test_a_call_of_the_learners_code_that_runs_past_its_time_is_stopped_with_one_line(tmp_path):
    (tmp_path / "moe.py").write_text(
        "def ready():\n    return 1\n\ndef router_probs(x, w):\n    while True:\n        pass\n"
    )
    with play_jails.jails():
        # The jail started and the module loaded first, with the demo's own time: on a busy machine starting
        # them can take longer than the short time the call below is given, which then stops a jail not yet
        # inside router_probs.
        assert demos.kata_source("moe", ("router_probs",), str(tmp_path)).module.ready() == 1
        source = demos.kata_source("moe", ("router_probs",), str(tmp_path), seconds=1)
        with pytest.raises(
            play_jails.LearnerError,
            match=r"^did not finish within 1 s \(it was running moe.py:[56] in router_probs\)$",
        ):
            source.module.router_probs(np.zeros((2, 4)), np.zeros((4, 3)))


@pytest.mark.slow  # a real `kata` process stopped by a signal
def test_ctrl_c_during_a_hanging_demo_stops_it_without_a_traceback_and_leaves_no_jail_behind(tmp_path):
    folder, scratch = tmp_path / "sub", tmp_path / "tmp"
    folder.mkdir()
    scratch.mkdir()
    (folder / "moe.py").write_text("def router_probs(x, w):\n    while True:\n        pass\n")
    env = {**os.environ, "TMPDIR": str(scratch), "KATA_STATE_DIR": str(tmp_path / "state")}
    child = spawn([sys.executable, "-m", "grader.cli", "play", "moe", "--target", str(folder)], tmp_path, env)
    assert wait_for_processes(scratch, present=True, seconds=20), "the demo started no jail"
    time.sleep(1)  # inside the hanging call
    child.send_signal(signal.SIGINT)
    try:
        _, err = child.communicate(timeout=SETTLE)
    except subprocess.TimeoutExpired:
        child.kill()
        raise AssertionError(f"kata play did not end within {SETTLE:g} s of Ctrl-C") from None
    assert child.returncode != 0 and "Traceback" not in err and "Aborted" in err, err
    assert not wait_for_processes(scratch, present=False, seconds=SETTLE), "a jail outlived the demo"
    assert not list(scratch.iterdir()), "a jail's folder outlived the demo"
