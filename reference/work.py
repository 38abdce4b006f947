"""The counter of the work a reference.model.Model does (`Model.count_work`):
multiply-accumulates and bytes read, per piece. reference.model re-exports it,
so `from reference.model import Work` is the usual spelling."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from reference.checks import is_real


@dataclass
class Work:
    """Work a model did while this counter was active.

    macs: multiply-accumulates of every matmul, attention scores included.
    positions: per layer, the token positions pushed through its q/k/v projections.
    by_piece: macs split by piece ("qkv", "attention", "wo", "mlp", "router",
        "experts", "logits").

    What the pieces read from memory, in bytes of the arrays as they are held
    (a float16 weight counts 2 bytes a value); activations are not counted:
    weight_bytes: the weights read. Each matmul reads its whole weight matrix
        once, whatever the number of rows it multiplies (of an MoE block, the
        router and only the experts some token was routed to); each RMSNorm
        its gain; the embedding the rows of the distinct tokens looked up.
    cache_bytes: the keys and values each attention call reads, (Hkv, Tk, Dh)
        each: in a decode step, what a KV cache hauls for every layer.
    matmul_weights: values of the weight matrices the matmuls read, the ones
        a quantized model stores in fewer bits (see `weight_bytes_at`).
    bytes_by_piece: weight_bytes and cache_bytes split by piece: "embed" and
        "norm" (the embedding rows and norm gains), "attention" (the keys and
        values), and the matmuls' weight matrices under the pieces of by_piece.
    """

    macs: int = 0
    positions: dict[int, int] = field(default_factory=dict)
    by_piece: Counter = field(default_factory=Counter)
    weight_bytes: int = 0
    cache_bytes: int = 0
    matmul_weights: int = 0
    bytes_by_piece: Counter = field(default_factory=Counter)

    def add(self, piece: str, macs: int) -> None:
        self.macs += int(macs)
        self.by_piece[piece] += int(macs)

    def add_weight_read(self, piece: str, nbytes: int, matmul_weights: int = 0) -> None:
        """Count nbytes of weights read by piece, matmul_weights of them values of a matmul's weight matrix."""
        self.weight_bytes += int(nbytes)
        self.matmul_weights += int(matmul_weights)
        self.bytes_by_piece[piece] += int(nbytes)

    def add_cache_read(self, nbytes: int) -> None:
        """Count nbytes of keys and values read by attention."""
        self.cache_bytes += int(nbytes)
        self.bytes_by_piece["attention"] += int(nbytes)

    def weight_bytes_at(self, bits_per_weight: float) -> float:
        """weight_bytes had every matmul weight matrix been stored at
        bits_per_weight bits a value, scales included; the embedding rows and
        norm gains as they are (as quantize_model leaves them in float).

        32 is float32; 8.5 is llama.cpp's Q8_0 and 4.5 its Q4_0 (34 and 18
        bytes per block of 32 values along a matrix's input axis). The count
        is exact, whole bytes, when each matrix's input width is a multiple of
        32, which those formats require. A ValueError unless bits_per_weight is a finite number > 0.
        """
        if not is_real(bits_per_weight) or not 0 < bits_per_weight < float("inf"):
            raise ValueError(f"bits_per_weight must be a finite number > 0, got {bits_per_weight!r}")
        bits = float(bits_per_weight)  # a float16 width would overflow the product
        return self.bytes_by_piece["embed"] + self.bytes_by_piece["norm"] + self.matmul_weights * bits / 8
