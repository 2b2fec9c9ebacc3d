"""The values a run's ``precision`` takes, named where reading them loads no torch: the grid
checks (benchmark/config.py) read them here, methods/common/precision.py computes each."""

PRECISIONS = ("fp32", "tf32", "bf16")
