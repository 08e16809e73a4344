"""A wrong value never reaches the trainer, and a resume never changes what a run was.

Each mistake is run as a user would (train_grpo.py in a subprocess): exit code 2, one line naming
the key, no traceback, nothing created. Then the run directory rules: a finished run's files stay
byte-identical under every resume attempt, and a stopped run resumes as itself from the command
it printed.
"""

import hashlib
import json
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT, read_jsonl, run_train

CONFIG = ROOT / "config"

TINY = ["model=tiny_random", "eval.size=4", "grpo.max_completion_length=8"]

# (category, overrides, what the one line must say)
CASES = [
    ("type", ["learning_rate=abc"], "learning_rate=abc: expected a number > 0"),
    ("type", ["grpo.num_generations=1.5"], "grpo.num_generations=1.5: expected an integer >= 2"),
    ("type", ["eval.do_sample=maybe"], "eval.do_sample=maybe: expected true or false"),
    ("type", ["seed=x"], "seed=x: expected an integer"),
    ("type", ["dataset.rewards.accuracy.weight=abc"], "dataset.rewards.accuracy: expected {weight: <number>"),
    ("range", ["learning_rate=-1"], "learning_rate=-1: expected a number > 0"),
    ("range", ["learning_rate=inf"], "learning_rate=inf: expected a number > 0"),
    ("range", ["run_name=../x"], "run_name=../x: expected a non-empty name without '/'"),
    ("range", ["max_steps=0"], "max_steps=0: expected an integer >= 1"),
    ("range", ["grpo.beta=-0.1"], "grpo.beta=-0.1: expected a number >= 0"),
    ("range", ["grpo.top_p=1.5"], "grpo.top_p=1.5: expected a number > 0 and <= 1"),
    ("range", ["eval.size=0"], "eval.size=0: expected an integer >= 1"),
    ("range", ["sandbox.timeout=0"], "sandbox.timeout=0: expected a number > 0"),
    ("range", ["model.lora.dropout=1"], "model.lora.dropout=1: expected a number >= 0 and < 1"),
    ("cross-field", ["eval.batch_size=0"], "eval.batch_size=0: expected an integer >= 1"),
    ("cross-field", ["eval.every_n_steps=-1"], "eval.every_n_steps=-1: expected an integer >= 0"),
    ("cross-field", ["grpo.per_device_train_batch_size=12"], "not divisible by grpo.num_generations (8)"),
    ("cross-field", ["grpo.num_generations=3"], "= 16 completions per generation batch is not divisible"),
    ("cross-field", ["eval.seed=1"], "eval.seed=1: must differ from dataset.seed"),
    (
        "cross-field",
        ["dataset.train_size=1"],
        "dataset.train_size=1: each generation draws 2 distinct prompts",
    ),
    (
        "cross-field",
        ["grpo.eval_strategy=steps"],
        "grpo.eval_strategy=steps: the recipe runs its own fixed eval",
    ),
    ("choice", ["resume=maybe"], "resume=maybe: expected one of: true, false, auto"),
    ("choice", ["model.dtype=fp64"], "model.dtype=fp64: expected one of: auto, float32"),
    ("choice", ["sandbox.isolation=none"], "sandbox.isolation=none: expected one of: full, basic"),
    ("group option", ["grpo=nosuch"], "grpo=nosuch: no such option. Options: bnpo, cispo, dapo"),
    (
        "group option",
        ["model=smollm2_13m"],
        "model=smollm2_13m: no such option. Did you mean: smollm2_135m, ",
    ),
    (
        "group option",
        ["experiment=digit"],
        "experiment=digit: no such option. Did you mean: digits, digits_tools, digits_source?",
    ),
    ("group option", ["logger=wand"], "logger=wand: no such option. Did you mean: wandb?"),
    ("group option", ["dataset=arithmatic"], "dataset=arithmatic: no such option. Did you mean: arithmetic?"),
    ("group option", ["hydra/launcher=slrum"], "hydra/launcher=slrum: no such option. Did you mean: slurm?"),
    # the declared defaults the group's files build on (_schema/<group>) are not options of the group
    ("group option", ["tools=base"], "tools=base: no such option. Options: calculator, none, python"),
    ("group option", ["dataset=base"], "dataset=base: no such option. Options: arithmetic, code_file, gsm8k"),
    (
        "group option",
        ["accelerate=zero3"],
        "accelerate: unknown key. config/accelerate/ holds accelerate's own config files: accelerate launch",
    ),
    ("missing", ["model=custom"], "model.path: not set; it takes a hub id, a local dir, embedded:<name>"),
    ("unknown key", ["max_step=3"], "max_step: unknown key. Did you mean: max_steps?"),
    ("unknown key", ["eval.sizes=3"], "eval.sizes: unknown key. Did you mean: size?"),
    ("unknown key", ["sandbox.workerz=2"], "sandbox.workerz: unknown key. Did you mean: workers?"),
    # a declared key under a section set to null is not an unknown one: Hydra's own line, as it always was
    ("unknown key", ["model.lora=null", "model.lora.r=4"], "Could not override 'model.lora.r'"),
    ("unknown key", ["seed.x=1"], "seed.x: seed is a value, not a section; set seed=<value>"),
    ("unknown key", ["eval.pass_k.k.x=1"], "eval.pass_k.k.x: eval.pass_k.k is a value, not a section"),
    ("unknown key", ["hydra.job.chdirr=true"], "Could not override 'hydra.job.chdirr'"),
    ("registry", ["dataset.tasks.game_of_24.weight=1"], "unknown task 'game_of_24'. Did you mean: puzzle24"),
    ("registry", ["dataset.tasks.sum_digits.config.num_premises=2"], "unknown key 'num_premises'"),
    ("registry", ["dataset.rewards.acuracy.weight=1"], "unknown reward 'acuracy'. Did you mean: accuracy"),
    ("registry", ["eval.transfer.more={task: nope}"], "eval.transfer.more.task: unknown task 'nope'."),
    (
        "registry",
        ["dataset.prompt_format=xml"],
        "dataset.prompt_format 'xml' is not one of: plain, answer_tag, think",
    ),
    ("registry", ["model=/no/such/model"], "model.path '/no/such/model' does not exist"),
    ("unknown key", ["evall.size=3"], "evall: unknown key. Did you mean: eval, eval_only"),
    ("unknown key", ["++max_step=3"], "max_step: unknown key. Did you mean: max_steps?"),
    ("unknown key", ["+dataset.train_sise=5"], "dataset.train_sise: unknown key. Did you mean: train_size?"),
    ("unknown key", ["~eval.seed"], "eval.seed: missing; expected an integer >= 0"),
    ("unknown key", ["output_dir=/tmp/elsewhere"], "output_dir is the run directory Hydra makes"),
    ("sweep", ["-m", "seed=1,x"], "seed=x: expected an integer"),
    ("sweep", ["-m", "learning_rate=1e-5,0"], "learning_rate=0: expected a number > 0"),
    (
        "sweep",
        ["-m", "grpo.num_generations=4,6", "grpo.per_device_train_batch_size=12,8"],
        "grpo.per_device_train_batch_size (8) x processes (1) x steps_per_generation (1) = 8 completions",
    ),
    ("sweep", ["max_steps=10,20"], "max_steps=10,20: several values are a sweep; add -m"),
    ("flags", ["--config-path", "config", "learning_rate=abc"], "learning_rate=abc: expected a number > 0"),
    ("resume", ["resume=true", "run_name=never_ran"], "resume=true: there is no run in"),
]


