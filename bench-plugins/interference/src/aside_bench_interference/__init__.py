"""The interference scenario: CPU work beside cached reads; a plug-in of aside-bench
(`SCENARIO`, entry-point group `aside_bench.scenarios`)."""
