"""Benchmark: the plain lab loop against the trainer, to measure AMP's gain and the trainer's overhead."""
