"""`python -m tasks` lists every task; `python -m tasks NAME` shows its config keys and an example."""

import sys

from grpo_common.errors import ConfigError
from tasks import TaskSet, available_tasks, task_config_keys

if len(sys.argv) > 1:
    name = sys.argv[1]
    try:
        entry = TaskSet({name: {}}).sample(1, seed=0)[0]  # an unknown name: one line naming close ones
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
    print(f"{name}: config keys {task_config_keys(name)}")
    print(f"question: {entry['question']}\nanswer:   {entry['answer']}")
else:
    print("\n".join(available_tasks()))
