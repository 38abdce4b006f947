"""Speculative decoding of the shipped teacher: a table draft that costs almost nothing against a one-layer draft.

    kata bench speculative [--n-new 128] [--repeats 3] [--target reference] [--native-blas]
    python -m grader.suites.speculative.bench [the same] [--table FILE --table-whose TEXT]

Three pairs, each with the `--target` speculative_generate (reference,
katas or a folder) and every model behind `logits(tokens)`:
- the teacher with the table draft, a character n-gram table (NGramLM):
  the shipped one (reference/weights/ngram.npz), and beside it the table
  of --table. `kata bench speculative` passes your own there, distilled by
  your distill_ngram on the first LEARNER_CHARS characters of train.txt (in
  a jail, kept per kata file) when the distillation kata's ngram task
  passes (for --target katas, as `kata play stack` decides,
  grader.learn.table_draft: your last grade, recorded by this account's
  grader on the file as it is now; for 'reference' or a folder, its
  distill_ngram); the header says which and why (--table-whose);
- the teacher with the one-layer neural draft (draft.npz), the contrast;
- the dense control target (dense.npz: the teacher's shape with one SwiGLU
  as wide as its active experts) with the table draft.

First the costs, each a median of interleaved rounds in CPU seconds of
this process (a table's run lasts a millisecond or two, which the wall
clock of a shared CPU would time by chance): c, a draft call over a
one-token call of the target, both continuing a sequence by one token
(their calls inside the loop); v_k, a verify call of k + 1 new tokens over a
one-token call, at the end of each val.txt prompt, with the weight bytes it
reads over a one-token call's and the experts it wakes.

Then the projection, labelled so, not a measurement: v_k were each call
bound by this machine's memory bandwidth or GEMM rate (both measured at
bench time, one thread, in CPU seconds), max(weight bytes / bandwidth,
2 macs / GEMM rate), from the counted Work, for the teacher, the dense
control and a dense 7B-class model (from its shapes, fp16 weights); and
the measured cost of a few rows against one row of one large product, which
is why the measured v_k is higher.

Then, per pair, prompt set (VAL_PROMPTS prompts of 32 characters of
val.txt; a list-like prompt) and temperature (0; 1), for each k: the
acceptance rate a (accepted / drafted), alpha (the mean over the generated
positions of sum_x min(p(x), q(x)), teacher-forced; at temperature 0 the
share where the draft's argmax is the target's), tokens per target call,
c, v_k, Leviathan's predicted speedup (1 - alpha^(k+1)) / ((1 - alpha)
(k c + v_k)) and the measured one: plain cached decoding of the target
(`generate` through CachedLM, one call per token, the same n_new and rng
seeds) over speculative decoding, each run decoding every prompt of the
set, plain and every k taking turns (grader.measure.timing.interleave),
the median of the rounds' ratios; beside it the same ratio in CPU seconds of
this process, which leaves out what other programs on a shared CPU do
between its turns (on a quiet machine the two agree). Greedy, the
speculative tokens must be plain decoding's (checked; the run stops if
not); at temperature 1 they are another draw of the same distribution. The best k of each set follows
each table, and the bars of the speculative decoding kata close the output.

Without reference/weights/{teacher,draft,dense}.npz, random models of the
same configs stand in (their acceptance is near zero) and the output says so.
"""

from __future__ import annotations

import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO))  # run from a checkout without installing

from grader.kata import target as _target  # noqa: E402
from grader.measure import timing  # noqa: E402
from grader.measure.bench import (  # noqa: E402
    DRAFT,
    TEACHER,
    Panel,
    bench_parser,
    load_kata,
    plot,
    run_main,
    shipped_or_random,
    whole,
)
from grader.suites.speculative import projection  # noqa: E402
from grader.suites.speculative.drafts import Draft, PromptSet, prompt_sets, table_drafts  # noqa: E402
from reference.lm import SHIPPED_SHAPES, CachedLM, generate  # noqa: E402
from reference.model import Model  # noqa: E402
from reference.sampling import probs_from_logits  # noqa: E402

