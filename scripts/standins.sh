#!/usr/bin/env bash
# Local stand-ins for the AWS services the tests talk to, on loopback only:
#   - DynamoDB Local (AWS's own, Java; from the npm package amplify-dynamodb-simulator),
#     started through scripts/DynamoDbLocalLoopback.java so it binds 127.0.0.1 only;
#   - ministack (PyPI), for SQS (and S3, Lambda, CloudFormation...), started with
#     BIND_HOST=127.0.0.1, with aws-sam-translator beside it (its CloudFormation then expands
#     `Transform: AWS::Serverless-2016-10-31`: `make deploy-local`), and with a clean environment
#     plus AWS_ENDPOINT_URL pointing at itself: ministack hands its own environment to the
#     functions it runs as local processes, so they reach its services and nothing of the caller's
#     (an AWS_ENDPOINT_URL_DYNAMODB pointing at DynamoDB Local, say) leaks into them.
#
# Usage: scripts/standins.sh up|down|status|env
#   up      install what is missing (into the cache dir), start both in the background,
#           wait until both answer, check they listen on 127.0.0.1 only, write $RUN/env
#           and print the env lines on stdout (progress goes to stderr). Idempotent.
#   down    stop both by the pid in their pid files (TERM, then KILL after 30 s).
#   status  tell whether each runs and answers; exit 0 only if both do.
#   env     print the env lines (same as up prints), without starting anything.
#
# Environment (all optional):
#   SQS_CLAIM_CACHE             cache dir            (default $HOME/.cache/sqs-claim)
#   SQS_CLAIM_RUN               run dir: logs, pids, env file (default $PWD/.standins)
#   SQS_CLAIM_DDB_PORT          DynamoDB Local port  (default 8000)
#   SQS_CLAIM_SQS_PORT          ministack port       (default 4566)
#   SQS_CLAIM_STANDINS_TIMEOUT  seconds to wait for each to answer (default 60)
#   SQS_CLAIM_DDB_NPM_VERSION   amplify-dynamodb-simulator version (default 2.9.30 = DynamoDB Local 1.25.1)
#   SQS_CLAIM_MINISTACK_VERSION ministack version    (default 1.5.33)
#   SQS_CLAIM_SAM_TRANSLATOR_VERSION  aws-sam-translator version beside it (default 1.115.0)
#   SQS_CLAIM_MINISTACK_SERVICES  ministack SERVICES filter, e.g. "sqs" (default: all services)
#   SQS_CLAIM_DDB_JAVA_OPTS     extra JVM options    (default -Xmx1g)
#   SQS_CLAIM_PYTHON            python used to make the ministack venv (default python3)
#
# Use the env file from bash:   set -a; . .standins/env; set +a
#            from a Makefile:   include .standins/env  +  export
set -euo pipefail

readonly HOST=127.0.0.1
SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
readonly SCRIPT_DIR
readonly LAUNCHER_SRC="$SCRIPT_DIR/DynamoDbLocalLoopback.java"

CACHE="${SQS_CLAIM_CACHE:-$HOME/.cache/sqs-claim}"
RUN="${SQS_CLAIM_RUN:-$PWD/.standins}"
DDB_PORT="${SQS_CLAIM_DDB_PORT:-8000}"
SQS_PORT="${SQS_CLAIM_SQS_PORT:-4566}"
TIMEOUT="${SQS_CLAIM_STANDINS_TIMEOUT:-60}"
DDB_NPM_VERSION="${SQS_CLAIM_DDB_NPM_VERSION:-2.9.30}"
MINISTACK_VERSION="${SQS_CLAIM_MINISTACK_VERSION:-1.5.33}"
SAM_TRANSLATOR_VERSION="${SQS_CLAIM_SAM_TRANSLATOR_VERSION:-1.115.0}"
MINISTACK_SERVICES="${SQS_CLAIM_MINISTACK_SERVICES:-}"
DDB_JAVA_OPTS="${SQS_CLAIM_DDB_JAVA_OPTS:--Xmx1g}"
PYTHON="${SQS_CLAIM_PYTHON:-python3}"

DDB_DIR="$CACHE/dynamodb-local"
VENV="$CACHE/ministack-venv"

