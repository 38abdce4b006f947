"""How a jail process is confined, decided once per judge.

Every mode: the jail runs in a session of its own with hard resource limits
(memory, CPU, open files, each file's size, no child process or thread where
the limit on processes binds its uid), a scrubbed environment (HOME and
TMPDIR its working folder) and a private copy of the submission; it dies
with its judge. All its files together are capped at WORK_MB (and
grader.jailer.jail_space.WORK_ENTRIES files and folders): by a tmpfs in the
root mode, elsewhere by the judge, which adds up its places while it waits
for it and stops a jail past the cap (grader/jailer/jail_space.py says
which places). The jail zygote that forks jails answers none of its own
jails, nor anything they started, and forks only the mode it started in
(grader/jailer/zygote.py).

- "bwrap": bubblewrap is installed and the judge is not root. The jail runs
  under `bwrap` with every namespace of its own (user, PID with a private
  /proc, network, IPC, UTS, mount), the file system view() says (read-only
  binds of the system and the Python installation, in which every folder of
  installed packages and every copy of this project is empty, but for numpy)
  and its own directory (its working folder writable), nothing else, and dies
  with the judge.
- "root": the judge runs as root (CI, Gradescope's containers). The jail gets
  new mount, network, IPC and UTS namespaces and a root of its own: a tmpfs
  holding view()'s mounts and the jail's own directory, and nothing else (not
  the checkout wherever it lies, not the reference solutions, no installed
  grader or suite, not /proc), its working folder a tmpfs of WORK_MB. It then
  drops to a uid/gid of its own that no other process has, so it can signal
  nobody and write nothing it was not given.
- "uid": root where namespaces cannot be made (a container without
  CAP_SYS_ADMIN). The jail drops to its own uid as in "root" mode, so it can
  neither write the checkout nor signal another process, nor enter another
  jail's folder (each is its uid's, 0700), nor reach the zygote's socket (in a
  folder of root's alone), but it shares the file system: it can read
  world-readable files, the reference solutions included, and write the
  folders every user may (what it owns at the top of /tmp, /var/tmp and
  /dev/shm is counted against its cap and removed with it).
- "plain": anyone else (a user without bubblewrap). The jail is the user: it
  shares the user's files and processes, and a learner who wants to can read
  the solutions and attack their own grade (which only cheats themselves).
  Grade others' work as root (`kata grade-all` refuses this mode unless told
  --unisolated).

KATA_JAIL=plain, uid, bwrap or root forces a mode (to test or debug the jail itself).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import shutil
import signal
import subprocess
import sys

CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC, CLONE_NEWNET = 0x00020000, 0x04000000, 0x08000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 1, 2, 4, 32, 4096, 16384, 1 << 18
PR_SET_PDEATHSIG, PR_SET_CHILD_SUBREAPER, PR_SET_NO_NEW_PRIVS = 1, 36, 38
UID_BASE = 100_000  # a judge's jails take uids from UID_BASE + UIDS_PER_JUDGE * its pid on
UIDS_PER_JUDGE = 8  # (a judge holds two jails at most: the learner's and the baseline's)
WORK_MB = 64  # all a jail's files together (root mode: the size of its working folder's tmpfs)

_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)


MODES = ("root", "uid", "bwrap", "plain")
FORKED_MODES = ("root", "uid", "plain")  # the modes whose confinement a child forked by the zygote makes itself
_BWRAP_WORKS: bool | None = None
_NAMESPACES_WORK: bool | None = None


def _namespaces_work() -> bool:
    """Whether this (root) process may make mount and network namespaces (checked once, in a child)."""
    global _NAMESPACES_WORK
    if _NAMESPACES_WORK is None:
        pid = os.fork()
        if pid == 0:
            os._exit(0 if _libc.unshare(CLONE_NEWNS | CLONE_NEWNET) == 0 else 1)
        _NAMESPACES_WORK = os.waitpid(pid, 0)[1] == 0
    return _NAMESPACES_WORK


def _bwrap_works() -> bool:
    """Whether bwrap is installed and can make namespaces here (checked once)."""
    global _BWRAP_WORKS
    if _BWRAP_WORKS is None:
        exe = shutil.which("bwrap")
        try:
            _BWRAP_WORKS = (
                exe is not None
                and subprocess.run(
                    [exe, "--unshare-all", "--ro-bind", "/", "/", "--", "/bin/true"],
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    timeout=10,
                ).returncode
                == 0
            )
        except (OSError, subprocess.TimeoutExpired):
            _BWRAP_WORKS = False
    return _BWRAP_WORKS


def mode() -> str:
    """root, bwrap or plain: see the module's docstring."""
    forced = os.environ.get("KATA_JAIL")
    if forced:
        if forced not in MODES:
            raise ValueError(f"KATA_JAIL must be one of {', '.join(MODES)}, got {forced!r}")
        return forced
    if os.geteuid() == 0:
        return "root" if _namespaces_work() else "uid"
    return "bwrap" if _bwrap_works() else "plain"


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _mount(source, target, fstype, flags, data=None) -> None:
    enc = lambda s: None if s is None else s.encode()  # noqa: E731
    _check(_libc.mount(enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)), f"mount {target}")


