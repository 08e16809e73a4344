"""Clean stops and resumption.

First SIGTERM or Ctrl-C: the current step finishes, a checkpoint is saved, training stops and the
process exits non-zero (143 / 130) with a line saying how to resume. A second signal stops at once.
In a multi-process run the ranks agree after every step (one all-reduce of the signal number): a
signal that reached one rank, or reached the ranks on both sides of a step boundary, stops them all
after the same step, so the checkpoint save (a collective under DeepSpeed and FSDP) cannot hang.
Files already written stay whole either way: metrics.jsonl lines and eval JSONs are written atomically.
On resume, metrics.jsonl lines logged after the checkpoint are dropped, since training re-logs them.
"""

from __future__ import annotations

import json
import logging
import os
import signal
from pathlib import Path

from transformers import TrainerCallback

log = logging.getLogger(__name__)


class GracefulStop(TrainerCallback):
    """Turns the first SIGTERM/SIGINT into 'save a checkpoint after this step, then stop'."""

    def __init__(self, accelerator=None):
        self.signum: int | None = None  # the signal this process received
        self.agreed: int | None = None  # the one all ranks stop on (another rank's, possibly)
        self._previous = {}
        self.accelerator = accelerator  # the trainer's: the ranks agree on a stop through it

    def install(self) -> GracefulStop:
        for signum in (signal.SIGTERM, signal.SIGINT):
            self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def uninstall(self) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)

    def _handle(self, signum, frame):
        if self.signum is not None:  # second signal: stop now
            raise KeyboardInterrupt
        self.signum = signum
        log.warning(
            "%s received: finishing this step, saving a checkpoint and stopping (again to stop at once)",
            signal.Signals(signum).name,
        )

    @property
    def alone(self) -> bool:
        return self.accelerator is None or self.accelerator.num_processes == 1

    @property
    def requested(self) -> bool:
        """A stop all ranks agree on (with several processes, a signal counts from the next step's end)."""
        return self.agreed is not None or (self.alone and self.signum is not None)

    @property
    def exit_code(self) -> int:
        return 128 + (self.signum or self.agreed or 0)

    def agree(self) -> int | None:
        """The highest signal number any rank has received (None: none has)."""
        if self.alone:
            return self.signum
        import torch

        acc = self.accelerator
        mine = torch.tensor([self.signum or 0], device=acc.device)
        return int(acc.reduce(mine, reduction="max").item()) or None  # accelerate's all-reduce

    def on_step_end(self, args, state, control, **kwargs):
        self.agreed = self.agreed or self.agree()
        if self.requested:
            control.should_save = True
            control.should_training_stop = True


def trim_metrics_after(path: Path, step: int) -> int:
    """Drop metrics.jsonl lines of steps after `step` (and any line cut by a crash); returns how many."""
    if not path.exists():
        return 0
    kept, dropped = [], 0
    for line in path.read_text().splitlines():
        try:
            if json.loads(line)["step"] <= step:
                kept.append(line)
                continue
        except (json.JSONDecodeError, KeyError, TypeError):
            pass
        dropped += 1
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text("".join(k + "\n" for k in kept))
    os.replace(tmp, path)
    return dropped