# Names used in messages, pid/log files, and the word that must appear in the
# process's command line before we signal a pid (guards against pid reuse).
readonly DDB_NAME=dynamodb-local DDB_MARK=DynamoDbLocalLoopback
readonly SQS_NAME=ministack SQS_MARK=ministack

log() { printf 'standins: %s\n' "$*" >&2; }
die() { printf 'standins: ERROR: %s\n' "$*" >&2; exit 1; }
have() { command -v "$1" >/dev/null 2>&1; }

[[ "$DDB_PORT" =~ ^[0-9]+$ ]] || die "SQS_CLAIM_DDB_PORT must be a number, got '$DDB_PORT'"
[[ "$SQS_PORT" =~ ^[0-9]+$ ]] || die "SQS_CLAIM_SQS_PORT must be a number, got '$SQS_PORT'"
[[ "$TIMEOUT" =~ ^[0-9]+$ ]] || die "SQS_CLAIM_STANDINS_TIMEOUT must be a number, got '$TIMEOUT'"
[[ "$DDB_PORT" != "$SQS_PORT" ]] || die "SQS_CLAIM_DDB_PORT and SQS_CLAIM_SQS_PORT are both $DDB_PORT"

abs_run_dir() {
    mkdir -p "$RUN" || die "cannot create run dir $RUN"
    RUN="$(cd "$RUN" && pwd)"
}

pidfile() { printf '%s/%s.pid' "$RUN" "$1"; }
logfile() { printf '%s/%s.log' "$RUN" "$1"; }

# ---------------------------------------------------------------- processes

# alive PID MARK: the process exists, is not a zombie, and its command line has MARK.
alive() {
    local pid=$1 mark=$2 state
    [[ "$pid" =~ ^[0-9]+$ ]] || return 1
    kill -0 "$pid" 2>/dev/null || return 1
    if [[ -r "/proc/$pid/stat" ]]; then
        state="$(sed -E 's/^.*\) ([A-Za-z]).*$/\1/' "/proc/$pid/stat" 2>/dev/null || true)"
        [[ "$state" != Z && "$state" != X ]] || return 1
    fi
    if [[ -r "/proc/$pid/cmdline" ]]; then
        tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF -- "$mark" || return 1
    fi
    return 0
}

# read_pid NAME: the pid in NAME's pid file, or nothing.
read_pid() {
    local f
    f="$(pidfile "$1")"
    if [[ -s "$f" ]]; then tr -dc '0-9' <"$f"; fi
}

# spawn NAME CMD...: start CMD in its own session, output to NAME's log, in $RUN.
# The pid file gets the pid of CMD itself (the shell writes $$, then execs CMD).
spawn() {
    local name=$1 pf lf i
    shift
    pf="$(pidfile "$name")"
    lf="$(logfile "$name")"
    rm -f "$pf"
    local -a pre=()
    have setsid && pre=(setsid)
    # shellcheck disable=SC2016 # expanded by the inner bash
    "${pre[@]}" bash -c 'cd "$1" && echo "$$" >"$2.tmp" && mv "$2.tmp" "$2" && shift 2 && exec "$@"' \
        spawn "$RUN" "$pf" "$@" >"$lf" 2>&1 </dev/null &
    for ((i = 0; i < 50; i++)); do
        [[ -s "$pf" ]] && return 0
        sleep 0.1
    done
    die "$name: no pid file after 5 s; log $lf:"$'\n'"$(tail -n 40 "$lf" 2>/dev/null)"
}

# port_in_use PORT: something accepts TCP connections on 127.0.0.1:PORT.
port_in_use() {
    # shellcheck disable=SC2016 # expanded by the inner bash
    timeout 2 bash -c 'exec 3<>"/dev/tcp/$0/$1"' "$HOST" "$1" 2>/dev/null
}

# who_listens PORT: a line from ss about the listener on PORT, if ss is there.
who_listens() {
    have ss || return 0
    ss -ltnpH "sport = :$1" 2>/dev/null | head -n 3 || true
}