KS = (1, 2, 3, 4, 5, 6, 8)  # draft tokens per round
TEMPERATURES = (0.0, 1.0)
SEED = 0  # prompt i of a set decodes with np.random.default_rng(SEED + i), plain and speculative alike
VERIFY_CALLS = 4  # verify calls per prompt per timed run of verify_costs
LLAMA_7B = dict(d_model=4096, n_layers=32, d_ff=11008, vocab=32000, bytes_per_weight=2)  # a dense 7B-class model
CONTEXT_7B = 512  # cached tokens before the 7B-class model's projected call
BARS = (  # (what, target, draft, set, temperature, bar, goal)
    ("greedy, val.txt prompts, best k", "teacher", "shipped table", "val.txt", 0.0, 1.25, 1.5),
    ("greedy, list-like prompt, best k", "teacher", "shipped table", "list-like", 0.0, 1.6, 2.0),
    ("temperature 1, val.txt prompts, best k", "teacher", "shipped table", "val.txt", 1.0, 1.05, None),
)
OWN_WITHIN = 0.10  # the learner's own table's best greedy val.txt speedup within this share of the shipped table's


@dataclass(frozen=True)
class Target:
    label: str
    model: Model


@dataclass(frozen=True)
class Row:
    """One k of one pair, prompt set and temperature."""

    target: str
    draft: str
    prompts: str
    temperature: float
    k: int
    accept: float  # accepted / drafted
    alpha: float
    tokens_per_call: float
    c: float
    v: float
    predicted: float  # Leviathan's speedup at the measured alpha, c and v_k
    speedup: float  # measured: median over interleaved rounds of plain time / speculative time
    cpu_speedup: float  # the same in CPU seconds of this process


def expected_tokens_per_call(alpha: float, k: int) -> float:
    """Leviathan's (1 - alpha^(k+1)) / (1 - alpha): tokens a target call yields at acceptance alpha."""
    if alpha >= 1.0:
        return float(k + 1)
    return (1 - alpha ** (k + 1)) / (1 - alpha)


def leviathan(alpha: float, k: int, c: float, v: float) -> float:
    """The expected speedup of speculative decoding with k drafts of cost c and a verify call of cost v."""
    return expected_tokens_per_call(alpha, k) / (k * c + v)


# ------------------------------------------------------------------ costs


def call_costs(targets: list[Target], drafts: list[Draft], text: list[int], n0: int, repeats: int):
    """CPU seconds per call of each target (CachedLM) and draft, every call
    continuing text by one token after a prefill of text[:n0], all taking
    turns; returns {label: seconds per call}. CPU seconds of this process: a
    table's run lasts a millisecond or two, a target's a second, and on a
    shared CPU the wall clock would count other programs' turns in the long
    runs and, by chance, miss them in the short ones."""
    factories = [(t.label, lambda m=t.model: CachedLM(m)) for t in targets] + [(d.label, d.lm) for d in drafts]

    def calls(factory):
        def run(_round: int) -> float:
            lm = factory()
            lm.logits(text[:n0])
            t0 = time.process_time()
            for end in range(n0 + 1, len(text) + 1):
                lm.logits(text[:end])
            return time.process_time() - t0

        return run

    rounds = timing.interleave([calls(f) for _, f in factories], rounds=max(repeats, 5), spread=0.05)
    return {label: rounds.median(i) / (len(text) - n0) for i, (label, _) in enumerate(factories)}


@dataclass(frozen=True)
class Verify:
    """What a verify call of k + 1 new tokens costs against a one-token call, at the end of each prompt."""

    v: float  # time ratio, median of interleaved rounds
    bytes_x: float  # weight bytes ratio (Work.weight_bytes)
    experts: float  # experts a layer the call runs, on average (0: dense)
    work: projection.CallWork  # the verify call's mean work
    one: projection.CallWork  # a one-token call's mean work


