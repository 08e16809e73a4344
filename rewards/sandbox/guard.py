"""The guard prepended to every Python program the sandbox runs: an audit hook (which Python code cannot
remove) refusing new processes, signals, sockets, ctypes and writes outside the working directory. It
holds where the OS layers are missing, but as defence in depth, not the wall: an in-process guard can be
got around, which is why the launcher's OS limits come first wherever the kernel offers them."""

GUARD = r"""
def _sandbox_guard():
    import os, sys
    root = os.path.realpath(os.getcwd())
    blocked = {
        "os.fork", "os.forkpty", "os.kill", "os.killpg", "os.system", "os.exec", "os.spawn",
        "os.posix_spawn", "os.startfile", "subprocess.Popen", "pty.spawn", "socket.__new__",
        "socket.connect", "socket.bind", "socket.getaddrinfo", "socket.sendto", "ctypes.dlopen",
        "ctypes.dlsym", "ctypes.addressof", "ctypes.cdata", "os.setuid", "resource.setrlimit",
        "sys.remote_exec", "signal.pthread_kill", "sys._current_frames", "sys.settrace", "sys.setprofile",
        "gc.get_objects", "gc.get_referrers", "gc.get_referents", "object.__getattr__",
    }
    # Frames would let a program read the test harness's locals. Refused with an error that is also
    # a ValueError, which the stdlib's optional frame lookups (namedtuple, typing, enum) tolerate.
    class SandboxDenied(PermissionError, ValueError):
        pass
    blocked_imports = {"_posixsubprocess", "_ctypes", "_socket", "_multiprocessing", "_xxsubinterpreters"}
    path_events = {"os.remove", "os.rename", "os.rmdir", "os.mkdir", "shutil.rmtree", "os.chmod",
                   "os.chown", "os.link", "os.symlink", "os.truncate", "os.utime", "shutil.move"}
    write_flags = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC

    def inside(path):
        if isinstance(path, int):
            return True
        try:
            real = os.path.realpath(os.fsdecode(path))
        except Exception:
            return False
        return real == root or real.startswith(root + os.sep) or real == "/dev/null"

    def hook(event, args):
        if event in blocked or event == "sys._getframe":
            raise SandboxDenied("sandbox: " + event + " is not allowed")
        if event == "import" and args and args[0] in blocked_imports:
            raise SandboxDenied("sandbox: importing " + str(args[0]) + " is not allowed")
        if event == "open":
            path, mode, flags = (tuple(args) + (None, None, None))[:3]
            writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
                isinstance(flags, int) and flags & write_flags)
            if writing and not inside(path):
                raise PermissionError("sandbox: writing outside the working directory is not allowed")
        elif event in path_events:
            if not all(inside(a) for a in args[:2] if isinstance(a, (str, bytes, os.PathLike))):
                raise PermissionError("sandbox: " + event + " outside the working directory is not allowed")

    sys.addaudithook(hook)


_sandbox_guard()
del _sandbox_guard
"""
