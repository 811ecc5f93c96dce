"""The event loop's side of a worker: gunicorn's worker class (`worker`), the
ASGI entry point (`asgi`, which wires every other room), the hot path, the
writes forwarded on the loop, and the worker's garbage collector."""
