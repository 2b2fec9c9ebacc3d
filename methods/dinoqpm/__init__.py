"""DINO-QPM (docs/protocol/dinoqpm.md): the head (model.py), its loss (losses.py) and the
feature selection and assignment program (assignment.py)."""