def die_with_parent(parent: int | None = None) -> None:
    """Have the kernel kill this process when its parent (pid `parent`, by
    default the current one) dies: a judge dies with the `kata` that started
    it, even one killed with SIGKILL, and a jail with its judge."""
    parent = os.getppid() if parent is None else parent
    _check(_libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "prctl(PDEATHSIG)")
    if os.getppid() != parent:  # it died before we could ask
        os._exit(1)


def adopt_orphans() -> None:
    """Make this process the parent of every orphan among its descendants (a child subreaper): what a
    jail's child leaves running when it exits, daemonised or not, stays in the zygote's tree, where the
    zygote knows it for one of its own (grader.wire.prefork.descends_from) and reaps it."""
    _check(_libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0), "prctl(CHILD_SUBREAPER)")


def _last_words(parent: int) -> None:
    """Die with the judge, and never gain privileges (no setuid binaries)."""
    die_with_parent(parent)
    _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(NO_NEW_PRIVS)")


def readable_paths() -> list[str]:
    """The folders a confined jail reads besides its own directory: the system
    and the Python installation, each bound read-only (view() hides the
    installed packages inside them)."""
    import sysconfig

    paths = ["/usr", "/lib", "/lib64", "/lib32", "/bin", "/sbin", "/etc"]
    paths += [sys.base_prefix, sys.prefix, os.path.dirname(os.path.realpath(sys.executable))]
    paths += [sysconfig.get_path(k) for k in ("stdlib", "platstdlib", "purelib", "platlib")]
    out = []
    for p in paths:
        if p and os.path.exists(p) and not any(_within(p, q) for q in out):
            out = [q for q in out if not _within(q, p)] + [p]
    return out


JAIL_PACKAGES = ("numpy",)  # the installed packages a jail may import (and the jail's runtime copy of the model)
PROJECT_PACKAGES = ("grader", "reference")  # this project's packages: a jail sees them only in its runtime copy


def view(search: list[str] | None = None) -> list[tuple[str, str]]:
    """What a confined jail sees of the file system besides its own folders, as
    the mounts that make it, in order: ("ro", path), a read-only bind of the
    system or the Python installation (readable_paths()); ("empty", path), an
    empty read-only folder over each place inside those where Python finds
    installed packages (site-packages, dist-packages) and over each copy of
    this project (project_folders(search)), so that no installed grader,
    suite, baseline, test or solution is there to read, wherever it was put;
    then ("ro", path) again for each package of JAIL_PACKAGES (and the
    libraries its wheel vendors beside it) and each folder of the Python the
    jail runs on that one of those empty folders covers. The jail's own
    folders and its runtime copy are bound after these."""
    binds = readable_paths()
    real_binds = [os.path.realpath(b) for b in binds if not os.path.islink(b)]
    covered = _package_folders() + project_folders(search)
    hidden = sorted({d for d in covered if any(_within(d, b) for b in real_binds)})
    hidden = [d for d in hidden if not any(q != d and _within(d, q) for q in hidden)]
    needed = _jail_packages() + _python_folders()
    allowed = [p for p in needed if any(_within(p, d) and p != d for d in hidden)]
    return [("ro", b) for b in binds] + [("empty", d) for d in hidden] + [("ro", p) for p in allowed]


