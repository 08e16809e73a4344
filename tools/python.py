"""The `python` tool: the model's code runs in the project's sandbox (rewards/sandbox: its own process,
CPU, memory, output and time limits, no network, a throw-away directory, the `sandbox` group's limits), one
program per call, so no state carries from one call to the next."""

from __future__ import annotations

from collections.abc import Callable

from grpo_common.errors import first_line
from tools import ERROR_PREFIX, cut


def run_python(code: str, max_output_chars: int) -> tuple[bool, str]:
    """(whether it ran without error, what it printed or the last line of its error); never raises."""
    if not isinstance(code, str) or not code.strip():
        return False, f"{ERROR_PREFIX}`code` must be a non-empty string of Python"
    from rewards.sandbox import get_executor
    from rewards.sandbox.executor import Program

    try:
        executor = get_executor()
        result = executor.run([Program(code)])[0]
    except Exception as err:  # noqa: BLE001 - a tool's failure is the model's to read, not the trainer's
        return False, cut(f"{ERROR_PREFIX}the sandbox could not run it ({first_line(err)})", max_output_chars)
    if result.ok:
        return True, cut(
            result.stdout.rstrip("\n") or "(no output: print() the values you need)", max_output_chars
        )
    if result.error is not None:
        message = result.error
    elif result.timed_out:
        message = f"timed out after {executor.timeout:g} s"
    else:
        lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
        message = lines[-1].strip() if lines else f"exit code {result.returncode}"
        message = message.replace("_sandbox_guard.<locals>.", "")  # the guard's refusal, named plainly
    return False, cut(ERROR_PREFIX + message, max_output_chars)


def make(max_output_chars: int) -> Callable[[str], str]:
    def python(code: str) -> str:
        """Run a short Python program and read what it prints.

        Args:
            code: The Python source to run; print() what you need, e.g. print(str(4718295)[::-1])

        Returns:
            The program's output, or the last line of its error.
        """
        return run_python(code, max_output_chars)[1]

    return python
