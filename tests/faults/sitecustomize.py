"""Fault injection for tests/test_reward_faults.py: on PYTHONPATH, Python imports this at start-up.

FAULT_RAISE_IN_BACKWARD=N  the Nth backward pass raises (a crash inside training step N, before its update)
FAULT_ENOSPC_ON_SAVE=NAME@N  the Nth torch.save of a file named NAME raises ENOSPC (a full disk mid-save)
"""

import errno
import os

if os.environ.get("FAULT_RAISE_IN_BACKWARD") or os.environ.get("FAULT_ENOSPC_ON_SAVE"):
    import torch

    calls = {"backward": 0, "save": 0}
    name, _, nth = os.environ.get("FAULT_ENOSPC_ON_SAVE", "@0").partition("@")
    backward, save = torch.autograd.backward, torch.save

    def failing_backward(*args, **kwargs):
        calls["backward"] += 1
        if calls["backward"] == int(os.environ.get("FAULT_RAISE_IN_BACKWARD", "0")):
            raise RuntimeError("CUDA out of memory (injected by tests/faults/sitecustomize.py)")
        return backward(*args, **kwargs)

    def full_disk_save(obj, f, *args, **kwargs):
        if isinstance(f, (str, os.PathLike)) and os.path.basename(f) == name:
            calls["save"] += 1
            if calls["save"] == int(nth):
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(f))
        return save(obj, f, *args, **kwargs)

    torch.autograd.backward, torch.save = failing_backward, full_disk_save
