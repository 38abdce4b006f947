"""`kata`: grade the katas, see hints, reset a kata, run its suite raw, play with the model.

A thin shell over grader.runner, grader.report and grader.registry: all the
printing happens here.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import click

from grader import report
from grader import target as _target
from grader.registry import Kata, load_registry
from grader.runner import Limits, grade
from grader.stubs import stub_for


def state_dir() -> Path:
    """Where `kata` keeps the last grade, the hints shown and reset backups."""
    return Path(os.environ.get("KATA_STATE_DIR", _target.ROOT / ".kata"))


def _read_state(name: str) -> dict:
    path = state_dir() / name
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def _write_state(name: str, data: dict) -> None:
    path = state_dir() / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1))


def _pick_katas(names: tuple[str, ...]) -> list[Kata]:
    katas = load_registry()
    if not names:
        return list(katas)
    known = {k.name: k for k in katas}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise click.UsageError(f"no kata named {', '.join(unknown)}; the katas are: {', '.join(known)}")
    return [known[n] for n in names]


def _check_target(target: str) -> None:
    try:
        _target.resolve(target)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--target") from None


def _kata(name: str) -> Kata:
    return _pick_katas((name,))[0]


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def main():
    """LLM speed katas: learn by doing why a language model types fast and runs cheap.

    Edit the files in katas/, then run `kata grade`. `kata list` shows where
    you are; `kata hint KATA` nudges you when a task does not pass.
    """


@main.command("grade")
@click.argument("katas", nargs=-1)
@click.option("--target", default="katas", show_default=True,
              help="What to grade: 'katas' (your code), 'reference' (the reference solutions) or a directory of kata modules.")
@click.option("--seed", default=0, show_default=True, type=click.IntRange(min=0),
              help="0 grades on the standard examples; another N draws a different, equally deterministic set.")
@click.option("--jobs", "-j", default=1, show_default=True, type=click.IntRange(min=1),
              help="Grade this many katas in parallel, each in its own process.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON on stdout instead of a table.")
@click.option("--gradescope", "gradescope_path", type=click.Path(dir_okay=False, writable=True),
              help="Also write Gradescope's results.json to this path.")
@click.option("--verbose", "-v", is_flag=True,
              help="Show every failing check: its message, Hypothesis's minimal example and the task's first hint.")
@click.option("--test-timeout", default=Limits.test_seconds, show_default=True, type=click.FloatRange(min=1),
              help="Seconds one check may take before it is graded 'timeout'.")
@click.option("--kata-timeout", default=Limits.kata_seconds, show_default=True, type=click.FloatRange(min=1),
              help="Seconds one kata's whole suite may take.")
@click.option("--memory-mb", default=Limits.memory_mb, show_default=True, type=click.IntRange(min=256),
              help="Memory (address space) a grading process may use, in MiB.")
def grade_cmd(katas, target, seed, jobs, as_json, gradescope_path, verbose, test_timeout, kata_timeout, memory_mb):
    """Grade KATAS (all of them by default) and print one row per task.

    Exit code 0 when every graded task passes, 1 when any does not, 2 for a
    usage error.
    """
    chosen = _pick_katas(katas)
    _check_target(target)
    limits = Limits(test_seconds=test_timeout, kata_seconds=kata_timeout, memory_mb=memory_mb)
    result = grade(chosen, target, seed=seed, jobs=jobs, limits=limits)
    if target == "katas":
        last = _read_state("last_grade.json")
        for k in result.katas:
            last[k.name] = {t.name: t.status for t in k.tasks}
        _write_state("last_grade.json", last)
    # Every judge and jail has ended by now: nothing of the learner's can touch what follows.
    if gradescope_path:
        _write_atomically(Path(gradescope_path), json.dumps(report.gradescope(result), indent=1))
    if as_json:
        click.echo(json.dumps(report.as_json(result), indent=1))
    else:
        click.echo(report.table(result))
        if verbose:
            text = report.details(result)
            if text:
                click.echo("\n" + text)
        else:
            summary = report.failing_summary(result)
            if summary:
                click.echo("\n" + summary + "\n\n(kata grade -v shows each failing check and a hint)")
    if result.interrupted:
        click.echo("\ninterrupted (Ctrl-C): the table shows what was graded so far", err=True)
        sys.exit(130)
    sys.exit(0 if result.passed else 1)


def _write_atomically(path: Path, text: str) -> None:
    """Write text to path through a temporary file and a rename, so a reader never sees half a file."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


@main.command("list")
def list_cmd():
    """List the katas and their tasks, with the status from your last grade."""
    last = _read_state("last_grade.json")
    for kata in load_registry():
        click.echo(f"{kata.order}. {kata.name}: {kata.title} ({kata.trade})")
        for task in kata.tasks:
            status = last.get(kata.name, {}).get(task.name, "not graded yet")
            points = f"{task.points} pt" + ("s" if task.points != 1 else " ")
            click.echo(f"   {task.name:<14} {points}  {status:<15} {task.title}")