def _files(root: Path) -> dict[str, str]:
    """Every file under root with a hash of its bytes."""
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


@pytest.mark.parametrize("category,overrides,message", CASES, ids=[" ".join(c[1]) for c in CASES])
def test_a_mistake_is_one_line_exit_2_and_creates_nothing(tmp_path, category, overrides, message):
    out = tmp_path / "outputs"  # does not exist: the command must not create it
    tiny = [
        a for a in TINY if not (a.startswith("model=") and any(o.startswith("model=") for o in overrides))
    ]
    proc = run_train(*tiny, f"output_root={out}", *overrides, cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    assert message in lines[0]
    assert "Traceback" not in proc.stdout + proc.stderr
    assert list(tmp_path.iterdir()) == []  # no run dir, no output root, nothing in the working dir


def test_the_check_imports_nothing_heavy(tmp_path):
    """The value check runs before torch, TRL or reasoning-gym are imported: a mistake costs a second."""
    proc = run_train(
        *TINY, f"output_root={tmp_path}", "learning_rate=abc", env={"PYTHONPROFILEIMPORTTIME": "1"}
    )
    assert proc.returncode == 2
    imported = {
        line.split("|")[-1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")
    }
    assert "hydra" in imported and not imported & {"torch", "trl", "transformers", "reasoning_gym"}


def test_full_error_shows_the_traceback(tmp_path):
    proc = run_train(*TINY, f"output_root={tmp_path}", "max_steps=0", env={"HYDRA_FULL_ERROR": "1"})
    assert proc.returncode != 0 and "Traceback" in proc.stderr and "max_steps=0" in proc.stderr


def test_readme_common_mistakes_are_what_the_commands_print(tmp_path):
    """Each `$ python train_grpo.py ...` line of the README's "Common mistakes" gives the error shown below
    it."""
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Common mistakes", 1)[1].split("\n## ", 1)[0]
    examples = re.findall(r"^\$ python train_grpo\.py (.+)\n(error: .+)$", section, re.MULTILINE)
    assert len(examples) >= 6
    for args, error in examples:
        proc = run_train(*shlex.split(args), f"output_root={tmp_path / 'outputs'}", cwd=tmp_path)
        assert proc.returncode == 2 and proc.stderr.strip() == error, (args, proc.stderr)
    assert list(tmp_path.iterdir()) == []


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("finished")
    proc = run_train(
        *TINY,
        f"output_root={root}",
        "dataset=sum_digits",
        "run_name=done",
        "max_steps=2",
        "grpo.save_steps=1",
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return root


@pytest.mark.slow
@pytest.mark.parametrize(
    "args,code,message",
    [
        ([], 2, "already holds a run: pass resume=true to continue it, or a new run_name=..."),
        (["dataset=sum_digits", "max_steps=2"], 2, "already holds a run"),
        (["resume=true"], 0, "already finished at step 2: nothing to do, and nothing was changed"),
        (["resume=auto"], 0, "already finished at step 2"),
        (
            ["resume=true", "max_steps=5"],
            2,
            "is a finished run (step 2); a finished run is never trained or rewritten",
        ),
        (["resume=true", "dataset=arithmetic"], 2, "dataset.name (sum_digits -> arithmetic)"),
        (
            ["resume=true", "learning_rate=1e-3"],
            2,
            "learning_rate (1e-05 -> 0.001) would change what the run learns",
        ),
        (["resume=maybe"], 2, "resume=maybe: expected one of: true, false, auto"),
    ],
)
def test_a_finished_run_is_never_changed(finished_run, args, code, message):
    before = _files(finished_run)
    proc = run_train(f"output_root={finished_run}", "run_name=done", *args)
    assert proc.returncode == code, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert message in proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    assert _files(finished_run) == before  # byte-identical, and no file added


@pytest.mark.slow
def test_a_finished_sweep_is_never_changed(tmp_path):
    sweep = [
        "-m",
        "seed=1,2",
        "run_name=sw",
        f"output_root={tmp_path}",
        "max_steps=1",
        "grpo.save_strategy=no",
    ]
    done = run_train(*TINY, *sweep)
    assert done.returncode == 0, done.stderr[-2000:]
    before = _files(tmp_path)
    again = run_train(*TINY, *sweep, "resume=auto")  # a requeue of the whole sweep
    assert again.returncode == 0 and "every job of this sweep already finished" in again.stdout
    refused = run_train(*TINY, *sweep)
    assert refused.returncode == 2 and "sw-sweep/0' already holds a run" in refused.stderr
    longer = run_train(*TINY, *sweep[:-2], "max_steps=3", "grpo.save_strategy=no", "resume=true")
    assert longer.returncode == 2 and "is a finished run (step 1)" in longer.stderr
    assert _files(tmp_path) == before  # multirun.yaml included: Hydra never started


@pytest.mark.slow
def test_a_stopped_run_resumes_as_itself_from_the_printed_command(tmp_path):
    """A non-default run (sum_digits, its own reward and eval set) stopped by SIGTERM; the printed command,
    run exactly as printed, continues that run: same task, rewards and eval problems, same config.yaml."""
    args = [
        sys.executable,
        str(ROOT / "train_grpo.py"),
        *TINY,
        f"output_root={tmp_path}",
        "run_name=digits",
        "experiment=digits",
        "max_steps=200",
        "eval.every_n_steps=0",
        "grpo.save_steps=5",
    ]
    proc = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    run = tmp_path / "digits"
    deadline = time.time() + 180
    while time.time() < deadline and not list(run.glob("checkpoint-*")):
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 143, out[-2000:]
    (printed,) = re.findall(r"Continue with: (python train_grpo\.py .+)$", out, re.MULTILINE)
    assert "experiment" not in printed and "dataset" not in printed  # the run's own overrides are read back
    config_before = (run / "config.yaml").read_text()
    first_entry = (run / "overrides.yaml").read_text()
    stopped_at = max(r["step"] for r in read_jsonl(run / "metrics.jsonl") if r["split"] == "train")

    command = shlex.split(printed)[2:]  # as printed, after "python train_grpo.py"
    short = run_train(*command, f"max_steps={stopped_at}")  # nothing left to train after the checkpoint
    assert (
        short.returncode == 2
        and f"continues from checkpoint-{stopped_at}, so max_steps must be above" in short.stderr
    )
    resumed = run_train(*command, "max_steps=" + str(stopped_at + 3))  # a shorter run than planned is allowed
    assert resumed.returncode == 0, resumed.stdout[-2000:] + resumed.stderr[-2000:]
    assert (run / "config.yaml").read_text() == config_before  # written once, when the run started
    lines = read_jsonl(run / "metrics.jsonl")
    train = [r for r in lines if r["split"] == "train" and "train/reward" in r]
    assert [r["step"] for r in train] == list(range(1, stopped_at + 4))
    for r in train:  # the digits recipe: sum_digits with the signed accuracy reward only
        assert "train/accuracy/sum_digits" in r and "train/rewards/format/mean" not in r
        assert r["train/rewards/accuracy/mean"] == pytest.approx(2 * r["train/accuracy/sum_digits"] - 1)
    first = json.loads((run / "eval_results/eval_step_0.json").read_text())
    final = json.loads((run / f"eval_results/eval_step_{stopped_at + 3}.json").read_text())
    assert {e["task"] for e in final["examples"]} == {"sum_digits"}
    assert [e["question"] for e in first["examples"]] == [e["question"] for e in final["examples"]]
    entries = (run / "overrides.yaml").read_text()
    assert entries.startswith(first_entry)  # the first entry is kept; the resume is a new one
    assert f"max_steps={stopped_at + 3}" in entries.split(first_entry, 1)[1] and "resume: true" in entries


# Fields whose rules are TRL's: the check builds GRPOConfig (importing TRL takes seconds) and turns its
# error into the same one line; choices TRL checks only inside the trainer are in our table instead.
TRL_CASES = [
    (["grpo.shuffle_dataset=maybe"], "grpo.shuffle_dataset=maybe: expected bool | None (GRPOConfig's type)"),
    (
        ["grpo.log_completions_hub_repo=me/completions"],
        (
            "grpo.log_completions_hub_repo=me/completions: log_completions_hub_repo is set, but "
            "log_completions "
            "is False"
        ),
    ),
    (["grpo.lr_scheduler_type=nosuch"], "grpo.lr_scheduler_type=nosuch: nosuch is not a valid SchedulerType"),
    (
        ["grpo.generation_batch_size=24"],
        (
            "grpo.generation_batch_size=24: generation_batch_size (24) must be divisible by the global batch "
            "size (16)"
        ),
    ),
    (["report_to=wandbb"], "report_to=wandbb: wandbb is not supported, only"),
    (
        ["grpo.scale_rewards=maybe"],
        "grpo.scale_rewards=maybe: expected one of: group, batch, none, true, false",
    ),
    (["grpo.loss_type=nosuch"], "grpo.loss_type=nosuch: expected one of: grpo, dr_grpo, dapo, bnpo"),
    (["grpo.max_prompt_length=64"], "grpo.max_prompt_length: not a GRPOConfig field of the installed TRL"),
    (["grpo.max_steps=3"], "grpo.max_steps is a top-level knob here: set `max_steps=...`"),
    (["use_vllm=true"], "use_vllm=true needs a CUDA GPU"),
]


@pytest.mark.parametrize("overrides,message", TRL_CASES, ids=[" ".join(c[0]) for c in TRL_CASES])
def test_trl_rules_give_the_same_one_line(tmp_path, monkeypatch, capsys, overrides, message):
    """In-process, through the same entry train_grpo.py calls (TRL's import is paid once, not per case);
    the next test runs one of them as a user would."""
    from grpo_recipes.config.cli import rewrite_argv
    from grpo_recipes.config.preflight import check_command_line

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)
    argv = ["train_grpo.py", *TINY, f"output_root={tmp_path / 'outputs'}", *overrides]
    with pytest.raises(SystemExit) as stop:
        check_command_line(rewrite_argv(argv, CONFIG), CONFIG)
    assert stop.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], lines
    assert list(tmp_path.iterdir()) == []


def test_a_trl_rule_mistake_from_the_command_line(tmp_path):
    proc = run_train(*TINY, f"output_root={tmp_path / 'outputs'}", "grpo.loss_type=nosuch", cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    message = "grpo.loss_type=nosuch: expected one of: grpo, dr_grpo, dapo, bnpo"
    assert len(lines) == 1 and message in lines[0], proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr and list(tmp_path.iterdir()) == []


def test_a_config_path_of_several_parts_still_names_the_unknown_key(tmp_path, monkeypatch, capsys):
    """--config-path is read relative to the script's directory, once: the unknown-key message composes the
    config again from the same place."""
    import shutil

    from grpo_recipes.config.preflight import check_command_line

    shutil.copytree(CONFIG, tmp_path / "a" / "b")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)
    with pytest.raises(SystemExit) as stop:
        check_command_line(["train_grpo.py", "--config-path", "a/b", "evall.size=3"], tmp_path / "config")
    assert stop.value.code == 2
    assert "evall: unknown key. Did you mean: eval" in capsys.readouterr().err
