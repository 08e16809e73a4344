"""The fixed evaluation and how it generates."""
