"""Writes the ConfigMap that carries the seeder's key files to the load pods.

usage: python data-manifest.py DATA_DIR CONFIGMAP_NAME OUT_FILE

The seed Job runs it after aside-seed; kubectl then applies OUT_FILE to the
ConfigMap the chart made (empty), which the load Job mounts as DATA_DIR.
seed_meta.json is written last by the seeder: without it the other files may
not match the table, and nothing is published.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

META_FILE = "seed_meta.json"


def manifest(data_dir: Path, name: str) -> dict[str, object]:
    files = {path.name: path.read_text() for path in sorted(data_dir.glob("*.json"))}
    if META_FILE not in files:
        raise SystemExit(f"data-manifest: no {META_FILE} in {data_dir}; nothing published")
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": files}


def main(argv: list[str]) -> None:
    if len(argv) != 3:
        raise SystemExit("usage: data-manifest.py DATA_DIR CONFIGMAP_NAME OUT_FILE")
    data_dir, name, out = Path(argv[0]), argv[1], Path(argv[2])
    out.write_text(json.dumps(manifest(data_dir, name)))


if __name__ == "__main__":
    main(sys.argv[1:])
