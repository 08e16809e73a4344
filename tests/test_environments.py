"""env= (TRL's environment_factory): the Python session keeps state within a rollout and never across
rollouts, everything in the sandbox; the feedback environment scores each submitted answer with the task's
verifier and pays for the turns used. Training (TRL's GRPOTrainer) and the fixed eval's tool loop reset each
rollout's environment with the row's columns and run the same turns, to the same environment reward (a
scripted model drives both through the real generate: tests/scripted/sitecustomize.py)."""

from __future__ import annotations

import importlib.util
import re

import pytest
import transformers

from grpo_common.tool_use import ERROR_PREFIX, ToolUse, tool_use
from rewards import sandbox
from tests.conftest import ROOT
from tools.environments import Feedback, PythonSession, environment_tools, make_environment_factory

pytestmark = [
    pytest.mark.filterwarnings("ignore:.*is_gradient_checkpointing.*:FutureWarning"),
    pytest.mark.filterwarnings("ignore:You are using .environment_factory.:UserWarning"),  # TRL: experimental
]


@pytest.fixture(scope="module")
def quick_sandbox():
    sandbox.configure(timeout=3)
    yield
    sandbox.configure()


def test_a_session_keeps_its_variables_across_calls_and_reset_clears_them(quick_sandbox):
    session = make_environment_factory("python_session", max_output_chars=200, max_turns=3)()
    assert [t.__name__ for t in environment_tools(session)] == ["python"]
    session.reset(prompt=[], question="q")
    assert session.python(code="x = 41\nprint('set')") == "set"
    assert session.python(code="x += 1\nprint(x)") == "42"  # only the new cell's output
    assert session.python(code="print(undefined)").startswith(ERROR_PREFIX)
    assert session.python(code="print(x)") == "42"  # a failed cell is not kept
    session.reset(prompt=[], question="another")
    assert session.python(code="print(x)") == f"{ERROR_PREFIX}NameError: name 'x' is not defined"


def test_no_state_leaks_between_rollouts(quick_sandbox):
    factory = make_environment_factory("python_session", max_output_chars=200, max_turns=3)
    first, second = factory(), factory()
    first.reset(), second.reset()
    assert first.python(code="import os\nsecret = 7\nopen('f.txt', 'w').write('x')\nprint(secret)") == "7"
    assert second.python(code="print(secret)").startswith(ERROR_PREFIX)
    assert second.python(code="import os\nprint(os.path.exists('f.txt'))") == "False"  # a fresh directory
    assert first.python(code="print(secret + 1)") == "8"


def test_a_hostile_session_call_is_a_tool_error_and_the_session_goes_on(quick_sandbox):
    session = PythonSession(200)
    session.reset()
    assert session.python(code="y = 3") == "(no output: print() the values you need)"
    reply = session.python(code="import os\nwhile True: os.fork()")
    assert reply.startswith(ERROR_PREFIX), reply
    assert session.python(code="print(y)") == "3"
    assert session.python(code="z = 5\nprint('error: just text')") == "error: just text"
    assert session.python(code="print(z)") == "5"  # it ran without error: kept, whatever it printed
    assert session.python(code="") == f"{ERROR_PREFIX}`code` must be a non-empty string of Python"


def _exact(answer, entry):
    return float(answer == entry["answer"])


def test_feedback_pays_for_the_turns_used():
    env = Feedback(_exact, max_turns=3)
    note = env.reset(prompt=[], question="2 + 2?", answer="4", task="t", metadata="{}")
    assert "submit" in note and "up to 3 times" in note
    assert env.get_reward() == 0.0
    assert env.submit(answer="5") == "that is not correct, try again (2 tries left)"
    assert env.submit(answer=" 4 ") == "correct"
    assert env.get_reward() == pytest.approx(1 - 1 / 3)
    assert env.submit(answer="5") == "correct: it was already accepted"  # no second verdict
    env.reset(prompt=[], question="2 + 2?", answer="4")
    assert env.submit(answer=4) == "correct" and env.get_reward() == 1.0  # a number, as JSON may give it
    env.reset(prompt=[], question="2 + 2?", answer="4")
    replies = [env.submit(answer="1") for _ in range(4)]
    assert replies[-2:] == ["that is not correct; no tries left", f"{ERROR_PREFIX}no tries left"]
    assert env.get_reward() == 0.0


def test_feedback_scores_with_the_tasks_own_verifier():
    from grpo_recipes.train.data import to_row
    from tasks import TaskSet

    taskset = TaskSet({"basic_arithmetic": {}})
    row = to_row(taskset.sample(1, seed=0)[0], None)
    env = make_environment_factory("feedback", max_output_chars=100, max_turns=2, scorer=taskset.score)()
    env.reset(**row)  # every column, as TRL passes the row
    assert env.submit(answer="not a number").startswith("that is not correct")
    assert env.submit(answer=row["answer"]) == "correct" and env.get_reward() == 0.5


