"""What a grid will cost, computed and never printed (the CLI prints it: ``benchmark.cli``).

``workload`` (images, epochs, shapes and multiply-adds of a run), ``costmodel`` (the
FLOPs-and-bytes model of a GPU), ``costs`` (per-run seconds from ``perf`` measurements or the
model), ``caches`` (the token-cache entries a grid reads), ``plan`` (job arrays, reads and
GPU-hours of a grid) and ``perf`` (timings of runs side by side, measured in this process).
"""
