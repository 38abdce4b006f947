"""What several moe modules share: the tolerances against the float64 formulas, and whether a
call refuses its input.
"""

from __future__ import annotations

PROB_TOL = 1e-5  # probabilities and gate weights against float64 formulas
LOSS_RTOL = 1e-5  # the losses against their float64 formulas


def _rejects(call) -> bool:
    """True if call() raises ValueError; any other exception propagates."""
    try:
        call()
    except ValueError:
        return True
    return False
