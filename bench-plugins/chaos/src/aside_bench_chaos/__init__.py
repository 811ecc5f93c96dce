"""The chaos suite: one fault at a time under load."""
