"""benchmarks/presets.py keeps one row per preset and seed across separate sittings."""

from benchmarks import presets


def _row(preset, seed, final):
    return {
        "preset": preset,
        "seed": seed,
        "task": "t",
        "greedy": (0.2, final),
        "pass_k": ("pass@1", 0.1, 0.3) if preset == "code" else None,
        "transfer": (0.1, 0.25),
        "tool_use": (0.0, 1.0) if preset == "digits_tools" else (None, None),
        "chance": 0.05,
        "cut_off": (0.5, 0.0),
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
    assert [(r["preset"], r["seed"], r["greedy"][1], r["command"]) for r in rows] == [
        ("digits", 0, 0.5, "second"),
        ("digits", 1, 0.6, "second"),
        ("code", 0, 0.3, "first"),
    ]
    text = presets.table(rows)
    # greedy accuracy first, pass@k beside it only where the preset samples, then transfer, tool use (only
    # with tools), chance, cut-offs
    assert (
        "| digits | t | 1 | **20.0 % -> 60.0 %** (+40.0) |  | 10.0 % -> 25.0 % |  | 5.0 % | 50.0 % -> 0.0 % |"
        in text
    )
    tools = presets.table([_row("digits_tools", 0, 1.0)])
    assert "| **20.0 % -> 100.0 %** (+80.0) |  | 10.0 % -> 25.0 % | 0.0 % -> 100.0 % | 5.0 % |" in tools
    assert "| code | t | 0 | **20.0 % -> 30.0 %** (+10.0) | pass@1 10.0 % -> 30.0 % |" in text
    assert presets.provenance(rows).count("\n") == 1  # two distinct commands
