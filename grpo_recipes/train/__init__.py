"""The training run: set-up, data, the trainer's extensions and callbacks."""
