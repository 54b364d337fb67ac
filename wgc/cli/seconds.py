"""`SECONDS`: the click type of every duration option (`--timeout`, `--ready-timeout`, ...).

`type=float` takes `nan` and `inf` (and `click.FloatRange` lets `nan` through, since no
comparison with it is true), and a deadline of `nan` seconds is never reached nor passed; so a
duration is a finite number above zero, or a usage error naming the option (exit 1).
"""

from __future__ import annotations

import math

import click


class Seconds(click.ParamType):
    name = "seconds"

    def convert(self, value, param, ctx) -> float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            number = float(value)
        else:
            try:
                number = float(str(value).strip())
            except ValueError:
                self.fail(f"`{value}` is not a number of seconds", param, ctx)
        if not math.isfinite(number) or number <= 0:
            self.fail(f"`{value}`: give a finite number of seconds above 0", param, ctx)
        return number


SECONDS = Seconds()
