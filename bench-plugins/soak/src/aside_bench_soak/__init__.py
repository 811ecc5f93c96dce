"""The soak: a steady load for a long time; every process's memory and file
descriptors sampled, and their growth judged."""
