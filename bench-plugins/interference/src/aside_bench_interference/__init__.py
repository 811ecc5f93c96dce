"""The interference scenario: CPU work beside the cached reads, by engine
and kind. A plug-in of aside-bench: `SCENARIO` is registered under the
entry-point group `aside_bench.scenarios`."""
