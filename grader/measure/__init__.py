"""Measuring, a low room: the one timing primitive, the BLAS kernel a figure ran on, what benchmark scripts share."""