def mean_work(model: Model, spots, m: int) -> tuple[projection.CallWork, float]:
    """The mean Work of a cached call scoring the first m tokens of each spot's (prefix, continuation) after
    its prefix, and the experts a layer it runs (0 for a dense model)."""
    bytes_, macs, experts = [], [], []
    c = model.config
    for prefix, new in spots:
        lm = CachedLM(model)
        lm.logits(prefix)
        with model.count_work() as work:
            lm.logits(prefix + new[:m])
        bytes_.append(work.weight_bytes)
        macs.append(work.macs)
        experts.append(work.bytes_by_piece["experts"] / (3 * c.d_model * c.d_ff * 4) / c.n_layers)
    return projection.CallWork(statistics.mean(bytes_), statistics.mean(macs)), statistics.mean(experts)


def verify_costs(model: Model, spots, repeats: int) -> dict[int, Verify]:
    """For each k of KS: a CachedLM call computing k + 1 new positions after
    a cached prompt (a round's verify call) over one computing one, timed in
    turns (CPU seconds, as call_costs), VERIFY_CALLS of each at the end of
    each spot's prompt; beside it the calls' counted work."""
    lms = []
    for prefix, _ in spots:
        lms.append(CachedLM(model))
        lms[-1].logits(prefix)

    def extend(m: int):
        def run(_round: int) -> float:
            t0 = time.process_time()
            for lm, (prefix, new) in zip(lms, spots):
                for _ in range(VERIFY_CALLS):
                    lm.logits(prefix + new[:m])  # computes the m positions after the cached prompt
                    lm.logits(prefix)  # back to the prompt alone: nothing computed
            return time.process_time() - t0

        return run

    one, _ = mean_work(model, spots, 1)
    costs = {}
    for k in KS:
        rounds = timing.interleave([extend(k + 1), extend(1)], rounds=max(repeats, 5), spread=0.05)
        work, experts = mean_work(model, spots, k + 1)
        costs[k] = Verify(rounds.ratio(0, 1), work.weight_bytes / one.weight_bytes, experts, work, one)
    return costs


def print_costs(costs: dict[str, float], targets: list[Target], drafts: list[Draft]) -> dict[tuple[str, str], float]:
    """The call costs and c of each draft against each target, printed; returns {(target, draft): c}."""
    print("a call continuing a sequence by one token (CPU seconds, median of interleaved rounds):")
    for t in targets:
        print(f"  {t.label:<16} {costs[t.label] * 1e6:>7.0f} us (a CachedLM call)")
    cs = {}
    for d in drafts:
        against = []
        for t in targets:
            cs[t.label, d.label] = costs[d.label] / costs[t.label]
            against.append(f"c = {cs[t.label, d.label]:.3f} of a {t.label} call")
        print(f"  {d.label:<16} {costs[d.label] * 1e6:>7.0f} us: " + ", ".join(against))
    return cs


def print_verify(label: str, verify: dict[int, Verify], n_experts: int, rates: projection.Rates) -> None:
    print(f"\nthe {label}'s verify call, k + 1 new tokens at the end of each val.txt prompt, over a one-token call:")
    print(f"{'k':>3} {'experts/layer':>14} {'bytes x':>8} {'v_k':>6} {'v_k / bytes x':>14} {'projection':>11}")
    for k, cost in verify.items():
        experts = f"{cost.experts:.2f} of {n_experts}" if n_experts else "dense"
        projected = projection.projected_v(cost.one, cost.work, rates)
        ratio = cost.v / cost.bytes_x
        print(f"{k:>3} {experts:>14} {cost.bytes_x:>8.2f} {cost.v:>6.2f} {ratio:>14.2f} {projected:>11.2f}")
    print(
        "bytes x = the call's weight bytes over a one-token call's (Work.weight_bytes); v_k measured, in turns, "
        "CPU seconds;\n"
        "projection = v_k were both calls bound by this machine's bandwidth or GEMM rate (below), not measured"
    )


