"""The fixed evaluation (evaluator.py), when training runs it (callback.py), and how it generates."""
