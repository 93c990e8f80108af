#!/usr/bin/env bash
# The machine's own services the tests use, on loopback:
#   Redis       127.0.0.1:6379
#   PostgreSQL  127.0.0.1:5432, trust auth, database `test`
#
# Usage: scripts/services.sh check
#   Checks each answers; starts the one that does not (with the machine's own
#   start command), waits for it, fails loudly with its log tail otherwise.
#   Prints env lines for the tests on stdout (progress goes to stderr).
#
# Environment (optional):
#   SQS_CLAIM_SERVICES_TIMEOUT  seconds to wait for each service (default 30)
set -euo pipefail

readonly REDIS_HOST=127.0.0.1 REDIS_PORT=6379
readonly PG_HOST=127.0.0.1 PG_PORT=5432 PG_USER=postgres PG_DB=test
readonly REDIS_LOG=/var/log/redis/ci.log
TIMEOUT="${SQS_CLAIM_SERVICES_TIMEOUT:-30}"

log() { printf 'services: %s\n' "$*" >&2; }
die() { printf 'services: ERROR: %s\n' "$*" >&2; exit 1; }
have() { command -v "$1" >/dev/null 2>&1; }

[[ "$TIMEOUT" =~ ^[0-9]+$ ]] || die "SQS_CLAIM_SERVICES_TIMEOUT must be a number, got '$TIMEOUT'"

# ------------------------------------------------------------------- Redis

redis_ok() {
    [[ "$(redis-cli -h "$REDIS_HOST" -p "$REDIS_PORT" ping 2>/dev/null)" == PONG ]]
}

start_redis() {
    log "redis: not answering on $REDIS_HOST:$REDIS_PORT, starting it"
    mkdir -p /var/lib/redis /var/log/redis
    redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no \
        --dir /var/lib/redis --logfile /var/log/redis/ci.log >&2 ||
        log "redis: redis-server exited non-zero (waiting anyway)"
}

ensure_redis() {
    if ! have redis-server || ! have redis-cli; then
        die "redis-server/redis-cli not found (Debian package redis-server)"
    fi
    if redis_ok; then
        log "redis: answering on $REDIS_HOST:$REDIS_PORT"
        return 0
    fi
    start_redis
    local deadline=$((SECONDS + TIMEOUT))
    until redis_ok; do
        ((SECONDS < deadline)) ||
            die "redis did not answer PING on $REDIS_HOST:$REDIS_PORT within ${TIMEOUT}s; last lines of $REDIS_LOG:"$'\n'"$(tail -n 30 "$REDIS_LOG" 2>/dev/null)"
        sleep 0.2
    done
    log "redis: started, answering on $REDIS_HOST:$REDIS_PORT"
}

# -------------------------------------------------------------- PostgreSQL

pg_ready() {
    pg_isready -q -h "$PG_HOST" -p "$PG_PORT" -t 2
}

# The tests log in without a password (trust auth) to database `test`.
pg_query() {
    psql -X -w -h "$PG_HOST" -p "$PG_PORT" -U "$PG_USER" -d "$1" -tAc "$2"
}

pg_log_tail() {
    local f
    for f in /var/log/postgresql/postgresql-*-main.log; do
        [[ -f "$f" ]] && { echo "last lines of $f:"; tail -n 30 "$f"; }
    done
}

start_pg() {
    log "postgresql: not answering on $PG_HOST:$PG_PORT, starting it"
    [[ -d /etc/postgresql ]] || die "no /etc/postgresql: PostgreSQL is not installed (Debian package postgresql)"
    # pg_ctlcluster fails when the cluster is already running but not yet accepting: wait anyway.
    # shellcheck disable=SC2046 # the machine's start command, word-split on purpose
    pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start >&2 ||
        log "postgresql: pg_ctlcluster exited non-zero (waiting anyway)"
}

ensure_pg() {
    if ! have pg_isready || ! have psql || ! have pg_ctlcluster; then
        die "pg_isready/psql/pg_ctlcluster not found (Debian packages postgresql, postgresql-client)"
    fi
    if pg_ready; then
        log "postgresql: accepting connections on $PG_HOST:$PG_PORT"
    else
        start_pg
        local deadline=$((SECONDS + TIMEOUT))
        until pg_ready; do
            ((SECONDS < deadline)) ||
                die "postgresql not ready on $PG_HOST:$PG_PORT within ${TIMEOUT}s"$'\n'"$(pg_log_tail)"
            sleep 0.3
        done
        log "postgresql: started, accepting connections on $PG_HOST:$PG_PORT"
    fi
    local err
    if ! err="$(pg_query "$PG_DB" 'select 1' 2>&1)"; then
        if [[ "$err" == *"does not exist"* ]]; then
            log "postgresql: creating database $PG_DB"
            pg_query postgres "create database $PG_DB" >/dev/null ||
                die "cannot create database $PG_DB on $PG_HOST:$PG_PORT"
        else
            die "cannot log in as $PG_USER to database $PG_DB on $PG_HOST:$PG_PORT without a password (trust auth expected): $err"
        fi
    fi
    log "postgresql: database $PG_DB reachable as $PG_USER without a password"
}

cmd_check() {
    ensure_redis
    ensure_pg
    cat <<EOF
SQS_CLAIM_REDIS_URL=redis://$REDIS_HOST:$REDIS_PORT/
SQS_CLAIM_POSTGRES_URL=postgres://$PG_USER@$PG_HOST:$PG_PORT/$PG_DB
EOF
}

case "${1:-}" in
    check) cmd_check ;;
    *)
        echo "usage: $0 check" >&2
        exit 2
        ;;
esac