def print_projection(verifies: dict[str, dict[int, Verify]], rates: projection.Rates, rows_x: float) -> None:
    """The projected v_k of each target and of a dense 7B-class model, and why the measured v_k differ."""
    print(
        f"\nprojection, not a measurement: v_k = max(bytes / bandwidth, 2 macs / GEMM rate) of a k + 1 token call "
        f"over a one-token call,\nat this machine's rates measured now, one thread: memory "
        f"{rates.bandwidth / 1e9:.1f} GB/s (a {projection.BANDWIDTH_MIB} MiB array summed), GEMM "
        f"{rates.gemm / 1e9:.0f} GFLOP/s (float32 {projection.GEMM_N}^3), CPU seconds"
    )
    print(f"{'model':<44}{'MB/call':>9}" + "".join(f"{'v_' + str(k):>7}" for k in KS))
    for label, verify in verifies.items():
        one = verify[KS[0]].one
        values = "".join(f"{projection.projected_v(one, verify[k].work, rates):>7.2f}" for k in KS)
        print(f"{label + ' (float32, counted Work)':<44}{one.weight_bytes / 1e6:>9.2f}{values}")
    works = {T: projection.dense_work(T, context=CONTEXT_7B, **LLAMA_7B) for T in (1, *(k + 1 for k in KS))}
    values = "".join(f"{projection.projected_v(works[1], works[k + 1], rates):>7.2f}" for k in KS)
    label = f"dense 7B-class (fp16, from shapes, {CONTEXT_7B} cached)"
    print(f"{label:<44}{works[1].weight_bytes / 1e6:>9.0f}{values}")
    print(
        f"measured here instead: a product of {projection.FEW_ROWS} rows with a {projection.ROWS_WEIGHT[0]}x"
        f"{projection.ROWS_WEIGHT[1]} float32 matrix costs {rows_x:.2f}x a one-row product (median of interleaved "
        "rounds):\nfew-row products go through BLAS gemm, which repacks the weights, where one row streams them "
        "(gemv);\nand at the teacher's size a call is mostly per-operation cost, which every row adds to"
    )


# ------------------------------------------------------------------ the k tables


def plain_run(target: Model, prompts: PromptSet, n: int, temperature: float):
    """Plain cached decoding of every prompt of the set, one target call per token."""

    def run() -> None:
        for i, prompt in enumerate(prompts.prompts):
            rng = np.random.default_rng(SEED + i)
            generate(CachedLM(target), list(prompt), n, temperature=temperature, rng=rng)

    return run


def spec_run(speculative_generate, target: Model, draft: Draft, prompts: PromptSet, n: int, temperature: float, k):
    """speculative decoding of every prompt of the set: a function returning [(tokens, stats)] per prompt."""

    def run():
        return [
            speculative_generate(
                CachedLM(target),
                draft.lm(),
                list(p),
                n,
                k=k,
                temperature=temperature,
                rng=np.random.default_rng(SEED + i),
            )
            for i, p in enumerate(prompts.prompts)
        ]

    return run


def alpha_along(target: Model, draft: Draft, prompts: PromptSet, outputs: list[list[int]], temperature: float) -> float:
    """Mean acceptance probability of a draft token over the generated positions, teacher-forced."""
    values = []
    for prompt, new in zip(prompts.prompts, outputs):
        tokens = list(prompt) + list(new)
        rows = slice(len(prompt) - 1, len(tokens) - 1)
        zt, zd = target.forward(tokens)[rows], draft.scores(tokens)[rows]  # (n_new, V) each
        if temperature == 0:
            values.append(zt.argmax(axis=1) == zd.argmax(axis=1))
        else:
            p, q = probs_from_logits(zt, temperature), probs_from_logits(zd, temperature)
            values.append(np.minimum(p, q).sum(axis=1))
    return float(np.mean(np.concatenate(values)))


def timed_twice(fn, cpu: list[float]):
    """fn as a run of timing.interleave, which times it on the wall clock, its CPU seconds appended to cpu."""

    def run(_round: int) -> None:
        t0 = time.process_time()
        fn()
        cpu.append(time.process_time() - t0)

    return run


