"""Did-you-mean suggestions: the one place wgc ranks known names against a misspelt one.

Every "did you mean `x`?" that the front end, the placement loader and the CLI print is chosen
here, so they all agree on what counts as close and on how ties break. Closeness is difflib's
ratio (``SequenceMatcher(None, candidate, word)``, as ``difflib.get_close_matches`` scores it)
and a candidate must score at least `CUTOFF`. Candidates are deduplicated and ranked by score,
ties in sorted order, so a suggestion never depends on the order a caller collected names in.
"""

from __future__ import annotations

from collections.abc import Iterable
from difflib import SequenceMatcher

CUTOFF = 0.6


def ranked(word: str, candidates: Iterable[str], n: int = 3, cutoff: float = CUTOFF) -> list[str]:
    """Up to ``n`` candidates close to ``word``, best first (ties in sorted order)."""
    matcher = SequenceMatcher(None, "", word)  # caches the analysis of `word` (its seq2)
    scored = []
    for candidate in sorted(set(candidates)):
        matcher.set_seq1(candidate)
        score = matcher.ratio()
        if score >= cutoff:
            scored.append((-score, candidate))
    return [candidate for _, candidate in sorted(scored)[:n]]


def closest(word: str, candidates: Iterable[str], cutoff: float = CUTOFF) -> str | None:
    """The candidate closest to ``word``, or None when none is close enough."""
    best = ranked(word, candidates, n=1, cutoff=cutoff)
    return best[0] if best else None


def did_you_mean(word: str, candidates: Iterable[str], end: str = "") -> str:
    """``did you mean `x`?`` followed by ``end`` for the closest candidate, or ``""``."""
    best = closest(word, candidates)
    return f"did you mean `{best}`?{end}" if best is not None else ""
