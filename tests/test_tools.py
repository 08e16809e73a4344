"""The tools a model may call mid-answer (tools/): hostile calls harm nothing and come back as a tool error,
never as an exception into the trainer; no state carries from one call to the next; the calculator evaluates
arithmetic only; each tool is a function TRL can build a schema for; tool use is counted one way."""

from __future__ import annotations

import os
import secrets
import time
from pathlib import Path

import pytest

from grpo_common.tool_use import ToolUse, is_tool_error, tool_use
from grpo_recipes.evaluation.metrics import usage_metrics
from rewards import sandbox
from tools import ERROR_PREFIX, TOOL_NAMES, build_tools, cut

LIMIT = 300  # tools.max_output_chars in these tests


@pytest.fixture(scope="module")
def python_tool():
    sandbox.configure(timeout=1.5)  # the sandbox's limits are the python tool's
    yield build_tools(["python"], LIMIT)[0]
    sandbox.configure()


@pytest.fixture(scope="module")
def calculator():
    return build_tools(["calculator"], LIMIT)[0]


def _processes() -> int:
    return sum(name.isdigit() for name in os.listdir("/proc"))


def test_a_plain_program_prints_its_result(python_tool):
    assert python_tool(code="print(str(4718295)[::-1])") == "5928174"
    assert python_tool(code="x = 1") == "(no output: print() the values you need)"
    assert python_tool(code="1 / 0") == "error: ZeroDivisionError: division by zero"  # the error's last line
    assert python_tool(code="import sys\nsys.exit(3)") == "error: exit code 3"
    assert python_tool(code="").startswith(ERROR_PREFIX) and python_tool(code=7).startswith(ERROR_PREFIX)


HOSTILE = {
    "fork bomb": "import os\nwhile True:\n    os.fork()",
    "fork bomb, errors swallowed": (
        "import os\nwhile True:\n    try:\n        os.fork()\n    except Exception:\n        pass"
    ),
    "shell out": "import os\nos.system('touch /tmp/grpo-tool-shell')",
    "kill the parent": "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)",
    "infinite loop": "while True:\n    pass",
    "huge output": "import sys\nwhile True:\n    sys.stdout.write('x' * 65536)",
    "huge allocation": "x = bytearray(10 * 1024 ** 3)\nprint('allocated')",
    "ctypes": "import ctypes\nctypes.CDLL(None)",
}


@pytest.mark.parametrize("name", list(HOSTILE))
def test_a_hostile_call_is_a_tool_error_and_harms_nothing(python_tool, name):
    before, start = _processes(), time.monotonic()
    reply = python_tool(code=HOSTILE[name])
    assert isinstance(reply, str) and reply.startswith(ERROR_PREFIX), reply
    assert len(reply) <= LIMIT and "allocated" not in reply
    assert time.monotonic() - start < 10  # the sandbox's timeout, and the kill of everything it started
    time.sleep(0.3)
    assert _processes() <= before + 5  # nothing left behind
    assert not Path("/tmp/grpo-tool-shell").exists()
    assert python_tool(code="print(6 * 7)") == "42"  # the next call runs as before


def test_writing_outside_the_sandbox_is_refused(python_tool, tmp_path):
    target = tmp_path / f"escape-{secrets.token_hex(4)}"
    reply = python_tool(code=f"open({str(target)!r}, 'w').write('x')")
    assert reply.startswith(ERROR_PREFIX) and not target.exists()
    reply = python_tool(code=f"import os\nos.remove({str(Path(__file__).resolve())!r})")
    assert reply.startswith(ERROR_PREFIX) and Path(__file__).exists()


def test_no_network(python_tool, tcp_server):
    port, hits = tcp_server
    code = (
        f"import socket\ns = socket.create_connection(('127.0.0.1', {port}), timeout=1)\nprint('connected')"
    )
    reply = python_tool(code=code)
    assert reply.startswith(ERROR_PREFIX) and "connected" not in reply
    assert hits == []


def test_the_environment_and_its_secrets_are_out_of_reach(python_tool, monkeypatch):
    secret = secrets.token_hex(8)
    monkeypatch.setenv("GRPO_TOOL_SECRET", secret)
    reply = python_tool(code="import os\nprint(os.environ['GRPO_TOOL_SECRET'])")
    assert reply.startswith(ERROR_PREFIX) and "KeyError" in reply
    for code in (
        "import os\nprint(dict(os.environ))",
        "import os\nprint(open(f'/proc/{os.getppid()}/environ').read())",
        "print(open('/proc/1/environ').read())",
    ):
        assert secret not in python_tool(code=code)


