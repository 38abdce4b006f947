"""How a jail process is confined, decided once per judge.

- "root": the judge runs as root (CI, Gradescope's containers). The jail gets
  new mount, network, IPC and UTS namespaces and a root of its own: a tmpfs
  holding read-only binds of the system, the Python installation and the
  jail's own directory, and nothing else (not the checkout, not the reference
  solutions, not /proc). It then drops to a uid/gid of its own that no other
  process has, so it can signal nobody and write nothing it was not given.
- "plain": anyone else. The jail still runs in its own session with hard
  resource limits, a scrubbed environment and a private copy of the
  submission, but it shares the user's files and processes: a learner who
  wants to can read the solutions and attack their own grade (which only
  cheats themselves). Grade others' work as root.

KATA_JAIL=plain forces the plain mode (for debugging the jail itself).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import sys

CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC, CLONE_NEWNET = 0x00020000, 0x04000000, 0x08000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 1, 2, 32, 4096, 16384, 1 << 18
PR_SET_PDEATHSIG, PR_SET_NO_NEW_PRIVS = 1, 38
UID_BASE = 100_000  # jail uids are UID_BASE + 8 * judge pid + serial: unique among live processes

_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)


def mode() -> str:
    if os.environ.get("KATA_JAIL") == "plain" or os.geteuid() != 0:
        return "plain"
    return "root"


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _mount(source, target, fstype, flags, data=None) -> None:
    enc = lambda s: None if s is None else s.encode()  # noqa: E731
    _check(_libc.mount(enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)), f"mount {target}")


def _last_words(parent: int) -> None:
    """Die with the judge, and never gain privileges (no setuid binaries)."""
    _check(_libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "prctl(PDEATHSIG)")
    _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(NO_NEW_PRIVS)")
    if os.getppid() != parent:  # the judge died before we could ask to die with it
        os._exit(1)


def readable_paths() -> list[str]:
    """What a root-mode jail sees besides its own directory: the system and
    the Python installation (read-only)."""
    import sysconfig

    paths = ["/usr", "/lib", "/lib64", "/lib32", "/bin", "/sbin", "/etc"]
    paths += [sys.base_prefix, sys.prefix, os.path.dirname(os.path.realpath(sys.executable))]
    paths += [sysconfig.get_path(k) for k in ("stdlib", "platstdlib", "purelib", "platlib")]
    out = []
    for p in paths:
        if p and os.path.exists(p) and not any(p == q or p.startswith(q.rstrip("/") + "/") for q in out):
            out = [q for q in out if not q.startswith(p.rstrip("/") + "/")] + [p]
    return out


def preexec(jaildir: str, workdir: str, uid: int, masks: list[str]):
    """A preexec_fn for the jail: confine it as mode() says. Runs in the child
    after fork, before exec."""
    parent = os.getpid()
    if mode() == "plain":
        return lambda: _last_words(parent)
    binds = readable_paths()
    newroot = os.path.join(jaildir, ".root")
    os.mkdir(newroot, 0o755)

    def confine():
        _check(_libc.unshare(CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS), "unshare")
        _mount(None, "/", None, MS_REC | MS_PRIVATE)
        _mount("tmpfs", newroot, "tmpfs", MS_NOSUID, "mode=0755,size=4m")
        for src in binds:
            dst = newroot + src
            if os.path.islink(src):
                os.makedirs(os.path.dirname(dst), 0o755, exist_ok=True)
                os.symlink(os.readlink(src), dst)
                continue
            os.makedirs(dst, 0o755, exist_ok=True)
            _mount(src, dst, None, MS_BIND | MS_REC)
            _mount(None, dst, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID)
        for mask in masks:  # the solutions and tests, where they sit inside a bound path
            if os.path.isdir(newroot + mask):
                _mount("tmpfs", newroot + mask, "tmpfs", MS_RDONLY | MS_NOSUID, "size=4k")
        for dev in ("null", "zero", "urandom", "random"):
            os.makedirs(newroot + "/dev", 0o755, exist_ok=True)
            open(newroot + "/dev/" + dev, "w").close()
            _mount("/dev/" + dev, newroot + "/dev/" + dev, None, MS_BIND)
        os.makedirs(newroot + jaildir, 0o755, exist_ok=True)
        _mount(jaildir, newroot + jaildir, None, MS_BIND)
        _mount(None, newroot + jaildir, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID)
        _mount(workdir, newroot + workdir, None, MS_BIND)
        os.chroot(newroot)
        os.chdir(workdir)
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
        _last_words(parent)

    return confine
