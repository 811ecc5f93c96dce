"""The tracks scenario: big cached values (GPS tracks), one arm per way of
caching them. A plug-in of aside-bench: `SCENARIO` is registered under the
entry-point group `aside_bench.scenarios`."""
