"""The tool reward terms (rewards/tool_use.py), what the config check refuses across tools=, env= and the
dataset (check_tools, grpo_recipes/config/checks.py), worked examples with tool turns, and the tool turns
samples.jsonl and report.md show."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from grpo_common.errors import ConfigError
from grpo_recipes.config.checks import check_config
from grpo_recipes.train.data import build_messages, few_shot
from rewards import RewardContext, build_rewards
from tests.test_config import composed

CALL = {"type": "function", "function": {"name": "python", "arguments": {"code": "print(1)"}}}


def _rollout(*replies: str, answer: str = "[ANSWER] 1") -> list[dict]:
    """A tool rollout as TRL passes it to rewards: each call an assistant turn, each result a tool message."""
    turns = []
    for reply in replies:
        turns += [
            {"role": "assistant", "content": "", "tool_calls": [CALL]},
            {"role": "tool", "content": reply},
        ]
    return turns + [{"role": "assistant", "content": answer}]


COMPLETIONS = [
    _rollout("1"),
    _rollout("error: NameError: name 'x' is not defined", "1"),
    _rollout("{'error': 'Tool nope not found.'}"),  # TRL's own reply: an error too
    [{"role": "assistant", "content": "[ANSWER] 1"}],  # no call
    [{"role": "assistant", "content": "", "tool_calls": [CALL]}],  # a call that never ran (the cap)
]


def _rewards(*names: str):
    ctx = RewardContext(lambda answer, entry: 0.0, "answer_tag")
    funcs, weights = build_rewards({n: {"weight": 0.5} for n in names}, ctx)
    return [f(prompts=[[]] * len(COMPLETIONS), completions=COMPLETIONS) for f in funcs], weights


def test_tool_format_pays_a_call_that_ran_and_tool_errors_the_share_of_error_replies():
    (fmt, errors), weights = _rewards("tool_format", "tool_errors")
    assert fmt == [1.0, 1.0, 1.0, 0.0, 0.0]
    assert errors == [0.0, -0.5, -1.0, 0.0, 0.0]
    assert weights == [0.5, 0.5]


def test_the_tool_rewards_count_as_the_fixed_eval_counts():
    from grpo_common.tool_use import tool_use

    (fmt, errors), _ = _rewards("tool_format", "tool_errors")
    uses = [tool_use(c) for c in COMPLETIONS]
    assert fmt == [float(u.calls > 0) for u in uses]
    assert errors == [-u.errors / u.calls if u.calls else 0.0 for u in uses]


def test_a_response_prefix_goes_on_the_last_assistant_turn_not_on_a_tool_reply():
    from grpo_common.templates import with_prefix

    ended_on_a_tool = [
        {"role": "assistant", "content": "", "tool_calls": [CALL]},
        {"role": "tool", "content": "x"},
    ]
    assert with_prefix(ended_on_a_tool, "<think>\n")[1] == {"role": "tool", "content": "x"}
    assert with_prefix(ended_on_a_tool, "<think>\n")[0]["content"] == "<think>\n"


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ["env=python_session", "tools=python"],
            (
                "env.name=python_session: tools.names gives the model a tool named 'python' too, and it "
                "cannot tell them apart: keep one (tools=none, or env=none)"
            ),
        ),
        (
            ["env=feedback", "grpo.max_tool_calling_iterations=2"],
            (
                "grpo.max_tool_calling_iterations=2: env=feedback needs at least env.max_turns=3 "
                "tool-calling turns (one per answer submitted); raise it, or lower env.max_turns"
            ),
        ),
        (
            ["+dataset.rewards.tool_format.weight=0.1"],
            (
                "dataset.rewards.tool_format: tool_format scores tool calls, and this run gives the model "
                "no tool: add tools= or env=, or drop it"
            ),
        ),
        (
            ["env=nope"],
            None,  # not an option of the group: Hydra's own message
        ),
    ],
)
def test_what_cannot_work_together_is_refused_in_one_line(overrides, message):
    if message is None:
        with pytest.raises(Exception, match="nope"):
            composed(*overrides)
        return
    with pytest.raises(ConfigError) as err:
        check_config(composed("model=tiny_random", *overrides))
    assert str(err.value) == message


def test_tools_and_an_environment_compose_when_their_names_differ():
    cfg = composed(
        "model=tiny_random", "tools=calculator", "env=feedback", "+dataset.rewards.tool_errors.weight=0.1"
    )
    check_config(cfg)
    check_config(composed("model=tiny_random", "env=python_session", "env.name=feedback"))


SHOT = {
    "question": "What is 4718295 reversed?",
    "tool_calls": [
        {"name": "python", "arguments": {"code": "print(str(4718295)[::-1])"}, "result": "5928174"}
    ],
    "completion": "[ANSWER] 5928174",
}


def test_a_worked_example_may_call_a_tool_before_its_answer():
    shots = few_shot({"few_shot": [SHOT]})
    messages = build_messages("What is 123 reversed?", "Use the tool.", shots)
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool", "assistant", "user"]
    assert messages[2]["tool_calls"][0]["function"] == {
        "name": "python",
        "arguments": SHOT["tool_calls"][0]["arguments"],
    }
    assert messages[3] == {"role": "tool", "name": "python", "content": "5928174"}


def test_a_worked_tool_call_renders_in_the_tool_template_as_the_model_writes_calls():
    from grpo_common.templates import set_chat_template
    from grpo_recipes.models.tiny import tiny_tokenizer
    from tools import build_tools

    tokenizer = tiny_tokenizer()
    set_chat_template(tokenizer, {"path": "tiny-random", "tool_chat_template": "trl:qwen2_5"}, tools=True)
    messages = build_messages("What is 123 reversed?", None, few_shot({"few_shot": [SHOT]}))
    text = tokenizer.apply_chat_template(messages, tools=build_tools(["python"], 100), tokenize=False)
    assert (
        '<tool_call>\n{"name": "python", "arguments": {"code": "print(str(4718295)[::-1])"}}\n</tool_call>'
        in text
    )
    assert "<tool_response>\n5928174\n</tool_response>" in text


@pytest.mark.parametrize(
    ("calls", "where"),
    [
        ([], "dataset.few_shot[0].tool_calls=[]"),
        ([{"name": "python", "arguments": "print(1)", "result": "1"}], "dataset.few_shot[0].tool_calls[0]="),
        ([{"name": "python", "arguments": {}}], "dataset.few_shot[0].tool_calls[0]="),
        ([{"name": "", "arguments": {}, "result": "1"}], "dataset.few_shot[0].tool_calls[0]="),
    ],
)
def test_a_malformed_tool_call_in_a_worked_example_is_named(calls, where):
    with pytest.raises(ConfigError) as err:
        few_shot({"few_shot": [{**SHOT, "tool_calls": calls}]})
    assert str(err.value).startswith(where) and "\n" not in str(err.value)


def test_a_worked_example_calling_a_tool_the_run_does_not_give_is_refused():
    cfg = composed("model=tiny_random", "tools=calculator")
    cfg["dataset"]["few_shot"] = [SHOT]
    with pytest.raises(ConfigError) as err:
        check_config(cfg)
    assert str(err.value) == (
        "dataset.few_shot: a worked example calls the tool 'python', which this run does not give the model; "
        "its tools: calculator"
    )
    cfg = composed("model=tiny_random", "env=python_session")
    cfg["dataset"]["few_shot"] = [SHOT]
    check_config(cfg)


def test_samples_record_each_turn_and_the_environments_reward(tmp_path):
    from grpo_recipes.train.samples import SampleRecorder
    from tools.environments import Feedback

    recorder = SampleRecorder(
        tmp_path / "samples.jsonl",
        1,
        8,
        lambda texts, rows: [(None, 0.0)] * len(texts),
        {0},
        tools=True,
    )
    env = Feedback(lambda a, e: 1.0, 2)
    env.reset(answer="1")
    env.submit("1")
    fn = recorder.wrap([lambda **kw: [0.0] * len(kw["completions"])])[0]
    n = len(COMPLETIONS)
    fn(
        prompts=[[{"role": "user", "content": "q"}]] * n,
        completions=COMPLETIONS,
        completion_ids=[[1, 0]] * n,
        trainer_state=SimpleNamespace(global_step=0),
        answer=["1"] * n,
        environments=[env] * n,
    )
    rows = recorder.records(1, SimpleNamespace(max_completion_length=400))
    assert rows[1]["turns"][1] == {"role": "tool", "content": "error: NameError: name 'x' is not defined"}
    assert rows[1]["turns"][0]["tool_calls"] == [CALL] and rows[1]["completion"] == "[ANSWER] 1"
    assert (rows[1]["tool_calls"], rows[1]["tool_errors"]) == (2, 1)
    assert rows[0]["rewards"]["Feedback"] == 1.0
    json.dumps(rows)  # a JSON line each


def test_the_report_shows_one_eval_rollout_with_its_tool_turns():
    from grpo_recipes.outputs.report_tools import tool_section

    example = {
        "task": "t",
        "question": "1?",
        "answer": "1",
        "correct": True,
        "tool_calls": 1,
        "tool_errors": 0,
        "turns": [
            {"role": "assistant", "content": "", "tool_calls": [CALL]},
            {"role": "tool", "name": "python", "content": "1"},
            {"role": "assistant", "content": "[ANSWER] 1"},
        ],
    }
    plain = {**example, "tool_calls": 0, "turns": example["turns"][-1:]}
    evals = {
        3: {"metrics": {"tools/used": 0.5, "tools/calls_per_problem": 0.5}, "examples": [plain, example]}
    }
    lines = tool_section(evals)
    assert lines[0] == "## Tool use" and "problems that used a tool 50%" in lines[2]
    assert '1. assistant: "" -> calls `python(code="print(1)")`' in lines
    assert '2. tool (python): "1"' in lines and '3. assistant: "[ANSWER] 1"' in lines
    assert (
        tool_section({3: {"metrics": {}, "examples": [{k: v for k, v in plain.items() if k != "turns"}]}})
        == []
    )


def test_training_rows_keep_worked_tool_calls_as_written_and_as_the_eval_gets_them():
    """Arrow would merge the two calls' argument sets (code / expression) into one struct, each call gaining
    the other's key as null, or fail on a type clash: the train set stores prompts as JSON."""
    from grpo_recipes.train.data import build_datasets

    calculator = {
        "question": "What is 6 * 7?",
        "tool_calls": [{"name": "calculator", "arguments": {"expression": "6 * 7"}, "result": "42"}],
        "completion": "[ANSWER] 42",
    }
    typed = {
        **calculator,
        "tool_calls": [{"name": "calculator", "arguments": {"expression": 42}, "result": "42"}],
    }
    cfg = composed("model=tiny_random", "eval.size=4", "dataset.train_size=16")
    for shots in ([SHOT, calculator], [calculator, typed]):
        dataset = {**cfg["dataset"], "few_shot": shots}
        _, train, eval_rows = build_datasets(dataset, cfg["eval"])
        expected = build_messages("", None, few_shot(dataset))[
            :-1
        ]  # the worked turns, as the eval builds them
        assert train[0]["prompt"][: len(expected)] == eval_rows[0]["prompt"][: len(expected)]
        shown = [m for m in train[0]["prompt"] if m.get("tool_calls")]
        assert [list(m["tool_calls"][0]["function"]["arguments"]) for m in shown] == [
            list(s["tool_calls"][0]["arguments"]) for s in shots
        ]
