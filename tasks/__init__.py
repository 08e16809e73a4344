"""Task sources: reasoning-gym's tasks and the project's own, in one registry."""

from tasks.registry import TaskSet, available_tasks, task_config_keys, validate_tasks

__all__ = ["TaskSet", "available_tasks", "task_config_keys", "validate_tasks"]
