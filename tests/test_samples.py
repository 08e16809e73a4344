"""samples.jsonl: the recorder around TRL's reward calls, and the report's early-vs-late view."""

import json
from types import SimpleNamespace

from grpo_common.formats import Extraction
from grpo_recipes.outputs.report import _samples
from grpo_recipes.train.samples import SampleRecorder, read_samples, wanted

EOS = 0


def judge(texts, rows):  # reads the last word, scores it against the answer
    return [(Extraction(t.split()[-1] if t.split() else None, "last_number"), 0.0) for t in texts]


def recorder(tmp_path, every=2, count=2):
    return SampleRecorder(
        tmp_path / "samples.jsonl",
        every=every,
        count=count,
        judge=judge,
        eos_token_ids={EOS},
    )


def batch(step: int):
    """What TRL hands every reward function for one generation batch (3 completions)."""
    return {
        "prompts": [
            [{"role": "system", "content": "be brief"}, {"role": "user", "content": f"{i} + 1 ="}]
            for i in range(3)
        ],
        "completions": [[{"role": "assistant", "content": f"it is {i + 1}"}] for i in range(3)],
        "completion_ids": [[5, 6, EOS], [5, 6, 7, 8], [5, EOS]],
        "answer": ["1", "2", "3"],
        "task": ["add"] * 3,
        "question": [f"{i} + 1 =" for i in range(3)],
        "trainer_state": SimpleNamespace(global_step=step - 1),
    }


def test_sampled_steps_are_the_first_and_every_nth():
    assert [s for s in range(1, 11) if wanted(s, 4)] == [1, 4, 8]
    assert not any(wanted(s, 0) for s in range(1, 11))  # 0: off


def test_each_reward_component_extraction_and_truncation_are_recorded(tmp_path):
    rec = recorder(tmp_path)
    calls = []

    def accuracy(prompts, completions, completion_ids=None, **kwargs):
        calls.append(len(completions))
        return [1.0, 0.0, None]

    def format(prompts, completions, completion_ids=None, **kwargs):
        return [0.5, 0.5, 0.5]

    funcs = rec.wrap([accuracy, format])
    assert [f.__name__ for f in funcs] == ["accuracy", "format"]  # TRL's metric names are unchanged
    for step in (1, 2, 3):
        kwargs = batch(step)
        prompts, completions, ids = (
            kwargs.pop("prompts"),
            kwargs.pop("completions"),
            kwargs.pop("completion_ids"),
        )
        assert funcs[0](prompts, completions, completion_ids=ids, **kwargs) == [1.0, 0.0, None]
        funcs[1](prompts, completions, completion_ids=ids, **kwargs)
        state = SimpleNamespace(global_step=step, is_world_process_zero=True)
        rec.on_step_end(SimpleNamespace(max_completion_length=4, report_to=["none"]), state, None)
    assert calls == [3, 3, 3]  # the rewards themselves run on the whole batch
    rows = read_samples(tmp_path / "samples.jsonl")
    assert list(rows) == [1, 2]  # step 3 is not sampled (every 2)
    first = rows[1]
    assert len(first) == 2  # capped at count
    assert first[0] == {
        "step": 1,
        "task": "add",
        "prompt": "0 + 1 =",
        "completion": "it is 1",
        "rewards": {"accuracy": 1.0, "format": 0.5},
        "extracted": "1",
        "rule": "last_number",
        "answer": "1",
        "truncated": False,  # ended with end-of-sequence
    }
    assert first[1]["truncated"] is True  # 4 tokens = max_completion_length, no end-of-sequence


def test_report_shows_early_and_late_rollouts_side_by_side(tmp_path):
    lines = [
        {
            "step": s,
            "task": "add",
            "prompt": "2 + 2 =",
            "completion": text,
            "rewards": {"accuracy": r},
            "extracted": x,
            "rule": "last_number",
            "answer": "4",
            "truncated": cut,
        }
        for s, text, r, x, cut in [
            (1, "two plus two is | five", 0.0, "five", True),
            (40, "4", 1.0, "4", False),
        ]
    ]
    (tmp_path / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    out = _samples(tmp_path)
    assert "| step 1 | step 40 |" in out
    row = next(line for line in out if line.startswith("| 2 + 2"))
    early, late = row.split(" | 2 + 2")  # one rollout per column
    assert (
        "**cut off**" in early and "accuracy 0" in early and "\\|" in early
    )  # a | in a completion is escaped
    assert "read `4`" in late and "accuracy 1" in late