def k_rows(spec, target: Target, draft: Draft, prompts: PromptSet, n: int, temperature: float, costs, repeats: int):
    """The rows of one pair, prompt set and temperature: each k's run once
    (its counts, and greedy its tokens checked against plain decoding's),
    then plain decoding and every k in interleaved rounds."""
    c, verify = costs
    greedy = [generate(CachedLM(target.model), list(p), n) for p in prompts.prompts] if temperature == 0 else None
    fns, rows = [plain_run(target.model, prompts, n, temperature)], []
    for k in KS:
        run = spec_run(spec, target.model, draft, prompts, n, temperature, k)
        out = run()
        if greedy is not None and [tokens for tokens, _ in out] != greedy:
            raise SystemExit(f"greedy speculative decoding ({target.label}, {draft.label}, k = {k}) parts from plain")
        drafted, accepted, calls = (sum(getattr(s, f) for _, s in out) for f in ("drafted", "accepted", "target_calls"))
        alpha = alpha_along(target.model, draft, prompts, [t for t, _ in out], temperature)
        v = verify[k].v
        rows.append([k, accepted / max(drafted, 1), alpha, (accepted + calls) / calls, leviathan(alpha, k, c, v)])
        fns.append(run)
    cpu = [[] for _ in fns]
    rounds = timing.interleave([timed_twice(f, s) for f, s in zip(fns, cpu)], rounds=repeats, spread=0.05, warmup=False)
    return [
        Row(
            target.label,
            draft.label,
            prompts.name,
            temperature,
            k,
            a,
            alpha,
            tpc,
            c,
            verify[k].v,
            pred,
            rounds.ratio(0, i),
            statistics.median(a / b for a, b in zip(cpu[0], cpu[i])),
        )
        for i, (k, a, alpha, tpc, pred) in enumerate(rows, start=1)
    ]


HEADER = ("k", "accept a", "alpha", "tokens/call", "c", "v_k", "Leviathan x", "speedup", "CPU x")


def print_rows(rows: list[Row]) -> None:
    cells = [
        (str(r.k), f"{r.accept:.3f}", f"{r.alpha:.3f}", f"{r.tokens_per_call:.2f}", f"{r.c:.3f}", f"{r.v:.2f}")
        + (f"{r.predicted:.2f}x", f"{r.speedup:.2f}x", f"{r.cpu_speedup:.2f}x")
        for r in rows
    ]
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(HEADER)]
    print(" | ".join(h.rjust(w) for h, w in zip(HEADER, widths)))
    for c in cells:
        print(" | ".join(cell.rjust(w) for cell, w in zip(c, widths)))
    wall, cpu = max(rows, key=lambda r: r.speedup), max(rows, key=lambda r: r.cpu_speedup)
    r = rows[0]
    print(
        f"best k: {wall.k}, {wall.speedup:.2f}x; in CPU seconds k = {cpu.k}, {cpu.cpu_speedup:.2f}x ({r.target}, "
        f"{r.draft}, {r.prompts}, temperature {r.temperature:g})"
    )


def pair_rows(spec, target: Target, draft: Draft, sets: list[PromptSet], n: int, costs, repeats: int) -> list[Row]:
    """The k tables of one pair, for every prompt set and temperature, printed; returns their rows."""
    rows = []
    for prompts in sets:
        for temperature in TEMPERATURES:
            print(
                f"\n{target.label} target, draft: {draft.label}; {prompts.name} ({len(prompts.prompts)} prompt"
                f"{'s' if len(prompts.prompts) > 1 else ''}), temperature {temperature:g}:"
            )
            mine = k_rows(spec, target, draft, prompts, n, temperature, costs, repeats)
            print_rows(mine)
            rows += mine
    return rows


def print_legend() -> None:
    print(
        "\naccept a = accepted / drafted; alpha = mean sum min(p, q) over the generated positions, teacher-forced "
        "(argmax agreement at temperature 0);\nc = a draft call over a one-token target call; v_k = a verify call "
        "over a one-token call (measured, above);\nLeviathan x = (1 - alpha^(k+1)) / ((1 - alpha)(k c + v_k)); "
        "speedup = plain cached decoding time / speculative time, the same prompts, n_new and seeds,\nthe median "
        "of interleaved rounds; CPU x = the same in CPU seconds of this process (what a shared CPU's other programs "
        "do between\nits turns left out)"
    )


