"""Models and the hardware they run on: loading, LoRA, saving, precision and engines."""
