"""Train the shipped teacher and draft with PyTorch on the CPU.

    pip install -e '.[train]'
    python tools/train.py --minutes 33

Rebuilds the corpus (tools/build_corpus.py), then, from one seed:
1. the teacher, an MoE model, on the training text (next-character
   cross-entropy plus a small load-balancing loss on the routers);
2. the draft, a small dense model, distilled from the teacher with the
   project's distillation loss at temperature T and weight alpha;
3. the same draft config on hard labels alone, from the same init and the
   same batches for as many steps (hence tokens) as the distilled draft
   took, shipped for comparison only (benchmarks/bench_pretrained.py).

Each phase runs a fixed number of steps (TEACHER_STEPS, DRAFT_STEPS) unless
its share of --minutes runs out first: the teacher gets TEACHER_SHARE of the
budget and each draft DRAFT_SHARE. The learning rate decays with whichever
is further along, steps or time, so a phase cut short by a slow machine still
ends at its lowest learning rate; a phase that finishes its steps is
reproducible from the seed. Every phase checkpoints into --work-dir and
resumes from there when rerun; a finished phase is not trained again.

Exports reference/weights/{teacher,draft,draft_hard}.npz (float16) and
writes reference/data/TRAINING.md with what the run measured.

    python tools/train.py --hard-draft-only

retrains phase 3 alone: it needs no teacher and does not touch teacher.npz,
draft.npz, the corpus or TRAINING.md. It trains on the committed corpus
(reference/data/train.txt, the text the shipped draft saw), from the init and
batch seeds the distilled draft used (--seed + 1, as in a full run), for all
DRAFT_STEPS steps (the shipped draft's count) with no time cap, so the
learning-rate schedule depends on steps alone; it exports
reference/weights/draft_hard.npz and prints its row of TRAINING.md's tables
(agreement measured against the shipped teacher.npz when it is there). Like
every phase it resumes a draft_hard.pt checkpoint in --work-dir; delete that
file to train from the start.

    python tools/train.py --drafts-only

retrains phases 2 and 3 alone, as a full run whose teacher phase is finished
does: it distils the draft from the shipped teacher.npz (what a full run
distils from: the exported teacher, loaded back), then trains the hard-label
draft for as many steps, both on the committed corpus, from the same seeds,
with no time cap. It exports draft.npz and draft_hard.npz and prints both
drafts' rows of TRAINING.md's tables; it does not touch teacher.npz, the
corpus or TRAINING.md. Checkpoints draft.pt and draft_hard.pt in --work-dir
resume as above.

    python tools/train.py --dense-target-only

trains the dense target alone: the teacher's shape with one SwiGLU as wide
as its top_k experts together (reference.lm.SHIPPED_SHAPES["dense"]), on
the committed corpus, from the teacher's seed and batches, for
TEACHER_STEPS steps with no time cap and hard labels alone, as the teacher
is trained. It exports reference/weights/dense.npz and prints its row of
TRAINING.md's results table and the greedy agreement of the shipped draft
and teacher with it. It touches no other weights, the corpus or
TRAINING.md. grader/suites/speculative/bench.py sets it beside the teacher as
a speculative target: the same draft, a target whose verify call reads no
more weights than a one-token call.

    python tools/train.py --ngram-only

distils the n-gram draft (reference/weights/ngram.npz) from the shipped
teacher.npz with NumPy alone: tools/ngram_table.py, which runs without
PyTorch too, says how.

`TorchModel` (tools/torch_model.py) is reference.model.Model in PyTorch: the
same weight names and layouts (y = x @ W with W of shape (in, out)), the same
arithmetic. tests/reference/test_parity.py checks that both give the same logits.
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

TOOLS = Path(__file__).resolve().parent
REPO = TOOLS.parent
sys.path[:0] = [str(REPO), str(TOOLS)]

import build_corpus  # noqa: E402
from torch_model import TorchModel, init_model, rms_norm  # noqa: E402

from reference.lm import SHIPPED_SHAPES  # noqa: E402
from reference.model import WEIGHTS_DIR, Config, Model  # noqa: E402
from reference.tokenizer import VOCAB_SIZE, encode  # noqa: E402

TEACHER, DRAFT, DENSE = SHIPPED_SHAPES["teacher"], SHIPPED_SHAPES["draft"], SHIPPED_SHAPES["dense"]
TEACHER_STEPS = 3500
DRAFT_STEPS = 1800
TEACHER_SHARE = 0.7  # of --minutes: the most the teacher may take
DRAFT_SHARE = 0.15  # of --minutes: the most each draft may take
SEQ_LEN = 256  # tokens per training window (targets are the next 256 characters)
BATCH = 8  # windows per step
LR = {"teacher": 2e-3, "draft": 3e-3, "draft_hard": 3e-3, "dense": 2e-3}  # peak learning rates
WARMUP_STEPS = 30
FINAL_LR_FRACTION = 0.1  # cosine decay from the peak to this fraction at the end of a phase
GRAD_CLIP = 1.0
BALANCE_COEF = 0.01  # weight of the Switch-Transformer load-balancing loss (teacher only)
TEMPERATURE = 2.0  # distillation temperature T
ALPHA = 0.5  # weight of the soft (teacher) term; 0.8 and 0.9 agreed less with the teacher
LOG_EVERY_S = 30.0  # seconds between progress lines
CHECKPOINT_EVERY_S = 120.0  # seconds between checkpoints
EVAL_WINDOWS = 32  # validation windows scored in progress lines
BIGRAM_SMOOTHING = 0.1  # added to every bigram count


def distillation_loss(
    student: torch.Tensor, teacher: torch.Tensor, labels: torch.Tensor, temperature: float, alpha: float
) -> torch.Tensor:
    """alpha T^2 KL(softmax(teacher/T) || softmax(student/T)) + (1 - alpha) CE(labels, student),
    both averaged over rows: student, teacher (N, V), labels (N,)."""
    soft = F.kl_div(
        F.log_softmax(student / temperature, dim=-1),
        F.log_softmax(teacher / temperature, dim=-1),
        reduction="batchmean",
        log_target=True,
    )
    return alpha * temperature**2 * soft + (1 - alpha) * F.cross_entropy(student, labels)


def windows(tokens: np.ndarray) -> torch.Tensor:
    """Non-overlapping evaluation windows of SEQ_LEN + 1 tokens: (n, SEQ_LEN + 1)."""
    n = (tokens.size - 1) // SEQ_LEN
    idx = np.arange(n)[:, None] * SEQ_LEN + np.arange(SEQ_LEN + 1)[None, :]
    return torch.from_numpy(tokens[idx])


@torch.no_grad()
def evaluate(model: TorchModel, val: torch.Tensor, reference: TorchModel | None = None) -> dict[str, float]:
    """Mean next-token loss (nats) and bits/char over val windows (n, SEQ_LEN + 1);
    with a reference model, also the share of positions where both argmaxes agree."""
    model.eval()
    total, agree, count = 0.0, 0, 0
    for batch in val.split(BATCH):
        logits = model(batch[:, :-1])
        total += F.cross_entropy(logits.flatten(0, 1), batch[:, 1:].flatten(), reduction="sum").item()
        if reference is not None:
            agree += (logits.argmax(-1) == reference(batch[:, :-1]).argmax(-1)).sum().item()
        count += batch[:, 1:].numel()
    model.train()
    out = {"loss": total / count, "bpc": total / count / math.log(2)}
    if reference is not None:
        out["agreement"] = agree / count
    return out


def bigram_bpc(train: np.ndarray, val: np.ndarray) -> float:
    """Bits/char on val of a bigram model counted on train, with additive smoothing."""
    counts = np.bincount(train[:-1] * VOCAB_SIZE + train[1:], minlength=VOCAB_SIZE**2)
    counts = counts.reshape(VOCAB_SIZE, VOCAB_SIZE) + BIGRAM_SMOOTHING
    logp = np.log2(counts / counts.sum(axis=1, keepdims=True))
    return float(-logp[val[:-1], val[1:]].mean())


def learning_rate(peak: float, step: int, progress: float) -> float:
    """Linear warmup over WARMUP_STEPS, then cosine decay by the fraction of the phase done."""
    if step < WARMUP_STEPS:
        return peak * (step + 1) / WARMUP_STEPS
    cos = 0.5 * (1 + math.cos(math.pi * min(progress, 1.0)))
    return peak * (FINAL_LR_FRACTION + (1 - FINAL_LR_FRACTION) * cos)


def train_phase(
    name: str,
    config: Config,
    steps: int,
    budget_s: float,
    train: np.ndarray,
    val: torch.Tensor,
    seed: int,
    work_dir: Path,
    teacher: TorchModel | None = None,
) -> tuple[TorchModel, dict]:
    """Train one model for `steps` steps or budget_s seconds of wall clock,
    whichever ends first (resuming a checkpoint in work_dir if there is one);
    returns the model and a summary. With a teacher, distil from it."""
    ckpt_path = work_dir / f"{name}.pt"
    model, opt, gen, state = started(name, config, seed, ckpt_path)
    data = torch.from_numpy(train)
    val_probe = val[:EVAL_WINDOWS]
    print(f"[{name}] {config.n_params():,} parameters, {steps} steps or {budget_s / 60:.1f} min", flush=True)
    start = time.perf_counter() - state["elapsed"]
    last_log = last_ckpt = time.perf_counter()
    log_tokens, log_loss, log_steps = 0, 0.0, 0
    while not state["done"]:
        progress = max(state["step"] / steps, (time.perf_counter() - start) / budget_s)
        lr = learning_rate(LR[name], state["step"], progress)
        for group in opt.param_groups:
            group["lr"] = lr
        starts = torch.randint(0, data.numel() - SEQ_LEN - 1, (BATCH,), generator=gen)
        batch = data[starts[:, None] + torch.arange(SEQ_LEN + 1)]  # (B, SEQ_LEN + 1)
        inputs, labels = batch[:, :-1], batch[:, 1:].flatten()
        loss, ce = step_loss(model, inputs, labels, teacher)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), GRAD_CLIP)
        opt.step()
        state["step"] += 1
        state["tokens"] += inputs.numel()
        log_tokens, log_loss, log_steps = log_tokens + inputs.numel(), log_loss + ce.item(), log_steps + 1
        now = time.perf_counter()
        state["elapsed"] = now - start
        state["done"] = state["step"] >= steps or state["elapsed"] >= budget_s
        if now - last_log >= LOG_EVERY_S or state["done"]:
            log_progress(name, model, val_probe, state, lr, log_loss / log_steps, log_tokens / (now - last_log))
            last_log, log_tokens, log_loss, log_steps = time.perf_counter(), 0, 0.0, 0
        if time.perf_counter() - last_ckpt >= CHECKPOINT_EVERY_S or state["done"]:
            save_checkpoint(ckpt_path, model, opt, gen, state)
            last_ckpt = time.perf_counter()
    return model, state


def started(
    name: str, config: Config, seed: int, ckpt_path: Path
) -> tuple[TorchModel, torch.optim.Optimizer, torch.Generator, dict]:
    """A phase's model, optimizer, batch generator and state: fresh from seed, or as the checkpoint at
    ckpt_path left them when there is one."""
    model = init_model(config, seed)
    opt = torch.optim.AdamW(model.parameters(), lr=LR[name], betas=(0.9, 0.95), weight_decay=0.0)
    gen = torch.Generator().manual_seed(seed)
    state = {"step": 0, "elapsed": 0.0, "tokens": 0, "done": False, "log": []}
    if ckpt_path.is_file():
        ckpt = torch.load(ckpt_path, weights_only=False)
        model.load_state_dict(ckpt["model"])
        opt.load_state_dict(ckpt["opt"])
        gen.set_state(ckpt["gen"])
        state = ckpt["state"]
        print(f"[{name}] resuming at step {state['step']} ({state['elapsed']:.0f}s spent)", flush=True)
    return model, opt, gen, state


def save_checkpoint(
    ckpt_path: Path, model: TorchModel, opt: torch.optim.Optimizer, gen: torch.Generator, state: dict
) -> None:
    """Write what `started` resumes from to ckpt_path, whole or not at all."""
    tmp = ckpt_path.with_suffix(".tmp")
    torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "gen": gen.get_state(), "state": state}, tmp)
    os.replace(tmp, ckpt_path)


def step_loss(
    model: TorchModel, inputs: torch.Tensor, labels: torch.Tensor, teacher: TorchModel | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """The loss one step minimises on inputs (B, SEQ_LEN) and labels (B * SEQ_LEN,), and its next-token
    cross-entropy: distillation from the teacher when there is one, else the cross-entropy (plus the
    load-balancing loss for an MoE model)."""
    logits, balance = model.run(inputs)
    logits = logits.flatten(0, 1)
    ce = F.cross_entropy(logits, labels)
    if teacher is not None:
        with torch.no_grad():
            teacher_logits = teacher(inputs).flatten(0, 1)
        return distillation_loss(logits, teacher_logits, labels, TEMPERATURE, ALPHA), ce
    return (ce + BALANCE_COEF * balance if model.config.is_moe else ce), ce


def log_progress(
    name: str, model: TorchModel, val_probe: torch.Tensor, state: dict, lr: float, train_ce: float, tok_per_s: float
) -> None:
    """Score the model on val_probe, add the line to state["log"] and print it."""
    probe = evaluate(model, val_probe)
    line = {
        "step": state["step"],
        "elapsed_s": round(state["elapsed"]),
        "lr": lr,
        "train_ce": train_ce,
        "val_ce": probe["loss"],
        "tok_per_s": tok_per_s,
    }
    state["log"].append(line)
    print(
        f"[{name}] step {line['step']:5d}  {line['elapsed_s']:5d}s  lr {lr:.2e}  "
        f"train ce {line['train_ce']:.3f}  val ce {line['val_ce']:.3f}  "
        f"{line['tok_per_s']:,.0f} tok/s",
        flush=True,
    )


def exported(model: TorchModel, path: Path) -> TorchModel:
    """Save model to path in float16 and load it back, so what is measured is what ships."""
    path.parent.mkdir(parents=True, exist_ok=True)
    model.to_reference().save(path, dtype=np.float16)
    return TorchModel.from_reference(Model.load(path)).eval()


@torch.no_grad()
def expert_usage(model: TorchModel, val: torch.Tensor) -> list[list[float]]:
    """Per MoE layer, the share of routed slots each expert takes on val windows."""
    c, counts = model.config, np.zeros((model.config.n_layers, model.config.n_experts))
    x = model.w("tok_emb")[val[:, :-1]]
    for i in range(c.n_layers):
        p = f"layers.{i}."
        x = x + model.attention(p, rms_norm(x, model.w(p + "attn_norm"), c.norm_eps))
        h = rms_norm(x, model.w(p + "mlp_norm"), c.norm_eps).reshape(-1, c.d_model)
        top_i = (h @ model.w(p + "router")).topk(c.top_k, dim=-1).indices
        counts[i] = np.bincount(top_i.flatten().numpy(), minlength=c.n_experts)
        x = x + model.moe(p, h)[0].reshape(x.shape)
    return (counts / counts.sum(axis=1, keepdims=True)).round(3).tolist()


def report(args, results: dict, corpus: dict, times: dict, usage) -> str:
    """TRAINING.md: how the run trained the models, then what it measured."""
    return report_setup(args, results, corpus, times) + report_results(results, times, usage)


def report_setup(args, results: dict, corpus: dict, times: dict) -> str:
    """TRAINING.md up to its results: the command, the machine, the corpus, the models and how they trained."""
    return f"""# How the shipped weights were trained

