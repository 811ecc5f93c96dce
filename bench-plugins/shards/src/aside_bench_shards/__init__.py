"""aside-bench's shards tool: a run sent by several drivers, its shards merged from InfluxDB."""
