"""GRPO training with TRL, configured with Hydra.

    python train_grpo.py                                  # embedded default, CPU is enough
    python train_grpo.py max_steps=100 learning_rate=5e-6
    python train_grpo.py dataset=reverse_digits model=tiny_random
    python train_grpo.py model=/path/to/model             # any causal LM (dir or hub id)
    python train_grpo.py --cfg job                        # print the composed config
    python train_grpo.py -m learning_rate=1e-6,5e-6 seed=1,2

The command line is checked before Hydra runs anything (grpo_recipes/config/preflight.py): a mistake is
one line and exit code 2, with nothing created. Heavy libraries are imported inside the job, so
the check, `--cfg job` and `--help` stay fast.
"""

import atexit
import gc
import sys
from pathlib import Path

from grpo_recipes.models.hardware import relaunch_with_malloc_tunables

if __name__ == "__main__":  # first, so that the process it replaces has imported nothing else
    relaunch_with_malloc_tunables()  # glibc's allocator tuned for training steps (hardware.py)

import hydra
from omegaconf import DictConfig

from grpo_recipes.config.cli import rewrite_argv
from grpo_recipes.config.knobs import register
from grpo_recipes.config.preflight import check_command_line

CONFIG_DIR = Path(__file__).resolve().parent / "config"
register()  # every group's declared defaults, before Hydra composes


@hydra.main(version_base="1.3", config_path="config", config_name="train")
def main(cfg: DictConfig) -> float:
    from grpo_recipes.train.run import run_from_hydra

    return run_from_hydra(cfg)


if __name__ == "__main__":
    # However the run ends, Python's shutdown would then garbage-collect every object torch, TRL and the run
    # made (1.3-3 s here). Frozen at exit (after the atexit handlers of what the run imports), they go back
    # with the process instead.
    atexit.register(gc.freeze)
    sys.argv = check_command_line(rewrite_argv(sys.argv, CONFIG_DIR), CONFIG_DIR)
    main()
