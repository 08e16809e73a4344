import json

from grpo_recipes.sweep import summarize_sweep


def fake_job(root, name, overrides, accs, finished=True):
    job = root / name
    (job / "eval_results").mkdir(parents=True)
    (job / "config.yaml").write_text("seed: 0\n")
    (job / "overrides.yaml").write_text("".join(f"- {o}\n" for o in overrides))
    for step, acc in accs.items():
        (job / "eval_results" / f"eval_step_{step}.json").write_text(
            json.dumps({"step": step, "metrics": {"accuracy": acc}})
        )
    if finished:
        (job / "train_results.json").write_text("{}")


def test_summary_ranks_jobs_by_latest_accuracy_and_handles_partial_sweeps(tmp_path):
    fake_job(tmp_path, "0", ["output_root=x", "learning_rate=1e-6"], {0: 0.2, 40: 0.3})
    fake_job(tmp_path, "1", ["output_root=x", "learning_rate=1e-5"], {0: 0.2, 40: 0.8})
    fake_job(tmp_path, "2", ["output_root=x", "learning_rate=1e-4"], {0: 0.2, 20: 0.5}, finished=False)
    fake_job(tmp_path, "3", ["output_root=x", "learning_rate=1e-3"], {}, finished=False)
    summary = summarize_sweep(tmp_path).read_text()
    rows = [line for line in summary.splitlines() if line.startswith("| ") and line[2].isdigit()]
    assert [r.split("|")[2].strip() for r in rows] == ["1", "2", "0", "3"]
    assert "`learning_rate=1e-5` | 80.0% | 40 | 20.0% | +60.0 pts | finished" in rows[0]
    assert "running or stopped" in rows[1] and "no eval yet" in rows[3]
    assert "output_root" not in summary  # overrides shared by every job are not a sweep parameter
    assert (tmp_path / "summary.png").read_bytes()[:4] == b"\x89PNG"
