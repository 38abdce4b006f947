"""The one seed scheme: every grading seed that is not the standard one.

The standard seed (0) draws the examples everyone gets by default. A seed of
one's own (a student's in a class, a submitter's on Gradescope) is derived
from a key and an identity with HMAC-SHA256, so it is the same on every
regrade, differs between identities, and cannot be guessed without the key;
an interview's is drawn at random. Neither is ever 0: a derived or drawn seed
never hands out the standard examples by accident.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

STANDARD = 0  # the examples `kata grade` draws unless told otherwise
SPAN = 2**31 - 1  # own seeds lie in [1, SPAN]


def derived(key: str, identity: str) -> int:
    """identity's own seed under key: 1 + HMAC-SHA256(key, identity) mod SPAN."""
    digest = hmac.new(key.encode(), identity.encode(), hashlib.sha256).digest()
    return 1 + int.from_bytes(digest[:8], "big") % SPAN


def drawn() -> int:
    """A seed drawn at random from [1, SPAN]."""
    return 1 + secrets.randbelow(SPAN)
