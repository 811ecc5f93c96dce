"""The miss-ratio curve: a step's exact key stream replayed through libCacheSim's
eviction policies over a range of cache sizes, and the measured hit rates set
on those curves."""