def print_why_neural_loses(rows: list[Row], costs, table: str) -> None:
    """The one-layer draft's c against the table's, and their greedy agreement with the teacher on val.txt."""
    (c_neural, _), (c_table, _) = costs["teacher", "one-layer draft"], costs["teacher", table]
    alpha = {d: best(rows, "teacher", d, "val.txt", 0.0).alpha for d in ("one-layer draft", table)}
    print(
        f"\nwhy the one-layer draft loses here: a call costs c = {c_neural:.2f} of a teacher call (the {table}: "
        f"{c_table:.3f}),\nso a round of k = 4 pays {4 * c_neural:.2f} teacher calls of drafting before its verify "
        f"call, and it agrees with the teacher no more often\n(greedy, val.txt: alpha {alpha['one-layer draft']:.2f}, "
        f"the {table} {alpha[table]:.2f}) to pay that back"
    )


def best(rows: list[Row], target: str, draft: str, prompts: str, temperature: float, cpu: bool = False) -> Row | None:
    """The row of the fastest k of a pair, prompt set and temperature (on the wall clock, or in CPU seconds)."""
    mine = [r for r in rows if (r.target, r.draft, r.prompts, r.temperature) == (target, draft, prompts, temperature)]
    return max(mine, key=lambda r: r.cpu_speedup if cpu else r.speedup) if mine else None


def print_bars(rows: list[Row]) -> None:
    """The speculative decoding bars, against this run's best k."""
    print("\nthe bars (teacher target, shipped table draft, best k of this run):")
    for what, target, draft, prompts, temperature, bar, goal in BARS:
        row, cpu = (
            best(rows, target, draft, prompts, temperature),
            best(rows, target, draft, prompts, temperature, True),
        )
        if row is None:
            continue
        aim = f", goal {goal}x" if goal else ""
        print(
            f"  {what} (bar >= {bar}x{aim}): {row.speedup:.2f}x at k = {row.k}, {verdict(row.speedup / bar)}; "
            f"in CPU seconds {cpu.cpu_speedup:.2f}x at k = {cpu.k}, {verdict(cpu.cpu_speedup / bar)}"
        )
    own, shipped = (best(rows, "teacher", d, "val.txt", 0.0) for d in ("own table", "shipped table"))
    if own and shipped:
        own_cpu, shipped_cpu = (best(rows, "teacher", d, "val.txt", 0.0, True) for d in ("own table", "shipped table"))
        wall, cpu = own.speedup / shipped.speedup, own_cpu.cpu_speedup / shipped_cpu.cpu_speedup
        print(
            "  your own table against the shipped one, greedy, val.txt, best k "
            f"(bar: within {OWN_WITHIN:.0%} or faster): "
            f"{wall:.0%}, {verdict(wall / (1 - OWN_WITHIN))}; "
            f"in CPU seconds {cpu:.0%}, {verdict(cpu / (1 - OWN_WITHIN))}"
        )


def verdict(share: float) -> str:
    """'met' for a figure at or above its bar (share = figure / bar), else by how much of the bar it falls short."""
    return "met" if share >= 1 else f"MISSED by {1 - share:.0%} of the bar"


def plot_tokens_per_call(path, rows: list[Row]) -> None:
    panels = []
    for temperature in TEMPERATURES:
        mine = [r for r in rows if r.temperature == temperature and r.prompts == "val.txt"]
        ks = [r.k for r in mine]
        alpha = statistics.median(r.alpha for r in mine)
        panel = Panel(f"temperature {temperature:g}", "k, draft tokens per round", "tokens per target call")
        panel.lines = [
            ("measured", ks, [r.tokens_per_call for r in mine]),
            (f"Leviathan at alpha {alpha:.2f}", ks, [expected_tokens_per_call(alpha, k) for k in ks]),
        ]
        panel.dashed = (panel.lines[1][0],)
        panels.append(panel)
    plot(path, f"Speculative decoding: tokens per call of the teacher, {rows[0].draft} draft", panels)


