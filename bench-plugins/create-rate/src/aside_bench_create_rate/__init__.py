"""aside-bench's create-rate suite: the highest rate of keyed creates the core holds."""
