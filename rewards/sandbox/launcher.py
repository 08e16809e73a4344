"""Confine one untrusted program, then exec it: `python -I -S launcher.py '<json limits>' -- <command> ...`
(stdlib only, single-threaded). Each layer (namespaces, rlimits, Landlock, no capabilities as root: README,
The code sandbox) applies where the OS allows it, so a machine without one still gets the others. The launcher
stays outside the PID namespace as the program's parent: a program that kills its parent kills only the
launcher, and the executor then kills the whole process group."""

from __future__ import annotations

import ctypes
import ctypes.util
import json
import os
import resource
import signal
import struct
import sys
from ctypes import c_int, c_size_t, c_uint32

CLONE_NEWNS, CLONE_NEWIPC = 0x00020000, 0x08000000
CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x10000000, 0x20000000, 0x40000000
MS_NOSUID, MS_NODEV, MS_BIND, MS_REC, MS_PRIVATE = 2, 4, 4096, 16384, 1 << 18
PR_SET_PDEATHSIG, PR_CAPBSET_DROP, PR_SET_SECUREBITS, PR_SET_NO_NEW_PRIVS = 1, 24, 28, 38
SECUREBITS_NO_ROOT = 0xEF  # noroot, no_setuid_fixup, keep_caps_locked, no_cap_ambient_raise, all locked
SYS_LANDLOCK_CREATE_RULESET, SYS_LANDLOCK_ADD_RULE, SYS_LANDLOCK_RESTRICT_SELF = 444, 445, 446
LANDLOCK_RULE_PATH_BENEATH = 1
HIDDEN = ("/tmp", "/run", "/dev/shm", "/var/tmp")  # emptied in a private mount namespace

# Landlock filesystem rights (and the ABI that introduced them).
FS_EXECUTE, FS_WRITE_FILE, FS_READ_FILE, FS_READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
FS_ABI1 = (1 << 13) - 1  # execute .. make_sym
FS_REFER, FS_TRUNCATE, FS_IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15
FILE_RIGHTS = FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | FS_TRUNCATE | FS_IOCTL_DEV
READ_RIGHTS = FS_EXECUTE | FS_READ_FILE | FS_READ_DIR
NET_BIND_TCP, NET_CONNECT_TCP, SCOPE_ABSTRACT_UNIX_SOCKET, SCOPE_SIGNAL = 1, 2, 1, 2  # net rights, scopes

libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)


def enter_namespaces() -> list[str]:
    """New network + PID namespaces where allowed; returns the ones entered."""
    if os.geteuid() == 0:
        if libc.unshare(CLONE_NEWNET | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWNS) == 0:
            return ["net", "pid", "ipc", "mount"]
        if libc.unshare(CLONE_NEWNET | CLONE_NEWPID) == 0:
            return ["net", "pid"]
        return ["net"] if libc.unshare(CLONE_NEWNET) == 0 else []
    uid, gid = os.geteuid(), os.getegid()
    if libc.unshare(CLONE_NEWUSER | CLONE_NEWNET | CLONE_NEWPID) != 0:
        return []
    try:  # map ourselves to ourselves so file ownership still makes sense inside
        maps = {"setgroups": "deny", "uid_map": f"{uid} {uid} 1", "gid_map": f"{gid} {gid} 1"}
        for name, text in maps.items():
            with open(f"/proc/self/{name}", "w") as f:
                f.write(text)
    except OSError:
        pass
    return ["user", "net", "pid"]


def _mount(source, target: str, fstype, flags: int, data) -> bool:
    enc = lambda v: v.encode() if isinstance(v, str) else v
    return libc.mount(enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)) == 0


def private_filesystem(limits: dict) -> bool:
    """In the new mount namespace: empty /tmp, /run, /dev/shm, /var/tmp (no host sockets or other runs'
    files), with the run's own directory and any interpreter directory under them bound back in
    place, and its working directory a size-capped tmpfs."""
    box, workdir = limits["box"], limits["workdir"]
    if not _mount(None, "/", None, MS_REC | MS_PRIVATE, None):
        return False
    paths = sorted({box, *limits.get("read_paths", [])}, key=len)
    under = [p for p in paths if any(p == h or p.startswith(h + "/") for h in HIDDEN) and os.path.isdir(p)]
    keep = []
    for path in under:  # a path inside one already kept comes back with it
        if not any(path.startswith(k + "/") for k, _ in keep):
            keep.append((path, os.open(path, os.O_PATH | os.O_DIRECTORY)))
    for path in HIDDEN:
        if os.path.isdir(path) and not os.path.islink(path):
            _mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,nr_inodes=256,mode=1777")
    ok = True
    for path, fd in keep:
        os.makedirs(path, exist_ok=True)
        ok &= _mount(f"/proc/self/fd/{fd}", path, None, MS_BIND | MS_REC, None)
        os.close(fd)
    size = f"size={int(limits.get('disk_mb') or 64)}m,nr_inodes=4096,mode=0700"
    return ok and _mount("tmpfs", workdir, "tmpfs", MS_NOSUID | MS_NODEV, size)