# stop NAME MARK
stop() {
    local name=$1 mark=$2 pid pf i
    pf="$(pidfile "$name")"
    pid="$(read_pid "$name")"
    if [[ -z "$pid" ]]; then
        log "$name: not running (no pid file)"
        rm -f "$pf"
        return 0
    fi
    if ! alive "$pid" "$mark"; then
        log "$name: not running (stale pid file: pid $pid is gone or is another program; not signalled)"
        rm -f "$pf"
        return 0
    fi
    log "$name: stopping pid $pid"
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < 300; i++)); do
        alive "$pid" "$mark" || break
        sleep 0.1
    done
    if alive "$pid" "$mark"; then
        log "$name: pid $pid ignored TERM for 30 s, sending KILL"
        kill -KILL "$pid" 2>/dev/null || true
        for ((i = 0; i < 50; i++)); do
            alive "$pid" "$mark" || break
            sleep 0.1
        done
        alive "$pid" "$mark" && die "$name: pid $pid survived KILL"
    fi
    rm -f "$pf"
    log "$name: stopped"
}

# --------------------------------------------------------------- HTTP probes

# http URL [BODY [HEADER...]]: print the response body (any status), fail when
# nothing answers. curl if present, else python.
http() {
    local url=$1 body=${2-}
    shift 2 || shift $#
    if have curl; then
        local -a args=(-s --max-time 3)
        [[ -n "$body" ]] && args+=(-X POST --data-binary "$body")
        local h
        for h in "$@"; do args+=(-H "$h"); done
        curl "${args[@]}" "$url"
    else
        "$PYTHON" - "$url" "$body" "$@" <<'PY'
import sys, urllib.request, urllib.error
url, body, headers = sys.argv[1], sys.argv[2], sys.argv[3:]
req = urllib.request.Request(url, data=body.encode() if body else None)
for h in headers:
    k, v = h.split(":", 1)
    req.add_header(k.strip(), v.strip())
try:
    resp = urllib.request.urlopen(req, timeout=3)
except urllib.error.HTTPError as e:
    resp = e
except Exception:
    sys.exit(1)
sys.stdout.write(resp.read().decode("utf-8", "replace"))
PY
    fi
}

ddb_answers() {
    # DynamoDB Local wants an Authorization header (any signature) to run a call.
    local out
    out="$(http "http://$HOST:$DDB_PORT/" '{}' \
        'Content-Type: application/x-amz-json-1.0' \
        'X-Amz-Target: DynamoDB_20120810.ListTables' \
        'Authorization: AWS4-HMAC-SHA256 Credential=test/20200101/us-east-1/dynamodb/aws4_request, SignedHeaders=host, Signature=0' \
        2>/dev/null)" || return 1
    [[ "$out" == *'"TableNames"'* ]]
}

sqs_answers() {
    local out
    out="$(http "http://$HOST:$SQS_PORT/_ministack/health" 2>/dev/null)" || return 1
    [[ "$out" =~ \"sqs\":\ *\"(available|running)\" ]]
}

# wait_ready NAME MARK PROBE
wait_ready() {
    local name=$1 mark=$2 probe=$3 pid lf deadline
    pid="$(read_pid "$name")"
    lf="$(logfile "$name")"
    deadline=$((SECONDS + TIMEOUT))
    until "$probe"; do
        if ! alive "$pid" "$mark"; then
            die "$name (pid $pid) exited while starting; last lines of $lf:"$'\n'"$(tail -n 40 "$lf" 2>/dev/null)"
        fi
        if ((SECONDS >= deadline)); then
            die "$name (pid $pid) did not answer within ${TIMEOUT}s; last lines of $lf:"$'\n'"$(tail -n 40 "$lf" 2>/dev/null)"
        fi
        sleep 0.2
    done
}

# check_loopback NAME MARK: every socket the process listens on is on loopback.
check_loopback() {
    local name=$1 mark=$2 pid lines addr bad=""
    pid="$(read_pid "$name")"
    if ! have ss; then
        log "$name: 'ss' not found (Debian package iproute2): cannot check it listens on $HOST only"
        return 0
    fi
    lines="$(ss -ltnpH 2>/dev/null | grep -E "pid=$pid," || true)"
    [[ -n "$lines" ]] || die "$name (pid $pid) answers but ss shows no listening socket for it"
    while read -r _ _ _ addr _; do
        case "$addr" in
            127.0.0.1:* | "[::ffff:127.0.0.1]:"* | "[::1]:"*) ;;
            *) bad+=" $addr" ;;
        esac
    done <<<"$lines"
    if [[ -n "$bad" ]]; then
        stop "$name" "$mark"
        die "$name listened beyond loopback on:$bad (stopped it)"
    fi
}

