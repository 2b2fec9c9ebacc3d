"""One run, from prepared inputs to its files: runner (prepare, train, evaluate, store), training
loop and checkpoints, evaluation, epoch log, run files, provenance and re-evaluation."""