def project_folders(search: list[str] | None = None) -> list[str]:
    """Where copies of this project lie (real paths): the folder that holds each
    of PROJECT_PACKAGES as this process imports it (the checkout, or the
    site-packages of an install) and every folder of search (default
    sys.path) that holds one of them; each whole, for what lies beside the
    packages (the tests, .git, a copied checkout) is the project's too, except
    a folder of the Python the jail runs on itself (its standard library),
    where only the packages are."""
    import importlib.util

    holders = set()
    for name in PROJECT_PACKAGES:
        spec = importlib.util.find_spec(name)
        for folder in (spec.submodule_search_locations or []) if spec else []:
            holders.add(os.path.dirname(os.path.realpath(folder)))
    for entry in sys.path if search is None else search:
        real = os.path.realpath(entry or os.curdir)
        if any(os.path.isfile(os.path.join(real, name, "__init__.py")) for name in PROJECT_PACKAGES):
            holders.add(real)
    own = _python_folders()
    out = []
    for holder in sorted(holders):
        if holder in own:
            out += [os.path.join(holder, n) for n in PROJECT_PACKAGES if os.path.isdir(os.path.join(holder, n))]
        else:
            out.append(holder)
    return out


def _python_folders() -> list[str]:
    """The folders of the Python a jail runs on: its executable's and its standard library's (real paths)."""
    import sysconfig

    found = [os.path.dirname(os.path.realpath(sys.executable))]
    found += [os.path.realpath(sysconfig.get_path(k)) for k in ("stdlib", "platstdlib")]
    return sorted({p for p in found if os.path.isdir(p)})