# ----------------------------------------------------------------- installs

with_lock() {
    # Serialise installs into the shared cache between concurrent runs.
    mkdir -p "$CACHE"
    if have flock; then
        (
            flock -w 600 9 || die "timed out waiting for the install lock $CACHE/.install.lock"
            "$@"
        ) 9>"$CACHE/.install.lock"
    else
        "$@"
    fi
}

ensure_java() {
    if have java && have javac; then return 0; fi
    if [[ $EUID -eq 0 ]] && have apt-get; then
        log "java/javac missing: installing openjdk-17-jdk-headless with apt-get"
        { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openjdk-17-jdk-headless; } >&2 ||
            die "apt-get could not install openjdk-17-jdk-headless"
    fi
    if ! have java || ! have javac; then die "DynamoDB Local needs a JDK (java and javac, 11 or newer) on PATH"; fi
}

install_ddb() (
    local marker="$DDB_DIR/.npm-version"
    if [[ -f "$DDB_DIR/DynamoDBLocal.jar" && -d "$DDB_DIR/DynamoDBLocal_lib" && -f "$marker" &&
        "$(cat "$marker")" == "$DDB_NPM_VERSION" ]]; then
        return 0
    fi
    have npm || die "npm is needed to fetch DynamoDB Local (npm package amplify-dynamodb-simulator)"
    have tar || die "tar is needed to unpack DynamoDB Local"
    log "$DDB_NAME: installing amplify-dynamodb-simulator@$DDB_NPM_VERSION into $DDB_DIR"
    local tmp tgz jar emu
    tmp="$(mktemp -d "$CACHE/.dynamodb-local.XXXXXX")"
    trap 'rm -rf "$tmp"' EXIT # runs in a subshell: cleans up on success and on die
    (cd "$tmp" && npm pack --silent "amplify-dynamodb-simulator@$DDB_NPM_VERSION" >npm-pack.out 2>npm-pack.err) ||
        die "npm pack amplify-dynamodb-simulator@$DDB_NPM_VERSION failed:"$'\n'"$(tail -n 20 "$tmp/npm-pack.err")"
    tgz="$(find "$tmp" -maxdepth 1 -name 'amplify-dynamodb-simulator-*.tgz' | head -n 1)"
    [[ -n "$tgz" ]] || die "npm pack produced no tarball in $tmp"
    mkdir "$tmp/x"
    tar -xzf "$tgz" -C "$tmp/x" || die "cannot unpack $tgz"
    # The jar sits at package/emulator/DynamoDBLocal.jar (2.9.x); find it wherever it is.
    jar="$(find "$tmp/x" -name DynamoDBLocal.jar -type f | head -n 1)"
    [[ -n "$jar" ]] || die "no DynamoDBLocal.jar inside amplify-dynamodb-simulator@$DDB_NPM_VERSION"
    emu="$(dirname "$jar")"
    [[ -d "$emu/DynamoDBLocal_lib" ]] || die "no DynamoDBLocal_lib beside $jar"
    echo "$DDB_NPM_VERSION" >"$emu/.npm-version"
    rm -rf "$DDB_DIR"
    mv "$emu" "$DDB_DIR"
    log "$DDB_NAME: installed ($(du -sh "$DDB_DIR" | cut -f1))"
)

build_launcher() {
    local out="$DDB_DIR/launcher" sum
    [[ -f "$LAUNCHER_SRC" ]] || die "missing $LAUNCHER_SRC"
    sum="$(sha256sum "$LAUNCHER_SRC" | cut -d' ' -f1)"
    if [[ -f "$out/DynamoDbLocalLoopback.class" && -f "$out/source.sha256" && "$(cat "$out/source.sha256")" == "$sum" ]]; then
        return 0
    fi
    log "$DDB_NAME: compiling $(basename "$LAUNCHER_SRC")"
    rm -rf "$out"
    mkdir -p "$out"
    javac -nowarn -cp "$DDB_DIR/DynamoDBLocal.jar:$DDB_DIR/DynamoDBLocal_lib/*" -d "$out" "$LAUNCHER_SRC" >&2 ||
        die "javac failed on $LAUNCHER_SRC"
    echo "$sum" >"$out/source.sha256"
}

