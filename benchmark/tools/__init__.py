"""Commands around runs: plan, perf, doctor, status, figures (explain) and the demo."""
