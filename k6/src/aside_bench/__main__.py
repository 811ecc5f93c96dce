def main() -> None:
    raise SystemExit("not built yet")