def _within(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def _package_folders() -> list[str]:
    """Every folder this Python, its base installation or the system's Pythons
    find installed packages in (real paths, sorted)."""
    import glob
    import site

    found = {p for p in sys.path if os.path.basename(p.rstrip("/")) in ("site-packages", "dist-packages")}
    found |= set(site.getsitepackages()) | {site.getusersitepackages()}
    for base in {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix, "/usr", "/usr/local"}:
        found |= set(glob.glob(os.path.join(base, "lib*", "python3*", "*-packages")))
        found |= set(glob.glob(os.path.join(base, "lib", "python3", "dist-packages")))
    return sorted({os.path.realpath(p) for p in found if p and os.path.isdir(p)})


def _jail_packages() -> list[str]:
    """The folders of JAIL_PACKAGES, and beside each the NAME.libs folder of shared
    libraries its wheel may vendor (real paths)."""
    import importlib.util

    out = []
    for name in JAIL_PACKAGES:
        spec = importlib.util.find_spec(name)
        for folder in (spec.submodule_search_locations or []) if spec else []:
            folder = os.path.realpath(folder)
            out += [p for p in (folder, folder + ".libs") if os.path.isdir(p)]
    return out


def launch(argv: list[str], jaildir: str, workdir: str, uid: int, mounts: list, extra: tuple[str, ...] = ()):
    """(argv, preexec_fn) that start the jail command argv confined as mode() says
    (mounts, extra: as preexec's)."""
    chosen = mode()
    if chosen == "bwrap":
        return _bwrap_argv(argv, jaildir, workdir, mounts, extra), None
    return argv, preexec(chosen, jaildir, workdir, uid, mounts, extra)


def _bwrap_argv(argv: list[str], jaildir: str, workdir: str, mounts: list, extra=()) -> list[str]:
    out = [
        shutil.which("bwrap") or "bwrap",
        "--die-with-parent",
        "--new-session",
        "--unshare-all",
        "--proc",
        "/proc",
        "--dev",
        "/dev",
    ]
    for kind, src in mounts:
        if kind == "empty":
            out += ["--tmpfs", src]
        elif os.path.islink(src):
            out += ["--symlink", os.readlink(src), src]
        else:
            out += ["--ro-bind", src, src]
    out += [arg for kind, src in mounts if kind == "empty" for arg in ("--remount-ro", src)]  # once filled
    out += ["--ro-bind", jaildir, jaildir]
    for folder in extra:
        out += ["--ro-bind", folder, folder]
    out += ["--bind", workdir, workdir, "--chdir", workdir, "--"]
    return out + argv


def preexec(
    chosen: str,
    jaildir: str,
    workdir: str,
    uid: int,
    mounts: list,
    extra: tuple[str, ...] = (),
):
    """A preexec_fn for the jail in the root, uid or plain mode. Runs in the
    child after fork, before exec (or, forked by the zygote, before the jail
    runs). mounts: the judge's view() (the root mode's file system; the
    zygote, run without site, would not see a virtual environment in its
    own). extra: more folders the jail reads (in the root mode they are
    bound read-only; elsewhere it reads them anyway)."""
    parent = os.getpid()
    if chosen == "plain":
        return lambda: _last_words(parent)
    if chosen == "uid":
        return lambda: _drop_to(uid, parent)
    newroot = os.path.join(jaildir, ".root")
    os.mkdir(newroot, 0o755)

    def confine():
        _check(_libc.unshare(CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS), "unshare")
        _mount(None, "/", None, MS_REC | MS_PRIVATE)
        _mount("tmpfs", newroot, "tmpfs", MS_NOSUID, "mode=0755,size=4m")
        _bind_system(newroot, mounts)
        for folder in (jaildir, *extra):
            _bind_read_only(folder, newroot + folder)
        # Its working folder: a tmpfs of its own, so that all it writes together is capped, not each file alone.
        _mount(
            "tmpfs", newroot + workdir, "tmpfs", MS_NOSUID | MS_NODEV, f"size={WORK_MB}m,mode=0700,uid={uid},gid={uid}"
        )
        os.chroot(newroot)
        os.chdir(workdir)
        _drop_to(uid, parent)

    return confine


def _drop_to(uid: int, parent: int) -> None:
    """Become uid (its own group too, and no other), then _last_words."""
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)
    _last_words(parent)


def _bind_read_only(src: str, dst: str, *, recursive: bool = False) -> None:
    """Bind src at dst (made if missing) read-only, without setuid."""
    os.makedirs(dst, 0o755, exist_ok=True)
    _mount(src, dst, None, MS_BIND | (MS_REC if recursive else 0))
    _mount(None, dst, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID)


def _bind_system(newroot: str, mounts: list) -> None:
    """Into the jail's new root: view()'s mounts (the binds read-only, a symlink copied as one, each
    empty folder a tmpfs that turns read-only once the folders allowed inside it are bound), and /dev's
    null, zero, urandom and random."""
    empty = []
    for kind, src in mounts:
        dst = newroot + src
        if kind == "empty":
            os.makedirs(dst, 0o755, exist_ok=True)
            _mount("tmpfs", dst, "tmpfs", MS_NOSUID, "mode=0755,size=64k")
            empty.append(dst)
        elif os.path.islink(src):
            os.makedirs(os.path.dirname(dst), 0o755, exist_ok=True)
            os.symlink(os.readlink(src), dst)
        else:
            _bind_read_only(src, dst, recursive=True)
    for dst in empty:
        _mount(None, dst, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID)
    for dev in ("null", "zero", "urandom", "random"):
        os.makedirs(newroot + "/dev", 0o755, exist_ok=True)
        open(newroot + "/dev/" + dev, "w").close()
        _mount("/dev/" + dev, newroot + "/dev/" + dev, None, MS_BIND)