Written by `tools/train.py` at the end of its run; the numbers are that run's.

## Command

    {" ".join(["python", "tools/train.py"] + sys.argv[1:])}

Machine: {os.cpu_count()} CPU cores ({platform.machine()}, {platform.system()}), shared with other
work, {torch.get_num_threads()} torch thread(s); Python {platform.python_version()}, torch {torch.__version__},
NumPy {np.__version__}. Seed {args.seed}. Total training wall clock
{sum(v["elapsed"] for v in times.values()) / 60:.1f} minutes, plus corpus building and evaluation.

## Corpus

{corpus["train_chars"]:,} training and {corpus["val_chars"]:,} validation characters
(see PROVENANCE.md). Validation is scored on all {results["windows"]} non-overlapping
windows of {SEQ_LEN} predicted characters.

## Models

| model | config |
|---|---|
| teacher | {TEACHER} ({TEACHER.n_params():,} parameters) |
| draft | {DRAFT} ({DRAFT.n_params():,} parameters) |

Both train with AdamW (betas 0.9, 0.95, no weight decay), batches of {BATCH} windows
of {SEQ_LEN} characters, {WARMUP_STEPS} warmup steps, cosine decay to
{FINAL_LR_FRACTION:.0%} of the peak learning rate over the phase, gradient
clipping at {GRAD_CLIP}. The teacher adds {BALANCE_COEF} x the Switch load-balancing
loss. The draft minimises alpha T^2 KL(teacher_T || draft_T) + (1 - alpha) CE with
T = {TEMPERATURE}, alpha = {ALPHA}. The hard-label draft is the same config, init,
batches and step count trained on cross-entropy alone; it ships as
draft_hard.npz for comparison only.
Planned steps: teacher {TEACHER_STEPS}, drafts {DRAFT_STEPS}; a phase whose share of
`--minutes` ran out first stopped early (compare the steps column).

