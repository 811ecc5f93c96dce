"""The tracks scenario: big cached values, an arm per way of caching them; a plug-in of
aside-bench (`SCENARIO`, entry-point group `aside_bench.scenarios`)."""
