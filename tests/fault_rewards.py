"""Rewards that fail in each way a user's reward can (tests/test_reward_faults.py), as dotted paths:
`dataset.rewards.<key>.fn=tests.fault_rewards.<name>`."""

import os
import signal
import time


def raises(completions, **kwargs):
    raise ValueError("a bug in the user's reward")


def raises_on_sevens(completions, **kwargs):
    texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
    if any("7" in t for t in texts):
        raise KeyError("7")
    return [0.0] * len(completions)


def wrong_length(completions, **kwargs):
    return [1.0]


def nan(completions, **kwargs):
    return [float("nan")] + [0.0] * (len(completions) - 1)


def hangs(completions, **kwargs):
    time.sleep(3600)


def impossible(completions, solution):
    return [0.0] * len(completions)


def killed_in_step_6(completions, trainer_state=None, **kwargs):
    """A hard kill (SIGKILL: nothing saved) as step 6 generates; a resume to fewer steps never gets there."""
    if trainer_state is not None and trainer_state.global_step == 5:
        os.kill(os.getpid(), signal.SIGKILL)
    return [0.0] * len(completions)
