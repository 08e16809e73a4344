"""What a run writes: logs, metrics, the report, sweep summaries and searches."""