def test_no_state_carries_from_one_call_to_the_next(python_tool):
    first = (
        "import builtins, os\nbuiltins.LEAK = 1\nos.environ['LEAK'] = '1'\nopen('state.txt', 'w').write('1')"
    )
    assert not python_tool(code=first).startswith(ERROR_PREFIX)
    assert python_tool(code="print(open('state.txt').read())").startswith("error: FileNotFoundError")
    assert python_tool(code="import builtins\nprint(builtins.LEAK)").startswith("error: AttributeError")
    assert python_tool(code="import os\nprint(os.environ.get('LEAK'))") == "None"


def test_a_long_output_is_cut_to_the_limit(python_tool):
    reply = python_tool(code="print('y' * 5000)")
    assert len(reply) == LIMIT and reply.startswith("yyy") and reply.endswith("[cut: 5000 characters]")
    assert cut("short", 10) == "short"


@pytest.mark.parametrize(
    "expression, value",
    [("(12 + 7) * 3", "57"), ("2 ** 10", "1024"), ("7 / 2", "3.5"), ("-3 + 5", "2"), ("17 // 5 % 3", "0")],
)
def test_the_calculator_evaluates_arithmetic(calculator, expression, value):
    assert calculator(expression=expression) == value


@pytest.mark.parametrize(
    "expression",
    [
        "__import__('os').system('touch /tmp/grpo-calc')",  # a call
        "x + 1",  # a name
        "(1).real",  # an attribute
        "abs(-1)",
        "'a' * 3",
        "[1] * 3",
        "True + 1",
        "1 if 1 else 2",
        "9 ** 9 ** 9",  # huge exponents
        "10 ** 100000",
        "(2 ** 4000) * (2 ** 4000)",
        "1.5 ** 100000",
        "(-8) ** 0.5",
        "1 / 0",
        "1 +",
        "",
        "1" * 500,
        "(" * 150 + "1" + ")" * 150,
    ],
)
def test_the_calculator_refuses_everything_else_with_an_error(calculator, expression):
    start = time.thread_time()  # CPU time (the calculator runs in this thread): load cannot fail it
    reply = calculator(expression=expression)
    assert reply.startswith(ERROR_PREFIX), reply
    assert time.thread_time() - start < 1 and not Path("/tmp/grpo-calc").exists()


def test_each_tool_has_the_schema_trl_builds_from_its_signature_and_docstring():
    from transformers.utils import get_json_schema

    for tool in build_tools(list(TOOL_NAMES), LIMIT):
        schema = get_json_schema(tool)["function"]
        assert schema["name"] == tool.__name__ and schema["description"]
        (arg,) = schema["parameters"]["required"]
        assert schema["parameters"]["properties"][arg]["type"] == "string"
        assert schema["parameters"]["properties"][arg]["description"]
    with pytest.raises(ValueError, match="tools.names: unknown tool 'bash'; accepted: python, calculator"):
        build_tools(["bash"], LIMIT)


def test_tool_use_counts_the_results_the_model_read():
    turns = [
        {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {}}] * 2},
        {"role": "tool", "name": "python", "content": "42"},
        {"role": "tool", "name": "python", "content": "error: NameError: name 'x' is not defined"},
        {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {}}]},
        {"role": "tool", "name": "nope", "content": str({"error": "Tool nope not found."})},  # TRL's reply
        {"role": "assistant", "content": "[ANSWER] 42"},
    ]
    assert tool_use(turns) == ToolUse(3, 2)
    assert tool_use("plain text") == ToolUse(0, 0) and tool_use(turns[-1:]) == ToolUse(0, 0)
    assert is_tool_error("error: x") and not is_tool_error("42")
    rows = [
        {"tool_calls": 2, "tool_errors": 1, "correct": True},
        {"tool_calls": 0, "tool_errors": 0, "correct": False},
        {"tool_calls": 1, "tool_errors": 0, "correct": False},
        {"tool_calls": 0, "tool_errors": 0, "correct": True},
    ]
    assert usage_metrics(rows) == {
        "tools/calls_per_problem": 0.75,
        "tools/used": 0.5,
        "tools/errors_per_problem": 0.25,
        "tools/error_rate": 1 / 3,
        "tools/accuracy_with_tool": 0.5,
        "tools/accuracy_without_tool": 0.5,
    }
