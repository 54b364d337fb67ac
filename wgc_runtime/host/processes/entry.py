"""The spawn targets of the launcher's children, importing nothing until they run.

multiprocessing pickles a spawn target by its module and name, so the launcher imports that
module to start a child. The real mains (`conductor_main`, `worker_main`) import the cores, the
arena and torch; these trampolines import them only in the child, which keeps the launcher free
of torch.
"""

from __future__ import annotations

from typing import Any


def conductor(boot: dict[str, Any]) -> None:
    from wgc_runtime.host.processes.conductor_main import conductor_main

    conductor_main(boot)


def worker(boot: dict[str, Any]) -> None:
    from wgc_runtime.host.processes.worker_main import worker_main

    worker_main(boot)
