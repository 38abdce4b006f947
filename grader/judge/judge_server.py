"""The judge server: one process per `kata` command that forks the judges.

Every judge is a Python process that imports pytest (with the plugins
pytest.main loads as it reads its options), Hypothesis and NumPy before it
grades anything. The server imports them once, freezes them out of the
garbage collector's reach (gc.freeze: a judge's collections never walk them,
and their pages stay shared with the server), and forks a judge for each
grading, so a judge starts with them already loaded. So is the judge's own
module (grader.judge.judge, and the grader and model modules it imports),
its bytecode kept in the judges' private folder, and so are the answers to
what each judge asks before its first jail (_ask_what_every_judge_asks).
No suite and no kata module is ever loaded in the server. A forked judge
sets the environment, folder and descriptors it is given, and then runs
`grader.judge.judge.main`, exactly what `python -m grader.judge.judge` runs.

It is a grader.wire.prefork server on one socketpair with the runner; a
request is {"argv": [...], "env": {...}, "cwd": "..."}, with two descriptors
attached: the judge's output log and the write end of its results pipe
("{results_fd}" in argv stands for the latter's number in the judge).

The server lives in a session of its own (Ctrl-C at the terminal is for
`kata`, which stops the judges itself). When its socket closes, because
`kata` ended or was killed, it kills every judge still running and exits;
each judge also dies with the server, by its parent-death signal.
"""

from __future__ import annotations

import gc
import os
import socket
import sys
import traceback

from grader.judge.bytecode import PYCACHE_VAR, use_pycache  # noqa: F401 (PYCACHE_VAR: the runner sets it)
from grader.wire.prefork import Server

PRELOAD = (
    "numpy",
    "numpy.random",  # numpy loads these on first use; Hypothesis seeds numpy.random before every example
    "numpy.testing",
    "pytest",
    "_pytest.assertion.rewrite",
    "hypothesis",
    "hypothesis.extra.numpy",
    "_hypothesis_pytestplugin",
)
# The judge's module and what it imports (the jail's client, the suites' helpers, the model): none of them reads
# the environment or the folder as it loads, and what is drawn at import (the entropy of timed inputs) each judge
# draws again.
JUDGE = "grader.judge.judge"
RESULTS_FD = "{results_fd}"  # in a request's argv: the number of the results pipe in the judge


def _judge(request: dict, fds: list[int]):
    """What a forked child runs to become the judge request describes (checked here, in the server)."""
    argv, env, cwd = request["argv"], request["env"], request["cwd"]
    if not (isinstance(argv, list) and isinstance(env, dict) and isinstance(cwd, str)):
        raise ValueError("a judge request is {argv: list, env: dict, cwd: str}")
    log, results = fds

    def run() -> None:
        code = 1
        try:
            os.setsid()
            devnull = os.open(os.devnull, os.O_RDONLY)
            os.dup2(devnull, 0)
            os.close(devnull)
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(log, 1)
            os.dup2(log, 2)
            os.close(log)
            os.chdir(cwd)
            os.environ.clear()
            os.environ.update(env)
            args = [str(results) if a == RESULTS_FD else a for a in argv]
            sys.argv = ["grader.judge.judge", *args]
            use_pycache()
            from grader.judge import judge  # loaded already, by the server

            code = judge.main(args) or 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        except BaseException:
            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)

    return run


def _ask_what_every_judge_asks() -> None:
    """What each judge asks before its first jail, worked out once here before the judges are forked: whether
    this machine makes namespaces or runs bwrap (confine.mode: a forked child, or a bwrap run), the file system
    a confined jail sees and a jail's sys.path for this sys.path (jail_client.view, zygote.runtime_paths). A
    forked judge finds them done: 10-14 ms of CPU a judge, in root mode."""
    from grader.jail import confine
    from grader.jailer import jail_client, zygote

    try:
        confine.mode()
        jail_client.view()
        zygote.runtime_paths()
    except Exception:  # KATA_JAIL naming no mode, say: each judge asks again and reports it as it always did
        pass


def main() -> None:
    fd = int(sys.argv[1])
    for name in PRELOAD:
        __import__(name)
    from _pytest.config import default_plugins

    for name in default_plugins:  # what pytest.main imports as it reads its options (junitxml brings ElementTree)
        __import__(f"_pytest.{name}")
    use_pycache()  # the grader's own bytecode goes where the judges keep theirs, never beside its sources
    __import__(JUDGE)
    _ask_what_every_judge_asks()
    # What the server loaded stays: the judges' collections never scan it, and their pages stay shared.
    gc.freeze()
    Server(_judge, fds_per_request=2).serve(connections=[socket.socket(fileno=fd)])
    os._exit(0)


if __name__ == "__main__":
    main()
