"""The cache tiers: the strategies over L1 (the worker's memory) and L2 (Redis,
with leases), L1's invalidations (the core's channel, or Redis's client
tracking), how a large value is stored, and the lab's test holds on a fill."""
