#!/usr/bin/env bash
# The compose stack's secrets, made the first time: writes every one that .env
# (ignored by git) lacks or leaves empty, and keeps those already set. Run it
# before the first `docker compose up`; running it again changes nothing.
#   infra/compose-secrets.sh [ENV_FILE]    (default: .env beside docker-compose.yml)
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
env_file=${1:-$root/.env}
[ -e "$env_file" ] || cp "$root/.env.example" "$env_file"
chmod 600 "$env_file"

secret() { od -An -N24 -tx1 /dev/urandom | tr -d ' \n'; }

# PostgreSQL's and Redis's passwords, the core's token, the write token, Grafana's admin.
for name in ASIDE_PG_PASSWORD ASIDE_REDIS_PASSWORD CORE_TOKEN WRITE_TOKEN GRAFANA_ADMIN_PASSWORD; do
    if grep -Eq "^$name=.+" "$env_file"; then
        continue
    fi
    value=$(secret)
    if grep -Eq "^$name=" "$env_file"; then
        sed -i "s|^$name=.*|$name=$value|" "$env_file"
    else
        echo "$name=$value" >>"$env_file"
    fi
    echo "compose-secrets: $name made in $env_file"
done