def set_limits(limits: dict) -> None:
    get = limits.get  # file size caps stdout too: it is a file
    rlimits = [(resource.RLIMIT_CPU, get("cpu_s")), (resource.RLIMIT_AS, get("memory_bytes"))]
    rlimits += [(resource.RLIMIT_FSIZE, get("file_bytes")), (resource.RLIMIT_NPROC, get("processes"))]
    rlimits += [(resource.RLIMIT_NOFILE, get("open_files")), (resource.RLIMIT_CORE, 0)]
    for which, value in rlimits:
        if value is not None:
            try:
                resource.setrlimit(which, (int(value), int(value)))
            except (ValueError, OSError):  # cannot lower below current use: keep what is there
                pass


def landlock(workdir: str, read_paths: list[str]) -> int:
    """Restrict this process (and what it execs) with Landlock; returns the ABI used (0: none)."""
    syscall = libc.syscall
    syscall.restype = ctypes.c_long
    abi = syscall(SYS_LANDLOCK_CREATE_RULESET, None, c_size_t(0), c_uint32(1))
    if abi < 1:
        return 0
    fs = FS_ABI1 | (FS_REFER if abi >= 2 else 0) | (FS_TRUNCATE if abi >= 3 else 0)
    fs |= FS_IOCTL_DEV if abi >= 5 else 0
    net = (NET_BIND_TCP | NET_CONNECT_TCP) if abi >= 4 else 0
    scoped = (SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL) if abi >= 6 else 0
    attr = ctypes.create_string_buffer(struct.pack("QQQ", fs, net, scoped))
    size = 24 if abi >= 6 else (16 if abi >= 4 else 8)
    ruleset = syscall(SYS_LANDLOCK_CREATE_RULESET, attr, c_size_t(size), c_uint32(0))
    if ruleset < 0:
        return 0

    def allow(path: str, rights: int) -> None:
        try:
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        except OSError:
            return
        try:
            if not os.path.isdir(path):
                rights &= FILE_RIGHTS
            rule = ctypes.create_string_buffer(struct.pack("=Qi", rights & fs, fd))
            syscall(
                SYS_LANDLOCK_ADD_RULE, c_int(ruleset), c_int(LANDLOCK_RULE_PATH_BENEATH), rule, c_uint32(0)
            )
        finally:
            os.close(fd)

    for path in read_paths:
        allow(path, READ_RIGHTS)
    allow("/dev/null", FS_READ_FILE | FS_WRITE_FILE | FS_TRUNCATE)
    allow(workdir, fs)
    libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    ok = syscall(SYS_LANDLOCK_RESTRICT_SELF, c_int(ruleset), c_uint32(0)) == 0
    os.close(ruleset)
    return abi if ok else 0


def drop_capabilities() -> None:
    """Root in, an ordinary process out: empty bounding set, no capabilities, locked securebits."""
    if os.geteuid() != 0:
        return
    libc.prctl(PR_SET_SECUREBITS, SECUREBITS_NO_ROOT, 0, 0, 0)
    for cap in range(64):  # every capability a 64-bit set holds (the kernel refuses the ones it lacks)
        libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)
    header = ctypes.create_string_buffer(struct.pack("Ii", 0x20080522, 0))  # _LINUX_CAPABILITY_VERSION_3
    data = ctypes.create_string_buffer(bytes(24))  # two {effective, permitted, inheritable} = 0
    if libc.capset(header, data) != 0:
        raise OSError(ctypes.get_errno(), "capset failed: refusing to run untrusted code as root")


def main(argv: list[str]) -> int:
    limits = json.loads(argv[1])
    command = argv[argv.index("--") + 1 :]
    full = limits.get("isolation", "full") == "full"
    layers = {"namespaces": enter_namespaces() if full else []}
    pid = os.fork()  # in a new PID namespace the child is its pid 1
    if pid == 0:
        try:
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)  # launcher gone -> program gone
            if limits.get("cgroup"):  # "0": this process; every process it starts stays in the cgroup
                with open(os.path.join(limits["cgroup"], "cgroup.procs"), "w") as f:
                    f.write("0")
                layers["pids_cgroup"] = True
            if "mount" in layers["namespaces"]:
                layers["private_filesystem"] = private_filesystem(limits)
            set_limits(limits)
            layers["landlock_abi"] = landlock(limits["workdir"], limits.get("read_paths", [])) if full else 0
            os.chdir(limits["workdir"])
            drop_capabilities()
            layers["capabilities_dropped"] = os.geteuid() == 0
            if limits.get("report_layers"):
                os.write(2, (json.dumps({"sandbox_layers": layers}) + "\n").encode())
            os.execve(command[0], command, limits.get("env", {}))
        except BaseException as err:  # noqa: BLE001 - report, never fall through into the launcher
            os.write(2, f"sandbox launcher: cannot start {command[:1]}: {err}\n".encode())
            os._exit(127)
    # The parent ignores the signals a program might send it and reports the program's status.
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(sig, signal.SIG_IGN)
    try:
        _, status = os.waitpid(pid, 0)  # retried on EINTR (PEP 475)
    except ChildProcessError:
        return 127
    return 128 + os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