"""


def report_results(results: dict, times: dict, usage) -> str:
    """TRAINING.md's results: each model's scores on the exported weights, the drafts side by side, and
    how the teacher's experts share the routed slots."""
    d, h = results["draft"], results["draft_hard"]
    phases = "\n".join(
        f"| {name} | {times[name]['elapsed'] / 60:.1f} | {times[name]['step']:,} | {times[name]['tokens']:,} | "
        f"{times[name]['log'][-1]['train_ce']:.3f} | {results[name]['loss']:.3f} | {results[name]['bpc']:.3f} |"
        for name in ("teacher", "draft", "draft_hard")
    )
    return f"""## Results

Measured on the exported float16 weights, loaded back as float32.

| model | minutes | steps | training tokens | final train CE (nats) | val CE (nats) | val bits/char |
|---|---|---|---|---|---|---|
{phases}
| bigram baseline (train counts + {BIGRAM_SMOOTHING}) | | | | | | {results["bigram_bpc"]:.3f} |

Greedy top-1 agreement with the teacher on every validation position. Both
drafts start from the same weights and see the same batches for the same
number of steps; only the loss differs. (The hard-label draft takes less wall
clock: it runs no teacher forward per batch.)

| draft | steps | val bits/char | agreement |
|---|---|---|---|
| distilled (shipped) | {times["draft"]["step"]:,} | {d["bpc"]:.3f} | {d["agreement"]:.2%} |
| hard labels only | {times["draft_hard"]["step"]:,} | {h["bpc"]:.3f} | {h["agreement"]:.2%} |

Teacher expert usage on validation (share of routed slots per expert, one row per layer):
{chr(10).join(f"- layer {i}: {row}" for i, row in enumerate(usage))}
"""


