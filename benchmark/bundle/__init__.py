"""Shareable run bundles: finished runs' result files (and, on request, their trained heads as
safetensors) in one folder and ``.tar.gz`` with a SHA-256 manifest and a Hugging Face model card;
a bundle reads as a runs directory and holds no code."""
