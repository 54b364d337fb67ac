"""The runtime's processes: the `launcher` (starts and watches everything), the `conductor`
process and one `worker` process per rank, and what they share (`common`)."""
