"""The speculative kata's benchmark's parts that decide what it prints: the projection's work
counts and bound, and the check that greedy speculative decoding writes plain
decoding's tokens (in a process of its own: importing a benchmark's shared
module starts the process again on one BLAS thread)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from grader import ONE_BLAS_THREAD
from grader.suites.speculative import projection
from reference.lm import CachedLM
from reference.model import Config, Model
from reference.ngram import NGramLM

ROOT = Path(__file__).resolve().parents[2]
SMALL_MHA = Config(vocab_size=96, d_model=64, n_layers=2, n_heads=4, n_kv_heads=4, d_ff=96, max_seq_len=64)
RATES = projection.Rates(bandwidth=1e10, gemm=1e11)  # 10 flops a byte


@pytest.mark.parametrize("new", [1, 5])
def test_dense_work_counts_what_the_model_counts_for_a_cached_call(new):
    model, context = Model.random(SMALL_MHA, seed=0), 20
    lm = CachedLM(model)
    tokens = list(range(3, 3 + context + new))
    lm.logits(tokens[:context])
    with model.count_work() as work:
        lm.logits(tokens)
    c = SMALL_MHA
    counted = projection.dense_work(
        new,
        d_model=c.d_model,
        n_layers=c.n_layers,
        d_ff=c.d_ff,
        vocab=c.vocab_size,
        context=context,
        bytes_per_weight=4,
    )
    assert counted.weight_bytes == work.weight_bytes - work.bytes_by_piece["norm"]
    assert counted.macs == work.macs


def test_a_call_bound_by_reading_weights_projects_the_bytes_ratio_and_a_busy_one_the_macs_ratio():
    one = projection.CallWork(weight_bytes=1e9, macs=1e8)  # 0.1 s reading, 0.002 s computing
    assert projection.projected_v(one, projection.CallWork(1.5e9, 5e8), RATES) == pytest.approx(1.5)
    assert projection.projected_v(one, projection.CallWork(1e9, 1e10), RATES) == pytest.approx(2.0)


K_ROWS = textwrap.dedent(
    """
    import sys
    from grader.suites.speculative import projection
    from grader.suites.speculative.bench import KS, Target, Verify, k_rows
    from grader.suites.speculative.drafts import Draft, PromptSet
    from reference.model import Config, Model
    from reference.solutions.speculative import speculative_generate

    config = Config(vocab_size=96, d_model=32, n_layers=1, n_heads=2, n_kv_heads=2, d_ff=32, max_seq_len=64)
    target, draft = Target("t", Model.random(config, seed=1)), Draft("d", Model.random(config, seed=2))
    work = projection.CallWork(1.0, 1.0)
    costs = (0.1, {k: Verify(1.5, 1.0, 0.0, work, work) for k in KS})
    prompts = PromptSet("tiny", ((5, 6, 7),))
    rows = k_rows(speculative_generate, target, draft, prompts, 4, 0.0, costs, 1)
    assert [r.k for r in rows] == list(KS) and all(r.tokens_per_call >= 1 and r.speedup > 0 for r in rows)

    def off_by_one(*args, **kwargs):
        tokens, stats = speculative_generate(*args, **kwargs)
        return [(t + 1) % 96 for t in tokens], stats

    k_rows(off_by_one, target, draft, prompts, 4, 0.0, costs, 1)
    """
)


def test_the_k_table_stops_when_greedy_speculative_decoding_parts_from_plain_decoding():
    env = {**os.environ, **ONE_BLAS_THREAD, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", K_ROWS], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 1, done.stderr
    assert "greedy speculative decoding (t, d, k = 1) parts from plain" in done.stderr


def test_kata_bench_hands_the_speculative_benchmark_the_table_kata_play_stack_drafts_with(tmp_path, monkeypatch):
    """The benchmark imports nothing of the learner's tools: `kata bench` distils the target's own table (as kata
    play stack does, here on a short text), saves it for the benchmark and says whose it is; other katas get nothing."""
    from grader.learn import table_draft

    monkeypatch.setenv("KATA_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setattr(table_draft, "LEARNER_CHARS", 1500)
    assert table_draft.bench_args("kv_cache", "reference", tmp_path) == []
    flag, path, says, whose = table_draft.bench_args("speculative", "reference", tmp_path)
    assert (flag, says) == ("--table", "--table-whose") and "distill_ngram's table" in whose
    assert len(NGramLM.pretrained(path).contexts) > 0


def test_a_target_of_no_kind_is_refused_by_the_benchmark_not_a_traceback_of_kata_bench(tmp_path):
    from click.testing import CliRunner

    from grader.cli.commands import main

    result = CliRunner().invoke(main, ["bench", "speculative", "--target", str(tmp_path / "none")])
    assert result.exit_code == 1 and not isinstance(result.exception, ValueError), result.output
