"""`python -m wgc.cli`: the same as the `wgc` console script."""

from wgc.cli import main

main()
