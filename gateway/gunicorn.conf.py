"""gunicorn settings for the gateway; every value comes from aside_gateway.config.

Sizing (2 cores shared with PostgreSQL, Redis, the core and k6):
* workers = GATEWAY_WORKERS (2): one process per core. The GIL lets one thread
  of a process run Python at a time, so more processes than cores only adds
  context switches, and each process holds its own pools.
* threads = GATEWAY_THREADS (16), gthread worker: a request spends most of its
  time waiting on Redis or PostgreSQL with the GIL released, so a few threads
  per process keep the core busy; 16 leaves room for slow uncached reads
  (bounded separately by LAB_MAX_CONCURRENT_BYPASS) without starving hits.
* keepalive 30 s: k6 reuses connections; gunicorn's default of 2 s would close
  them between iterations at low request rates and add a TCP handshake.
  Idle keep-alive connections sit in the worker's poller, not in a thread.

Metrics: prometheus-client's multiprocess mode needs PROMETHEUS_MULTIPROC_DIR
set before it is imported and emptied at every start (stale files from a
previous run would be summed in). With more than one worker and no directory
given we make one under the temp dir.
"""

import os
import shutil
import sys
import tempfile

from aside_gateway.config import ConfigError, load_settings

try:
    _settings = load_settings(os.environ)
except ConfigError as exc:
    print(f"aside-gateway: {exc}", file=sys.stderr)
    sys.exit(2)

_multiproc_dir = _settings.prometheus_multiproc_dir
if _multiproc_dir is None and _settings.workers > 1:
    _multiproc_dir = tempfile.mkdtemp(prefix="aside-gateway-metrics-")
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = _multiproc_dir

wsgi_app = "aside_gateway.wsgi:app"
bind = [_settings.bind]
workers = _settings.workers
worker_class = "gthread"
threads = _settings.threads
keepalive = 30
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
        shutil.rmtree(_multiproc_dir, ignore_errors=True)
        os.makedirs(_multiproc_dir, exist_ok=True)


def child_exit(server, worker):
    if _multiproc_dir:
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(worker.pid, _multiproc_dir)
