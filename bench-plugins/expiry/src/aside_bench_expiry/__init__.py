"""The expiry scenario: the hot set's reads held across the end of the
cache's TTL, once per way of handling an expiry. A plug-in of aside-bench:
`SCENARIO` is registered under the entry-point group `aside_bench.scenarios`."""
