"""Clean stops (README "Stopping and resuming"). The ranks agree after every step (one all-reduce of the
signal number), so all stop after the same step and the checkpoint save, a collective under DeepSpeed and
FSDP, cannot hang."""

from __future__ import annotations

import json
import logging
import signal
from pathlib import Path

from transformers import TrainerCallback

from grpo_recipes.outputs.logs import write_atomic

log = logging.getLogger(__name__)


class GracefulStop(TrainerCallback):
    def __init__(self, accelerator):
        self.accelerator = accelerator  # the trainer's: the ranks agree on a stop through it
        self.signum: int | None = None  # the signal this process received
        self.agreed: int | None = None  # the one all ranks stop on (another rank's, possibly)
        self._previous = {}

    def install(self) -> None:
        self._previous = {s: signal.signal(s, self._handle) for s in (signal.SIGTERM, signal.SIGINT)}

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
    def requested(self) -> bool:
        """A stop all ranks agree on (with several processes, a signal counts from the next step's end)."""
        return self.agreed is not None or (self.accelerator.num_processes == 1 and self.signum is not None)

    @property
    def exit_code(self) -> int:
        return 128 + (self.signum or self.agreed or 0)

    def on_step_end(self, args, state, control, **kwargs):
        if not self.agreed and self.accelerator.num_processes == 1:
            self.agreed = self.signum
        elif not self.agreed:  # the highest signal number any rank has received (0: none has)
            import torch

            mine = torch.tensor([self.signum or 0], device=self.accelerator.device)
            self.agreed = int(self.accelerator.reduce(mine, reduction="max").item()) or None
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
    write_atomic(path, "".join(k + "\n" for k in kept))
    return dropped
