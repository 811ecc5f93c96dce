"""gunicorn settings for the gateway; every value comes from aside_gateway.config.settings.

Sizing (2 cores shared with PostgreSQL, Redis, the core and the load driver):
* workers = GATEWAY_WORKERS (2): one process per core. The GIL lets one thread
  of a process run Python at a time, so more processes than cores only adds
  context switches, and each process holds its own pools.
* worker class: uvicorn (uvloop + httptools) serving aside_gateway.front.asgi, whose
  async hot path answers cache hits and /healthz on the event loop and hands
  everything else to the Flask app in a thread pool (see
  docs/decisions/001-asgi-hot-path.md).
* threads = GATEWAY_THREADS (64): that Flask pool. A miss spends most of its
  time waiting on Redis or PostgreSQL with the GIL released, and on a cold
  cache many wait for their key's batched fill (see
  docs/decisions/004-64-flask-threads-and-a-duty-cycle-for-scans.md). Uncached reads stay bounded
  by LAB_MAX_CONCURRENT_BYPASS.
* keepalive = GATEWAY_KEEPALIVE_S (30 s): the load driver reuses connections;
  a short keep-alive would close them between iterations at low request rates
  and add a TCP handshake. The worker class passes the same value to uvicorn,
  with the head and body deadlines and the connection bound (front/worker.py).

Metrics: prometheus-client's multiprocess mode needs PROMETHEUS_MULTIPROC_DIR
set before it is imported and emptied at every start (stale files from a
previous run would be summed in). With more than one worker, or in production,
and no directory given we make one under the temp dir. Emptying never removes
a folder other than the native stack's own (aside_gateway.config.multiproc).

Production keeps /metrics off the public listener: the app answers it 404 and
this master serves the merged metrics of all workers on METRICS_BIND
(127.0.0.1:28009 by default) from a small thread of its own, started before
any worker, so a port already taken stops the gateway at once with one line.
"""

import os
import sys
import tempfile

from aside_gateway.config.multiproc import reset_multiproc_dir
from aside_gateway.config.settings import ConfigError, load_settings, split_host_port

try:
    _settings = load_settings(os.environ)
except ConfigError as exc:
    print(f"aside-gateway: {exc}", file=sys.stderr)
    sys.exit(2)

_multiproc_dir = _settings.prometheus_multiproc_dir
if _multiproc_dir is None and (_settings.workers > 1 or not _settings.metrics_on_app):
    _multiproc_dir = tempfile.mkdtemp(prefix="aside-gateway-metrics-")
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = _multiproc_dir

wsgi_app = "aside_gateway.front.asgi:app"
bind = [_settings.bind]
workers = _settings.workers
worker_class = "aside_gateway.front.worker.GatewayWorker"
keepalive = _settings.keepalive_s
timeout = 30
graceful_timeout = 10
preload_app = False  # pools and threads must be created in each worker, after the fork
accesslog = None  # per-request log lines cost CPU the benchmark needs
errorlog = "-"
loglevel = "info"
proc_name = "aside-gateway"
# Several gateways may run at once (tests, the lab stack); none needs the control socket.
control_socket_disable = True


def on_starting(server):
    if _multiproc_dir:
        reset_multiproc_dir(_multiproc_dir, os.environ.get("ASIDE_RUN_DIR"))
    if not _settings.metrics_on_app:
        _serve_metrics(_settings.metrics_bind)


def _serve_metrics(bind):
    from prometheus_client import CollectorRegistry, multiprocess, start_http_server

    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry, path=_multiproc_dir)
    host, port = split_host_port(bind)
    try:
        start_http_server(port, addr=host, registry=registry)
    except OSError as exc:
        print(f"aside-gateway: METRICS_BIND: cannot listen on {bind}: {exc}", file=sys.stderr)
        sys.exit(2)


def child_exit(server, worker):
    if _multiproc_dir:
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(worker.pid, _multiproc_dir)