# ------------------------------------------------------------------ main


def models() -> tuple[Target, Target, Model, str]:
    """The teacher, the dense control, the neural draft, and which they are (shipped, or random stand-ins)."""
    loaded = [shipped_or_random(name, seed) for name, seed in (("teacher", 1), ("dense", 3), ("draft", 2))]
    if all(shipped for _, shipped in loaded):
        (teacher, _), (dense, _), (draft, _) = loaded
        which = "shipped teacher, dense control and one-layer draft (reference/weights)"
    else:  # never mix a shipped model with a stand-in
        teacher, dense, draft = (
            Model.random(c, seed=s) for c, s in ((TEACHER, 1), (SHIPPED_SHAPES["dense"], 3), (DRAFT, 2))
        )
        which = "RANDOM stand-ins (some shipped weights are missing)"
    return Target("teacher", teacher), Target("dense control", dense), draft, which


def costs_and_projection(targets: list[Target], drafts: list[Draft], sets: list[PromptSet], n: int, repeats: int):
    """The call costs, the verify costs and the projection, printed; returns {(target, draft): (c, verify)}."""
    teacher = targets[0].model
    first = list(sets[0].prompts[0])
    cs = print_costs(
        call_costs(targets, drafts, first + generate(CachedLM(teacher), first, n), len(first), repeats), targets, drafts
    )
    verifies, rates = {}, projection.machine_rates()
    for t in targets:
        spots = [(list(p), generate(CachedLM(t.model), list(p), max(KS) + 1)) for p in sets[0].prompts]
        verifies[t.label] = verify_costs(t.model, spots, repeats)
        print_verify(t.label, verifies[t.label], t.model.config.n_experts, rates)
    print_projection(verifies, rates, projection.row_products(repeats))
    return {(t, d): (c, verifies[t]) for (t, d), c in cs.items()}


def main(argv: list[str]) -> int:
    parser = bench_parser(__doc__.splitlines()[0], "speculative", 3, "interleaved rounds per table at least")
    parser.add_argument("--n-new", type=whole(1), default=128, help="tokens generated per prompt and run")
    parser.add_argument(
        "--table", help="an n-gram table file (NGramLM.save) to draft with beside the shipped one: your own, from kata"
    )
    parser.add_argument(
        "--table-whose", default="the shipped n-gram table", help="what the header says of the table drafts"
    )
    args = parser.parse_args(argv)
    sets = prompt_sets()
    longest = max(len(p) for s in sets for p in s.prompts)
    if not 1 <= args.n_new <= TEACHER.max_seq_len - longest:
        parser.error(f"need 1 <= --n-new <= {TEACHER.max_seq_len - longest}")
    spec = load_kata(args.target, "speculative").speculative_generate
    teacher, dense, neural, which = models()
    print(f"models: {which}; speculative_generate from {_target.describe(args.target)}")
    tables = table_drafts(args.table, args.table_whose)
    drafts = [*tables, Draft("one-layer draft", neural)]
    print(
        f"teacher {teacher.model.config.n_params():,} parameters, dense control {dense.model.config.n_params():,}, "
        f"one-layer draft {neural.config.n_params():,}; prompts: {len(sets[0].prompts)} of val.txt "
        f"({len(sets[0].prompts[0])} characters), one list-like ({len(sets[1].prompts[0])}); {args.n_new} new tokens "
        f"each; medians of at least {args.repeats} interleaved rounds\n"
    )
    costs = costs_and_projection([teacher, dense], drafts, sets, args.n_new, args.repeats)
    print_legend()
    rows = []
    for target, draft in [(teacher, d) for d in drafts] + [(dense, tables[0])]:
        rows += pair_rows(spec, target, draft, sets, args.n_new, costs[target.label, draft.label], args.repeats)
    print_why_neural_loses(rows, costs, tables[0].label)
    print_bars(rows)
    plot_tokens_per_call(args.plot, [r for r in rows if r.target == "teacher" and r.draft == tables[0].label])
    return 0


if __name__ == "__main__":
    run_main(lambda: sys.exit(main(sys.argv[1:])))
