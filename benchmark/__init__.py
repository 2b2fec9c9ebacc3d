"""protobench: benchmark harness for part-prototype image classifiers on frozen DINO trunks."""
