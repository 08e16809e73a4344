"""benchmarks/presets.py keeps one row per preset and seed across separate sittings."""

from benchmarks import presets


def _row(preset, seed, final):
    return {
        "preset": preset,
        "seed": seed,
        "task": "t",
        "metric": "accuracy",
        "baseline": 0.2,
        "final": final,
        "steps": 10,
        "reward": (None, None),
        "minutes": 5.0,
        "s_per_step": 20.0,
        "peak_rss_gib": 3.0,
    }


def test_record_keeps_the_newest_row_per_preset_and_seed(tmp_path, monkeypatch):
    monkeypatch.setattr(presets, "RECORD", tmp_path / "presets.json")
    monkeypatch.setattr(presets, "machine", lambda: "test machine")
    presets.record([_row("code", 0, 0.3), _row("digits", 0, 0.4)], "first")
    rows = presets.record([_row("digits", 0, 0.5), _row("digits", 1, 0.6)], "second")
    # PRESETS order (digits before code), then seed; digits seed 0 replaced by the second sitting
    assert [(r["preset"], r["seed"], r["final"], r["command"]) for r in rows] == [
        ("digits", 0, 0.5, "second"),
        ("digits", 1, 0.6, "second"),
        ("code", 0, 0.3, "first"),
    ]
    text = presets.table(rows)
    assert "| digits | t | 1 | accuracy | 20.0 % | 60.0 % | +40.0 |" in text
    assert presets.provenance(rows).count("\n") == 1  # two distinct commands