ministack_version() {
    [[ -x "$VENV/bin/python" ]] || return 1
    "$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("ministack"))' 2>/dev/null
}

sam_translator_version() {
    [[ -x "$VENV/bin/python" ]] || return 1
    "$VENV/bin/python" -c 'import importlib.metadata as m, samtranslator; print(m.version("aws-sam-translator"))' 2>/dev/null
}

install_ministack() {
    if [[ "$(ministack_version || true)" == "$MINISTACK_VERSION" && -x "$VENV/bin/ministack" ]]; then
        install_sam_translator
        return 0
    fi
    have "$PYTHON" || die "$PYTHON not found: ministack needs Python 3.10+"
    log "$SQS_NAME: installing ministack==$MINISTACK_VERSION into the venv $VENV"
    if [[ ! -x "$VENV/bin/python" ]] || ! "$VENV/bin/python" -c 'import sys' 2>/dev/null; then
        rm -rf "$VENV"
        "$PYTHON" -m venv "$VENV" >&2 || die "'$PYTHON -m venv $VENV' failed (Debian: apt-get install python3-venv)"
    fi
    if ! "$VENV/bin/python" -m pip install -q --disable-pip-version-check "ministack==$MINISTACK_VERSION" >&2; then
        rm -rf "$VENV"
        die "pip install ministack==$MINISTACK_VERSION failed"
    fi
    [[ -x "$VENV/bin/ministack" ]] || die "ministack installed but $VENV/bin/ministack is missing"
    install_sam_translator
}

# aws-sam-translator alone (the `ministack[full]` extra pulls far more): what ministack's
# CloudFormation imports to expand the SAM transform. Added to a venv made before it, too; a
# ministack already running sees it only once restarted.
install_sam_translator() {
    [[ "$(sam_translator_version || true)" == "$SAM_TRANSLATOR_VERSION" ]] && return 0
    log "$SQS_NAME: installing aws-sam-translator==$SAM_TRANSLATOR_VERSION into the venv $VENV"
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check \
        "aws-sam-translator==$SAM_TRANSLATOR_VERSION" >&2 ||
        die "pip install aws-sam-translator==$SAM_TRANSLATOR_VERSION failed"
}

# ------------------------------------------------------------------- starts

# start_one NAME MARK PORT PROBE PORTVAR -- CMD...: start unless already running.
start_one() {
    local name=$1 mark=$2 port=$3 probe=$4 portvar=$5 pid
    shift 6
    pid="$(read_pid "$name")"
    if [[ -n "$pid" ]] && alive "$pid" "$mark"; then
        log "$name: already running (pid $pid)"
        return 0
    fi
    rm -f "$(pidfile "$name")"
    if port_in_use "$port"; then
        die "$name: $HOST:$port is already in use by a process this script did not start" \
            "(pid file $(pidfile "$name") names none alive); stop it or set $portvar."$'\n'"$(who_listens "$port")"
    fi
    log "$name: starting on $HOST:$port (log $(logfile "$name"))"
    spawn "$name" "$@"
}

start_ddb() {
    local -a jopts
    read -r -a jopts <<<"$DDB_JAVA_OPTS"
    start_one "$DDB_NAME" "$DDB_MARK" "$DDB_PORT" ddb_answers SQS_CLAIM_DDB_PORT -- \
        env DDB_LOCAL_TELEMETRY=0 \
        java "${jopts[@]}" \
        -Djava.net.preferIPv4Stack=true \
        -Dsqsclaim.bindHost="$HOST" \
        -Djava.library.path="$DDB_DIR/DynamoDBLocal_lib" \
        -cp "$DDB_DIR/DynamoDBLocal.jar:$DDB_DIR/DynamoDBLocal_lib/*:$DDB_DIR/launcher" \
        "$DDB_MARK" -inMemory -sharedDb -disableTelemetry -port "$DDB_PORT"
}

