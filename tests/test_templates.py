"""Chat-template override and the response prefix a template pre-fills (`<think>`)."""

import copy

import pytest

from grpo_common.errors import ConfigError
from grpo_common.templates import load_chat_template, response_prefix, with_prefix
from grpo_recipes.models.tiny import CHATML
from rewards import RewardContext, build_rewards

# A Qwen3-style template: the generation prompt opens the reasoning block for the model.
THINK_PREFILL = CHATML.replace("assistant\n'", "assistant\n<think>\n'")
assert THINK_PREFILL != CHATML


@pytest.fixture
def tokenizer(tiny):
    tok = copy.deepcopy(tiny[1])
    tok.chat_template = THINK_PREFILL
    return tok


def test_detects_a_prefilled_think_opener(tokenizer, tiny):
    assert response_prefix("auto", tokenizer) == "<think>\n"
    assert response_prefix("auto", tiny[1]) == ""  # plain ChatML pre-fills nothing
    assert response_prefix(None, tokenizer) == "<think>\n"
    assert response_prefix("none", tokenizer) == "" and response_prefix("<r>", tokenizer) == "<r>"
    with pytest.raises(ConfigError, match="model.response_prefix must be auto, none or a string"):
        response_prefix(3, tokenizer)


def test_with_prefix_handles_both_completion_forms():
    assert with_prefix("x</think>", "<think>") == "<think>x</think>"
    msgs = [{"role": "assistant", "content": "x</think>"}]
    assert with_prefix(msgs, "<think>") == [{"role": "assistant", "content": "<think>x</think>"}]
    assert msgs[0]["content"] == "x</think>"  # the caller's list is not modified
    assert with_prefix("x", "") == "x"


def test_rewards_read_the_prefilled_opener(tokenizer):
    completion = "two and two</think><answer>4</answer>"  # what the model writes after the pre-filled <think>
    ctx = RewardContext(scorer=lambda a, e: 0.0, prompt_format="think")
    (fmt, tags), _ = build_rewards({"format": {}, "tag_count": {}}, ctx)
    assert fmt(prompts=[None], completions=[completion]) == [0.0]
    assert tags(prompts=[None], completions=[completion]) == [0.75]
    ctx.response_prefix = response_prefix("auto", tokenizer)  # set once the tokenizer is loaded
    assert fmt(prompts=[None], completions=[completion]) == [1.0]
    assert tags(prompts=[None], completions=[[{"role": "assistant", "content": completion}]]) == [1.0]


def test_chat_template_override_from_a_string_or_a_file(tmp_path):
    assert load_chat_template(CHATML) == CHATML
    path = tmp_path / "t.jinja"
    path.write_text(CHATML)
    assert load_chat_template(str(path)) == CHATML
    with pytest.raises(ConfigError, match="neither a Jinja template, an existing file, nor trl:<name>"):
        load_chat_template("missing.jinja")


def test_a_trl_template_is_read_from_the_installed_trl_byte_for_byte():
    from trl.chat_template_utils import qwen2_5_chat_template

    assert load_chat_template("trl:qwen2_5") == qwen2_5_chat_template  # TRL knows its templates by identity
    with pytest.raises(
        ConfigError, match=r"model.tool_chat_template=trl:qwen25: the installed TRL ships no such"
    ):
        load_chat_template("trl:qwen25", "model.tool_chat_template")


def test_tools_need_a_template_that_can_call_them(tiny):
    from grpo_common.templates import set_chat_template

    tokenizer = copy.deepcopy(tiny[1])
    set_chat_template(tokenizer, {"path": "tiny-random", "tool_chat_template": "trl:qwen2_5"}, tools=False)
    with pytest.raises(ConfigError, match=r"cannot call tools with its own chat template; set model.chat_"):
        set_chat_template(tokenizer, {"path": "tiny-random"}, tools=True)
    assert tokenizer.chat_template == CHATML  # without tools, tool_chat_template is not used
    set_chat_template(tokenizer, {"path": "tiny-random", "tool_chat_template": "trl:qwen2_5"}, tools=True)
    assert tokenizer.response_template is not None  # TRL's parser for its calls, for the fixed eval too
    custom = copy.deepcopy(tiny[1])  # a template that renders tool calls, in a format TRL cannot parse
    custom.chat_template = CHATML.replace("message['content']", "message['content'] ~ (message | tojson)")
    with pytest.raises(ConfigError, match="TRL cannot parse the tool calls"):
        set_chat_template(custom, {"path": "tiny-random"}, tools=True)
