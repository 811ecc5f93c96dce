"""The expiry scenario: reads across the cache TTL's end, per expiry mode; a plug-in
of aside-bench (`SCENARIO`, entry-point group `aside_bench.scenarios`)."""
