"""The sweep: one step after another, each prepared (cache warmed or flushed,
gateway settings), driven, measured (Prometheus, the gateway's /proc) and
collected into a StepResult; the tracks' sweep beside it."""