@main.command("hint")
@click.argument("kata")
@click.argument("task", required=False)
@click.option("--all", "show_all", is_flag=True, help="Show every hint of the task at once.")
def hint_cmd(kata, task, show_all):
    """Show the next hint for TASK of KATA (by default the first task that does not pass yet).

    Each call shows one more hint; hints are questions, not answers.
    """
    k = _kata(kata)
    if task is None:
        last = _read_state("last_grade.json").get(k.name, {})
        pending = [t for t in k.tasks if last.get(t.name) != "pass"]
        t = pending[0] if pending else k.tasks[0]
    else:
        try:
            t = k.task(task)
        except ValueError as exc:
            raise click.UsageError(str(exc)) from None
    if show_all:
        for i, h in enumerate(t.hints, 1):
            click.echo(f"{k.name} / {t.name}, hint {i}/{len(t.hints)}: {h}")
        return
    shown = _read_state("hints.json")
    key = f"{k.name}/{t.name}"
    n = min(shown.get(key, 0), len(t.hints) - 1)
    click.echo(f"{k.name} / {t.name}, hint {n + 1}/{len(t.hints)}: {t.hints[n]}")
    shown[key] = n + 1
    _write_state("hints.json", shown)


@main.command("reset")
@click.argument("kata")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
def reset_cmd(kata, yes):
    """Restore KATA's stub in katas/ (or $KATA_WORKDIR), keeping a backup of your file under .kata/backups/."""
    k = _kata(kata)
    path = _target.workdir() / f"{k.name}.py"
    if not yes:
        click.confirm(f"Replace {path} with the untouched stub? (a backup is kept)", abort=True)
    if path.exists():
        backups = state_dir() / "backups"
        backups.mkdir(parents=True, exist_ok=True)
        backup = backups / f"{k.name}-{time.strftime('%Y%m%d-%H%M%S')}.py"
        n = 1
        while backup.exists():
            backup = backups / f"{k.name}-{time.strftime('%Y%m%d-%H%M%S')}-{n}.py"
            n += 1
        shutil.copy2(path, backup)
        click.echo(f"backed up your {path.name} to {backup}")
    path.write_text(stub_for(k.name), encoding="utf-8")
    click.echo(f"restored the stub of {k.name} at {path}")


@main.command("test", context_settings={"ignore_unknown_options": True})
@click.argument("kata")
@click.argument("pytest_args", nargs=-1, type=click.UNPROCESSED)
@click.option("--target", default="katas", show_default=True,
              help="What to test: 'katas', 'reference' or a directory of kata modules.")
def test_cmd(kata, pytest_args, target):
    """Run KATA's grading suite under plain pytest: kata test KATA -- PYTEST_ARGS.

    No table and no per-check time limit: pytest's own output, for
    debugging. Your module still runs in its jail.
    """
    k = _kata(kata)
    _check_target(target)
    if target not in ("katas", "reference"):
        target = str(_target.resolve(target))  # the caller's directory, not the suite's
    cmd = [sys.executable, "-m", "pytest", str(k.suite), f"--target={target}", "-c", os.devnull,
           "-p", "no:cacheprovider", *pytest_args]
    sys.exit(subprocess.call(cmd, cwd=str(_target.ROOT)))


@main.command("play")
@click.argument("prompt", default="def ")
@click.option("--model", "model_name", type=click.Choice(["teacher", "draft"]), default="teacher", show_default=True,
              help="Which shipped model writes.")
@click.option("--tokens", "-n", default=120, show_default=True, type=click.IntRange(min=0),
              help="How many characters to write.")
@click.option("--temperature", "-t", default=0.0, show_default=True, type=click.FloatRange(min=0),
              help="0 writes greedily; higher is more adventurous.")
@click.option("--seed", default=0, show_default=True, help="Seed for sampling at temperature > 0.")
@click.option("--no-cache", is_flag=True,
              help="Generate the naive way, re-reading the whole text for every character, to feel the difference.")
def play_cmd(prompt, model_name, tokens, temperature, seed, no_cache):
    """Let a shipped model continue PROMPT, and say how fast it wrote."""
    import numpy as np

    from reference.lm import CachedLM
    from reference.lm import generate as generate_cached
    from reference.model import Model
    from reference.sampling import generate_naive
    from reference.tokenizer import decode, encode

    try:
        model = Model.pretrained(model_name)
        ids = encode(prompt)
        room = model.config.max_seq_len - len(ids)
        if tokens > room:
            raise ValueError(f"the prompt leaves room for {room} new characters (max_seq_len "
                             f"{model.config.max_seq_len}); ask for at most that many with -n")
        rng = np.random.default_rng(seed)
        t0 = time.perf_counter()
        if no_cache:
            new = generate_naive(model, ids, tokens, temperature=temperature, rng=rng)
        else:
            new = generate_cached(CachedLM(model), ids, tokens, temperature=temperature, rng=rng)
        seconds = time.perf_counter() - t0
    except (ValueError, FileNotFoundError) as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(prompt + decode(new))
    how = "without a KV cache" if no_cache else "with a KV cache"
    click.echo(f"\n[{len(new)} characters in {seconds:.2f} s {how}: "
               f"{len(new) / max(seconds, 1e-9):.0f} chars/s]", err=True)


@main.command("bench")
@click.argument("kata")
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def bench_cmd(kata, args):
    """Run KATA's benchmark script (benchmarks/bench_KATA.py) and print its table."""
    k = _kata(kata)
    script = _target.ROOT / "benchmarks" / f"bench_{k.name}.py"
    if not script.is_file():
        raise click.ClickException(f"no benchmark script at {script}")
    sys.exit(subprocess.call([sys.executable, str(script), *args], cwd=str(_target.ROOT)))


if __name__ == "__main__":
    main()
