"""The runtime's processes: the `launcher` (starts and watches everything), the `conductor`
process (woken only by messages and its `timers`) and one `worker` process per rank, and what
they share (`common`)."""
