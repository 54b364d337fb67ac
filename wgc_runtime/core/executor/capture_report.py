"""What building a rank's captured steps did (`CaptureReport`, from `CapturedSteps.build`)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class CaptureReport:
    """What `CapturedSteps.build` did: per unit ``walk:call node`` (and its form's label), its
    buckets and seconds; the units not captured with why; ``calls``: how many calls the units
    are forms of."""

    backend: str
    units: tuple[tuple[str, tuple[int, ...], float], ...] = ()
    skipped: tuple[tuple[str, str], ...] = ()
    seconds: float = 0.0
    calls: int = 0

    def summary(self) -> str:
        if not self.units:
            return f"no captured steps ({len(self.skipped)} capturable call(s) run eagerly)"
        buckets = sum(len(b) for _, b, _ in self.units)
        calls = self.calls or len(self.units)
        forms = f" in {len(self.units)} forms" if len(self.units) > calls else ""
        return (
            f"captured {calls} step(s){forms} x {buckets // len(self.units)} bucket(s) "
            f"({self.backend}) in {self.seconds:.2f} s"
        )