def test_env_tools_names_the_tools_each_environment_gives():
    from tools import ENV_TOOLS

    for name, tools in ENV_TOOLS.items():
        environment = make_environment_factory(name, max_output_chars=1, max_turns=1, scorer=_exact)()
        assert tuple(t.__name__ for t in environment_tools(environment)) == tools


def test_an_unknown_environment_or_a_missing_verifier_is_refused():
    with pytest.raises(ValueError, match="env.name: unknown environment 'chess'; accepted: python_session"):
        make_environment_factory("chess", max_output_chars=1, max_turns=1)
    with pytest.raises(ValueError, match="needs the tasks' verifier"):
        make_environment_factory("feedback", max_output_chars=1, max_turns=1)
    assert make_environment_factory(None, max_output_chars=1, max_turns=1) is None


# --- training and the fixed eval, with a scripted model ---

SUBMIT = '<tool_call>\n{{"name": "submit", "arguments": {{"answer": "{answer}"}}}}\n</tool_call><|im_end|>'


def submitting_reply(text: str) -> str:
    """First a wrong answer, then the right one (the question's sum), then `[ANSWER] <it>`; a question
    starting "Never" is always answered wrong."""
    question = text.split("<|im_start|>user\n")[1].split("<|im_end|>")[0]
    replies = re.findall(r"<tool_response>\n(.*?)\n</tool_response>", text, flags=re.DOTALL)
    right = str(sum(int(n) for n in re.findall(r"\d+", question.split("Submit")[0])))
    if replies and replies[-1].startswith("correct"):
        return f"[ANSWER] {right}<|im_end|>"
    return SUBMIT.format(answer=right if replies and not question.startswith("Never") else "0")


@pytest.fixture
def scripted():
    spec = importlib.util.spec_from_file_location("scripted", ROOT / "tests/scripted/sitecustomize.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    original = module.install(submitting_reply)
    yield
    transformers.GenerationMixin.generate = original


def test_training_and_the_fixed_eval_run_the_feedback_environment_alike(scripted, tmp_path):
    from grpo_common.templates import set_chat_template
    from grpo_recipes.evaluation.generation import HFGenerator
    from grpo_recipes.evaluation.tool_loop import ToolLoop
    from grpo_recipes.models.tiny import tiny_tokenizer
    from tests.test_tool_loop import scripted_trainer

    tokenizer = tiny_tokenizer()
    set_chat_template(tokenizer, {"path": "tiny-random", "tool_chat_template": "trl:qwen2_5"}, tools="env")
    factory = make_environment_factory("feedback", max_output_chars=200, max_turns=3, scorer=_exact)
    seen = []

    def reward(completions, environments, **kwargs):
        seen.extend(completions)
        assert all(isinstance(e, Feedback) for e in environments)  # TRL hands rewards the environments
        return [0.0] * len(completions)

    questions = ["Add 4 and 5.", "Never mind: add 1 and 2."]
    rows = [
        {
            "prompt": [{"role": "user", "content": q}],
            "question": q,
            "answer": a,
            "task": "t",
            "metadata": "{}",
        }
        for q, a in zip(questions, ["9", "3"])
    ]
    trainer = scripted_trainer(tmp_path, tokenizer, rows, reward, 600, 3, environment_factory=factory)
    trainer.model.train()
    inputs = [rows[0], rows[0], rows[1], rows[1]]  # a group of two per prompt, as TRL's sampler gives
    out = trainer._generate_and_score_completions(inputs)
    trained_rewards = [e.get_reward() for e in trainer.environments]

    loop = ToolLoop(tokenizer, [], 3, 600, environment_factory=factory)
    generator = HFGenerator(trainer.model, tokenizer, batch_size=8)
    prompt_ids, environments = loop.start(inputs)
    rollouts = loop.run(
        lambda ids, budget: [g[0] for g in generator.generate_ids(ids, 1, None, budget)],
        prompt_ids,
        generator.eos_token_ids,
        environments,
    )
    assert [r.turns for r in rollouts] == seen  # the same turns, parsed the same way
    mask = out["completion_mask"].bool()
    assert [r.ids for r in rollouts] == [ids[m].tolist() for ids, m in zip(out["completion_ids"], mask)]
    assert [r.environment.get_reward() for r in rollouts] == trained_rewards
    assert trained_rewards == pytest.approx([2 / 3, 2 / 3, 0.0, 0.0])
    assert trainer._metrics["train"]["rewards/Feedback/mean"][-1] == pytest.approx(1 / 3)
    assert "Submit your final answer with the submit tool" in tokenizer.decode(prompt_ids[0])
    assert seen[0][-1]["content"] == "[ANSWER] 9" and seen[0][1]["content"].startswith("that is not correct")
    # the never-right rollout: three answers, then the iteration cap stops the fourth call
    assert tool_use(seen[2]) == ToolUse(3, 0) and seen[2][-1].get("tool_calls")
