"""The NumPy reference transformer, its tokenizer, sampling helpers, shipped
weights and the reference solutions of every kata."""

from reference.model import Config, Model, Work
from reference.sampling import generate_naive, sample_token

__all__ = ["Config", "Model", "Work", "generate_naive", "sample_token"]
