"""The sandbox for model-written code: `Executor().run([Program(source), ...])` (executor.py). One executor
is shared by the code tasks, the code reward and the python tool, its limits set from the `sandbox` config
group (`configure`); checking and storing them imports none of the machinery, which a run without code
never loads."""

from __future__ import annotations

from collections.abc import Mapping

from grpo_common.errors import did_you_mean

LIMITS = ("timeout", "memory_mb", "max_output_kb", "max_processes", "disk_mb")  # positive numbers
SETTINGS = (*LIMITS, "workers", "isolation", "languages", "read_paths")
_settings: dict = {}
_executor = None


def check_settings(**settings) -> dict:
    """`settings` (the Executor's keywords) when valid, else a ValueError naming the bad key or value."""
    for key in settings:
        if key not in SETTINGS:
            hint = did_you_mean(key, SETTINGS)
            raise ValueError(f"sandbox: unknown key '{key}'.{hint} Accepted: {', '.join(SETTINGS)}")
    if settings.get("isolation", "full") not in ("full", "basic"):
        raise ValueError(f"sandbox.isolation must be 'full' or 'basic', got {settings['isolation']!r}")
    for key in LIMITS:
        value = settings.get(key, 1)
        if not isinstance(value, (int, float)) or value <= 0:
            raise ValueError(f"sandbox.{key} must be a positive number, got {value!r}")
    for name, spec in settings.get("languages", {}).items():
        if not isinstance(spec, Mapping) or "command" not in spec:
            raise ValueError(f"sandbox.languages.{name} needs a 'command' template, e.g. [node, '{{file}}']")
    return settings


def configure(**settings) -> None:
    """Set the shared executor's limits, e.g. from the `sandbox` config group; it is built on first use."""
    global _settings, _executor
    _settings, _executor = check_settings(**settings), None


def get_executor():
    global _executor
    if _executor is None:
        from rewards.sandbox.executor import Executor

        _executor = Executor(**_settings)
    return _executor
