"""The no-signal warning: after N steps in a row with no group whose rewards differ, one warning naming the
cause."""

import logging
from types import SimpleNamespace

from transformers import TrainerControl, TrainerState

from grpo_recipes.outputs.logs import NoSignalWarning, likely_cause


def test_likely_cause_reads_the_steps_metrics():
    assert "cut off at max_completion_length=32" in likely_cause({"completions/clipped_ratio": 0.9}, 32)
    assert "too hard" in likely_cause({"accuracy/sum_digits": 0.0, "completions/clipped_ratio": 0.1}, 32)
    assert "too easy" in likely_cause({"accuracy/a": 1.0, "accuracy/b": 1.0}, 32)
    assert "cannot vary" in likely_cause({"accuracy/a": 0.5}, 32)


def test_warns_once_after_n_steps_in_a_row(caplog):
    callback, args = NoSignalWarning(), SimpleNamespace(no_signal_warning=3, max_completion_length=32)
    state = TrainerState()
    caplog.set_level(logging.WARNING, logger="grpo_recipes.outputs.logs")
    for step, zero_std in enumerate([1.0, 1.0, 0.5, 1.0, 1.0, 1.0, 1.0], start=1):
        state.global_step = step
        callback.on_log(
            args, state, TrainerControl(), logs={"frac_reward_zero_std": zero_std, "accuracy/t": 0.0}
        )
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1 and "No learning signal for 3 steps in a row (step 6)" in warnings[0]
    assert "too hard" in warnings[0]
    quiet, off = NoSignalWarning(), SimpleNamespace(no_signal_warning=0, max_completion_length=32)
    quiet.on_log(off, state, TrainerControl(), logs={"frac_reward_zero_std": 1.0})
    assert not quiet.warned
