"""Measuring helpers that benchmarks, demos and speed checks use: interleaved timing, the BLAS kernel in use."""
