"""`dataset.curriculum` (README "Adaptive difficulty"): train rows are drawn when TRL fetches them, at that
moment's levels (tasks/leveled.py); the fixed eval adds `eval_per_level` problems per task and level, apart
from it and from each other, and training skips every eval problem by its hold-out key (`dataset.holdout`)."""

import logging
from dataclasses import dataclass
from typing import Any

from transformers import TrainerCallback
from transformers.trainer_callback import ExportableState

from grpo_recipes.train.data import build_eval_set, draw_distinct, to_row
from tasks import TaskSet
from tasks.difficulty import LevelController, VerdictRecorder, config_at, top_level
from tasks.leveled import LeveledTasks

log = logging.getLogger("grpo_recipes")

COLUMNS = ("prompt", "question", "answer", "task", "metadata", "level")


@dataclass(frozen=True)
class Curriculum:
    controller: LevelController  # the levels and the rolling windows
    problems: LeveledTasks  # the training problems, at the controller's levels
    recorder: VerdictRecorder  # RewardContext.on_verdicts: the verdicts since the last update
    fixed: list[str]  # tasks without a curriculum: their config as written throughout


def build_curriculum_datasets(dataset_cfg: dict[str, Any], eval_cfg: dict[str, Any]):
    from datasets import Dataset

    taskset, system, shots, eval_rows = build_eval_set(dataset_cfg, eval_cfg)
    settings = dataset_cfg["curriculum"]
    tops = {name: top for name in taskset.names if (top := top_level(name)) is not None}
    per_level, taken = settings["eval_per_level"], {taskset.key(r) for r in eval_rows}
    for i, name in enumerate(taskset.names):  # per-level eval sets, drawn as training problems are there
        if not per_level or name not in tops:
            continue
        spec = taskset.spec[name]
        for level in range(tops[name] + 1):
            config = config_at(name, level, spec["config"])
            at_level = TaskSet({name: {**spec, "config": config}}, holdout=taskset.holdout_setting)
            # seeds apart from the fixed eval's (seed + task index); none of its problems or another level's
            who = (f"task '{name}' at level {level}", "outside the fixed eval and the other levels' sets")
            seed = int(eval_cfg["seed"]) + 1000 * (i + 1) + level
            asked = "dataset.curriculum.eval_per_level"
            drawn = draw_distinct(at_level, per_level, seed, taken, asked, who, "lower eval.size")
            eval_rows += [{**to_row(e, system, shots), "eval_level": level} for e in drawn]
    controller = LevelController(
        tops, settings["start_level"], settings["raise_at"], settings["lower_at"], settings["window"]
    )
    size, seed = int(dataset_cfg["train_size"]), int(dataset_cfg["seed"])
    problems = LeveledTasks(taskset.spec, controller.levels, size, seed, exclude=taken, key=taskset.key)

    def rows(batch: dict[str, list]) -> dict[str, list]:
        drawn = [problems[int(i)] for i in batch["index"]]
        out = [{**to_row(e, system, shots), "level": e["level"]} for e in drawn]
        return {c: [r[c] for r in out] for c in COLUMNS}

    train = Dataset.from_dict({"index": list(range(len(problems)))}).with_transform(rows)
    fixed = [n for n in taskset.names if n not in tops]
    curriculum = Curriculum(controller, problems, VerdictRecorder(lambda: controller.levels), fixed)
    return taskset, train, eval_rows, curriculum


class CurriculumCallback(TrainerCallback, ExportableState):
    """After each step all ranks' verdicts move the levels (saved in trainer_state.json). Every rank runs the
    same update on all ranks' verdicts, so all draw the same problem for an index (a group may span ranks)."""

    def __init__(self, curriculum: Curriculum):
        self.curriculum = curriculum

    def on_train_begin(self, args, state, control, **kwargs):
        saved = (state.stateful_callbacks or {}).get(type(self).__name__)
        if state.global_step > 0 and isinstance(saved, dict):  # resumed: the checkpoint's trainer_state.json
            self.curriculum.controller.load_state(saved.get("attributes", {}).get("levels_and_windows", {}))
            for task, level in self.curriculum.controller.levels.items():
                self.curriculum.problems.set_level(task, level)
            log.info("curriculum levels restored at step %d: %s", state.global_step, self.describe())
        else:
            log.info("curriculum levels at the start: %s", self.describe())

    def on_step_end(self, args, state, control, **kwargs):
        from accelerate.utils import gather_object

        changed = self.curriculum.controller.observe(gather_object(self.curriculum.recorder.take()))
        for task, level in changed.items():
            self.curriculum.problems.set_level(task, level)
            log.info("curriculum: %s moves to level %d at step %d", task, level, state.global_step)

    def describe(self) -> str:
        c = self.curriculum
        text = ", ".join(f"{t} {lv}/{c.controller.top_levels[t]}" for t, lv in c.controller.levels.items())
        return text + (f" (fixed difficulty, no curriculum: {', '.join(c.fixed)})" if c.fixed else "")

    def state(self) -> dict:
        return {"args": {}, "attributes": {"levels_and_windows": self.curriculum.controller.state()}}