start_ministack() {
    mkdir -p "$RUN/ministack-tmp"
    # A clean environment (env -i): ministack passes its own to every function it runs as a
    # local process, before the function's variables. AWS_ENDPOINT_URL (itself) and test
    # credentials are what a deployed function needs to reach the stack's tables and queues;
    # HOME is a dir of its own, so no ~/.aws/config of the caller's is read by a function.
    local -a envs=(PATH="$PATH" HOME="$RUN/ministack-tmp" LANG=C.UTF-8
        BIND_HOST="$HOST" GATEWAY_PORT="$SQS_PORT" TMPDIR="$RUN/ministack-tmp" LOG_LEVEL=INFO
        AWS_ENDPOINT_URL="http://$HOST:$SQS_PORT" AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test
        AWS_DEFAULT_REGION=us-east-1 AWS_EC2_METADATA_DISABLED=true)
    [[ -n "$MINISTACK_SERVICES" ]] && envs+=(SERVICES="$MINISTACK_SERVICES")
    start_one "$SQS_NAME" "$SQS_MARK" "$SQS_PORT" sqs_answers SQS_CLAIM_SQS_PORT -- \
        env -i "${envs[@]}" "$VENV/bin/ministack"
}

env_lines() {
    cat <<EOF
AWS_ENDPOINT_URL_DYNAMODB=http://$HOST:$DDB_PORT
AWS_ENDPOINT_URL_SQS=http://$HOST:$SQS_PORT
AWS_ACCESS_KEY_ID=test
AWS_SECRET_ACCESS_KEY=test
AWS_REGION=us-east-1
AWS_DEFAULT_REGION=us-east-1
AWS_EC2_METADATA_DISABLED=true
SQS_CLAIM_DYNAMODB_ENDPOINT=http://$HOST:$DDB_PORT
SQS_CLAIM_SQS_ENDPOINT=http://$HOST:$SQS_PORT
EOF
}

write_env() {
    {
        echo "# Written by scripts/standins.sh up; bash: set -a; . $RUN/env; set +a"
        env_lines
    } >"$RUN/env.tmp"
    mv "$RUN/env.tmp" "$RUN/env"
}

# ----------------------------------------------------------------- commands

cmd_up() {
    abs_run_dir
    mkdir -p "$CACHE"
    local t0=$SECONDS
    # DynamoDB Local first: the JVM boots while ministack installs.
    ensure_java
    with_lock install_ddb
    with_lock build_launcher
    start_ddb
    with_lock install_ministack
    start_ministack
    wait_ready "$DDB_NAME" "$DDB_MARK" ddb_answers
    wait_ready "$SQS_NAME" "$SQS_MARK" sqs_answers
    check_loopback "$DDB_NAME" "$DDB_MARK"
    check_loopback "$SQS_NAME" "$SQS_MARK"
    write_env
    log "up in $((SECONDS - t0))s: $DDB_NAME pid $(read_pid "$DDB_NAME") on $HOST:$DDB_PORT," \
        "$SQS_NAME pid $(read_pid "$SQS_NAME") on $HOST:$SQS_PORT; env in $RUN/env"
    env_lines
}

cmd_down() {
    if [[ ! -d "$RUN" ]]; then
        log "nothing to stop: no run dir $RUN"
        return 0
    fi
    abs_run_dir
    stop "$SQS_NAME" "$SQS_MARK"
    stop "$DDB_NAME" "$DDB_MARK"
    rm -f "$RUN/env"
}

status_one() {
    local name=$1 mark=$2 port=$3 probe=$4 pid
    pid="$(read_pid "$name")"
    if [[ -n "$pid" ]] && alive "$pid" "$mark"; then
        if "$probe"; then
            echo "$name: running, pid $pid, answering on http://$HOST:$port"
            return 0
        fi
        echo "$name: running, pid $pid, NOT answering on http://$HOST:$port"
        return 1
    fi
    echo "$name: stopped"
    return 1
}

cmd_status() {
    [[ -d "$RUN" ]] && abs_run_dir
    local rc=0
    status_one "$DDB_NAME" "$DDB_MARK" "$DDB_PORT" ddb_answers || rc=1
    status_one "$SQS_NAME" "$SQS_MARK" "$SQS_PORT" sqs_answers || rc=1
    [[ -f "$RUN/env" ]] && echo "env file: $RUN/env"
    return "$rc"
}

case "${1:-}" in
    up) cmd_up ;;
    down) cmd_down ;;
    status) cmd_status ;;
    env) env_lines ;;
    *)
        echo "usage: $0 up|down|status|env" >&2
        exit 2
        ;;
esac
