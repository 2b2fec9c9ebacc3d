"""Fair tuning: a validation split carved from the training split, search spaces, one Optuna
study per tuning cell whose trials are ordinary runs scored on validation (docs/guides/tuning.md)."""