def read_corpus(name: str) -> np.ndarray:
    return np.array(encode((build_corpus.DATA_DIR / name).read_text(encoding="ascii")), dtype=np.int64)


def shipped_frozen(name: str) -> TorchModel | None:
    """The shipped name.npz as a frozen TorchModel, or None when it is not there."""
    path = WEIGHTS_DIR / f"{name}.npz"
    if not path.is_file():
        return None
    model = TorchModel.from_reference(Model.load(path)).eval()
    for p in model.parameters():
        p.requires_grad_(False)
    return model


def print_draft_rows(name: str, label: str, state: dict, m: dict, teacher: TorchModel | None) -> None:
    """A draft's rows of TRAINING.md's two results tables."""
    agreement = f"{m['agreement']:.2%}" if teacher is not None else "(no teacher.npz to compare with)"
    print(
        f"| {name} | {state['elapsed'] / 60:.1f} | {state['step']:,} | {state['tokens']:,} | "
        f"{state['log'][-1]['train_ce']:.3f} | {m['loss']:.3f} | {m['bpc']:.3f} |\n"
        f"| {label} | {state['step']:,} | {m['bpc']:.3f} | {agreement} |",
        flush=True,
    )


def train_hard_draft_only(args) -> None:
    """Phase 3 alone (see the module docstring): train, export and print the hard-label draft's rows."""
    train, val = read_corpus("train.txt"), windows(read_corpus("val.txt"))
    hard, state = train_phase("draft_hard", DRAFT, DRAFT_STEPS, math.inf, train, val, args.seed + 1, args.work_dir)
    hard = exported(hard, WEIGHTS_DIR / "draft_hard.npz")
    print("evaluating on all validation windows...", flush=True)
    teacher = shipped_frozen("teacher")
    print_draft_rows("draft_hard", "hard labels only", state, evaluate(hard, val, teacher), teacher)


