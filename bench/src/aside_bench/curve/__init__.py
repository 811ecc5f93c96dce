"""The miss-ratio curve: key streams replayed through libCacheSim, measured points set on them."""
