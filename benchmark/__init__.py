"""protobench: benchmark harness for part-prototype image classifiers on frozen DINO trunks."""
import os

#: cuBLAS's deterministic workspace (``deterministic = true``, docs/guides/gpu.md). cuBLAS reads
#: CUBLAS_WORKSPACE_CONFIG once, when it starts in the process, so it is set here, at import,
#: before anything of the suite touches CUDA (a value set by the user is kept).
CUBLAS_WORKSPACE = ":4096:8"
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", CUBLAS_WORKSPACE)