def train_drafts_only(args) -> None:
    """Phases 2 and 3 (see the module docstring) from the shipped teacher.npz:
    train, export and print both drafts' rows."""
    teacher = shipped_frozen("teacher")
    if teacher is None:
        raise SystemExit(f"--drafts-only distils from {WEIGHTS_DIR / 'teacher.npz'}, which is missing")
    train, val = read_corpus("train.txt"), windows(read_corpus("val.txt"))
    seed, work = args.seed + 1, args.work_dir  # the seeds of a full run's drafts
    draft, d_state = train_phase("draft", DRAFT, DRAFT_STEPS, math.inf, train, val, seed, work, teacher)
    draft = exported(draft, WEIGHTS_DIR / "draft.npz")
    hard, h_state = train_phase("draft_hard", DRAFT, d_state["step"], math.inf, train, val, seed, work)
    hard = exported(hard, WEIGHTS_DIR / "draft_hard.npz")
    print("evaluating on all validation windows...", flush=True)
    print_draft_rows("draft", "distilled (shipped)", d_state, evaluate(draft, val, teacher), teacher)
    print_draft_rows("draft_hard", "hard labels only", h_state, evaluate(hard, val, teacher), teacher)


def train_dense_target_only(args) -> None:
    """The dense target alone (see the module docstring): train, export and print its rows."""
    train, val = read_corpus("train.txt"), windows(read_corpus("val.txt"))
    dense, state = train_phase("dense", DENSE, TEACHER_STEPS, math.inf, train, val, args.seed, args.work_dir)
    dense = exported(dense, WEIGHTS_DIR / "dense.npz")
    for p in dense.parameters():
        p.requires_grad_(False)
    print("evaluating on all validation windows...", flush=True)
    m = evaluate(dense, val)
    print(
        f"| dense | {state['elapsed'] / 60:.1f} | {state['step']:,} | {state['tokens']:,} | "
        f"{state['log'][-1]['train_ce']:.3f} | {m['loss']:.3f} | {m['bpc']:.3f} |",
        flush=True,
    )
    for name, other in (("draft", shipped_frozen("draft")), ("teacher", shipped_frozen("teacher"))):
        if other is not None:
            agreement = evaluate(other, val, dense)["agreement"]
            print(f"greedy agreement of the shipped {name} with the dense target: {agreement:.2%}", flush=True)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Train the shipped teacher and draft (see the module docstring).")
    parser.add_argument(
        "--minutes",
        type=float,
        default=33.0,
        help=f"time cap: {TEACHER_SHARE * 100:.0f}%% for the teacher, {DRAFT_SHARE * 100:.0f}%% for each draft",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the corpus split, the init and the batches")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--work-dir", type=Path, default=REPO / "build" / "train", help="checkpoints")
    parser.add_argument(
        "--hard-draft-only",
        action="store_true",
        help="retrain only the hard-label draft, on the committed corpus, with no teacher and no time cap",
    )
    parser.add_argument(
        "--drafts-only",
        action="store_true",
        help="retrain both drafts from the shipped teacher.npz, on the committed corpus, with no time cap",
    )
    parser.add_argument(
        "--dense-target-only",
        action="store_true",
        help="train only the dense target (dense.npz), on the committed corpus, with no time cap",
    )
    parser.add_argument(
        "--ngram-only",
        action="store_true",
        help="distil only the n-gram draft (ngram.npz) from the shipped teacher, with NumPy (tools/ngram_table.py)",
    )
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    if args.ngram_only:
        import ngram_table

        ngram_table.main()
        return
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    args.work_dir.mkdir(parents=True, exist_ok=True)
    for flag, phases in (
        (args.hard_draft_only, train_hard_draft_only),
        (args.drafts_only, train_drafts_only),
        (args.dense_target_only, train_dense_target_only),
    ):
        if flag:
            phases(args)
            return

    corpus = build_corpus.build(seed=args.seed)
    print("corpus:", " ".join(f"{k}={v}" for k, v in corpus.items()), flush=True)

    train, val_tokens = read_corpus("train.txt"), read_corpus("val.txt")
    val = windows(val_tokens)

    budget = args.minutes * 60
    teacher, t_state = train_phase(
        "teacher", TEACHER, TEACHER_STEPS, TEACHER_SHARE * budget, train, val, args.seed, args.work_dir
    )
    teacher = exported(teacher, WEIGHTS_DIR / "teacher.npz")
    for p in teacher.parameters():
        p.requires_grad_(False)
    draft, d_state = train_phase(
        "draft", DRAFT, DRAFT_STEPS, DRAFT_SHARE * budget, train, val, args.seed + 1, args.work_dir, teacher
    )
    draft = exported(draft, WEIGHTS_DIR / "draft.npz")
    # Same init, same batches, as many steps as the distilled draft took: only the loss differs.
    hard, h_state = train_phase(
        "draft_hard", DRAFT, d_state["step"], DRAFT_SHARE * budget, train, val, args.seed + 1, args.work_dir
    )
    hard = exported(hard, WEIGHTS_DIR / "draft_hard.npz")

    print("evaluating on all validation windows...", flush=True)
    results = {
        "teacher": evaluate(teacher, val),
        "draft": evaluate(draft, val, teacher),
        "draft_hard": evaluate(hard, val, teacher),
        "bigram_bpc": bigram_bpc(train, val_tokens),
        "windows": len(val),
    }
    usage = expert_usage(teacher, val[:EVAL_WINDOWS])
    times = {"teacher": t_state, "draft": d_state, "draft_hard": h_state}
    text = report(args, results, corpus, times, usage)
    (build_corpus.DATA_DIR / "TRAINING.md").write_text(text, encoding="utf-8")
    print(text)


if __name__ == "__main__":
    main()
