#!/usr/bin/env bash
# `make deploy-local`: deploy template.yaml onto ministack as a CloudFormation stack (SAM transform
# expanded by ministack), feed it payments with duplicates and a body that does not parse, check
# the balances and the dead-letter queue, then a payment too large for SQS offloaded to S3 as the
# extended clients do (LargePayloadBucket, DeleteLargePayloads=true), delete the stack and the
# buckets. Then the same for examples/streams/template.yaml (the `stream-consumer` binary): its
# Kinesis stream and its orders table's DynamoDB stream fed through ministack's stream mappings,
# each record credited once. No AWS account; nothing left behind.
#
#   1. builds the `consumer` binary for this host (ministack runs a `provided.al2023` function's
#      `bootstrap` as a local process) and strips a copy into a temp dir;
#   2. runs scripts/deploy-local.py (boto3 + PyYAML, in a venv of its own under the cache), which
#      reads template.yaml as it is, uploads the zip to ministack's S3, creates the stack with the
#      template's own parameters and defaults, checks, and deletes everything it made (also when
#      a check fails or the run is interrupted);
#   3. removes the temp dir (trap), whatever happened.
#
# ministack: the stand-ins' (scripts/standins.sh up is run first: it starts them if they are not
# up, and installs aws-sam-translator beside ministack, which its CloudFormation needs to expand
# `Transform: AWS::Serverless-2016-10-31`). ministack gives a local bootstrap its own environment,
# so it must run with AWS_ENDPOINT_URL pointing at itself (standins.sh starts it so): the function
# then reaches the stack's tables and queues in ministack.
#
# Environment (all optional):
#   SQS_CLAIM_DEPLOY_ENDPOINT  a ministack already running (e.g. http://127.0.0.1:4599): the
#                              stand-ins are then neither started nor checked. It must have
#                              aws-sam-translator importable and AWS_ENDPOINT_URL set to itself.
#   SQS_CLAIM_SQS_PORT         the stand-ins' ministack port (default 4566), as for standins.sh
#   SQS_CLAIM_DEPLOY_STACK     stack name (default sqs-claim-local-<random>)
#   SQS_CLAIM_DEPLOY_PARAMS    parameter overrides, "Key=Value Key=Value" (default: the
#                              template's defaults, but LargePayloadBucket = a bucket of the
#                              run's own and DeleteLargePayloads=true; naming LargePayloadBucket
#                              here skips the large-message check)
#   SQS_CLAIM_DEPLOY_WAIT      seconds to wait for the input queue to empty (default 120)
#   SQS_CLAIM_DEPLOY_BINARY    a consumer binary already built for this host: no build (CI
#                              passes the one `make test` built, which has other features
#                              unified and would otherwise be built again)
#   SQS_CLAIM_DEPLOY_STREAMS   `off`: deploy template.yaml only, not examples/streams/template.yaml
#   SQS_CLAIM_DEPLOY_STREAM_BINARY  a stream-consumer binary already built for this host: no
#                              build (as SQS_CLAIM_DEPLOY_BINARY for the consumer)
#   SQS_CLAIM_CACHE            cache dir for the venv (default ~/.cache/sqs-claim)
#   SQS_CLAIM_PYTHON           python used to make the venv (default python3)
#   CARGO                      cargo (default cargo)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

started=$SECONDS
log() { printf 'deploy-local: %s\n' "$*" >&2; }
die() { printf 'deploy-local: ERROR: %s\n' "$*" >&2; exit 1; }

CARGO="${CARGO:-cargo}"
CACHE="${SQS_CLAIM_CACHE:-$HOME/.cache/sqs-claim}"
PYTHON="${SQS_CLAIM_PYTHON:-python3}"
VENV="$CACHE/venv-deploy-local"
STACK="${SQS_CLAIM_DEPLOY_STACK:-sqs-claim-local-$(od -An -N4 -tx4 /dev/urandom | tr -d ' \n')}"
WAIT="${SQS_CLAIM_DEPLOY_WAIT:-120}"
[[ "$STACK" =~ ^[A-Za-z][A-Za-z0-9-]{0,100}$ ]] || die "SQS_CLAIM_DEPLOY_STACK '$STACK' is not a stack name"
[[ "$WAIT" =~ ^[0-9]+$ ]] || die "SQS_CLAIM_DEPLOY_WAIT must be a number of seconds, got '$WAIT'"

STREAMS="${SQS_CLAIM_DEPLOY_STREAMS:-on}"
case "$STREAMS" in
    on | off) ;;
    *) die "SQS_CLAIM_DEPLOY_STREAMS must be on or off, got '$STREAMS'" ;;
esac

# ------------------------------------------------------------------------------- ministack
if [[ -n "${SQS_CLAIM_DEPLOY_ENDPOINT:-}" ]]; then
    ENDPOINT="$SQS_CLAIM_DEPLOY_ENDPOINT"
    log "ministack: $ENDPOINT (SQS_CLAIM_DEPLOY_ENDPOINT; the stand-ins are left alone)"
else
    scripts/standins.sh up >/dev/null
    ENDPOINT="http://127.0.0.1:${SQS_CLAIM_SQS_PORT:-4566}"
    # A ministack started by an older standins.sh (before it set AWS_ENDPOINT_URL and installed
    # aws-sam-translator) cannot run this: say so instead of timing out on a function that calls
    # real AWS. Its pid file is where standins.sh keeps it.
    pidfile="${SQS_CLAIM_RUN:-$PWD/.standins}/ministack.pid"
    pid="$(tr -dc '0-9' <"$pidfile" 2>/dev/null || true)"
    if [[ -n "$pid" && -r "/proc/$pid/environ" ]] &&
        ! tr '\0' '\n' <"/proc/$pid/environ" | grep -qxF "AWS_ENDPOINT_URL=$ENDPOINT"; then
        die "the stand-ins' ministack (pid $pid) runs without AWS_ENDPOINT_URL=$ENDPOINT, so the" \
            "function it runs would call AWS itself: it was started by an older scripts/standins.sh." \
            "Restart it when no one else uses it: scripts/standins.sh down && scripts/standins.sh up"
    fi
    log "ministack: the stand-ins' at $ENDPOINT"
fi

# -------------------------------------------------------------------------------- the venv
if [[ ! -x "$VENV/bin/python" ]] || ! "$VENV/bin/python" -c 'import boto3, yaml' 2>/dev/null; then
    log "installing boto3 and PyYAML into $VENV"
    mkdir -p "$CACHE"
    rm -rf "$VENV"
    "$PYTHON" -m venv "$VENV" >&2 || die "'$PYTHON -m venv' failed (Debian: apt-get install python3-venv)"
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check 'boto3>=1.34,<2' 'PyYAML>=6,<7' >&2 || {
        rm -rf "$VENV"
        die "pip install boto3 PyYAML failed"
    }
fi

# ------------------------------------------------------------------------------ the binary
tmp="$(mktemp -d "${TMPDIR:-/tmp}/sqs-claim-deploy-local.XXXXXX")"
child=""
cleanup() {
    local rc=$?
    rm -rf "$tmp"
    exit "$rc"
}
# The python script deletes the stack on SIGTERM; pass a TERM or a Ctrl-C on to it (a background
# child of a script ignores SIGINT) and wait for its clean-up.
on_term() {
    [[ -n "$child" ]] && kill -TERM "$child" 2>/dev/null && wait "$child" 2>/dev/null
    exit 143
}
trap cleanup EXIT
trap on_term TERM INT

# binary NAME VAR: the binary NAME, from $VAR when it names one, else built; stripped into
# $tmp/NAME/bootstrap.
binary() {
    local name=$1 var=$2 given="${!2:-}"
    mkdir -p "$tmp/$name"
    if [[ -n "$given" ]]; then
        [[ -x "$given" ]] || die "$var=$given is not an executable"
        log "the $name binary: $given ($var; not built)"
        cp "$given" "$tmp/$name/bootstrap"
    else
        # The same features as `make build`.
        log "building $name ($CARGO build --workspace --all-features --bin $name)"
        "$CARGO" build --workspace --all-features --bin "$name" >&2
        local target_dir
        target_dir="$("$CARGO" metadata --format-version 1 --no-deps |
            "$VENV/bin/python" -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')"
        [[ -x "$target_dir/debug/$name" ]] || die "no $target_dir/debug/$name after the build"
        cp "$target_dir/debug/$name" "$tmp/$name/bootstrap"
    fi
    strip "$tmp/$name/bootstrap" 2>/dev/null || log "strip failed or is missing: uploading $name unstripped"
}
binary consumer SQS_CLAIM_DEPLOY_BINARY
[[ "$STREAMS" == off ]] || binary stream-consumer SQS_CLAIM_DEPLOY_STREAM_BINARY

# ---------------------------------------------------------------------------------- the run
# run ARGS...: scripts/deploy-local.py with ARGS, in the background so a TERM reaches it.
run() {
    local rc
    set +e
    "$VENV/bin/python" scripts/deploy-local.py "$@" &
    child=$!
    wait "$child"
    rc=$?
    child=""
    set -e
    return "$rc"
}

args=(--endpoint "$ENDPOINT" --template template.yaml --binary "$tmp/consumer/bootstrap" --stack "$STACK" --wait "$WAIT")
read -r -a overrides <<<"${SQS_CLAIM_DEPLOY_PARAMS:-}"
for p in "${overrides[@]}"; do args+=(--parameter "$p"); done
log "stack $STACK on $ENDPOINT"
rc=0
run "${args[@]}" || rc=$?
if [[ "$STREAMS" == off ]]; then
    log "examples/streams/template.yaml: not deployed (SQS_CLAIM_DEPLOY_STREAMS=off)"
else
    log "stack $STACK-streams on $ENDPOINT (examples/streams/template.yaml)"
    run --endpoint "$ENDPOINT" --template examples/streams/template.yaml --streams \
        --binary "$tmp/stream-consumer/bootstrap" --binary-name stream-consumer \
        --stack "$STACK-streams" --wait "$WAIT" || rc=$?
fi
log "$( ((rc == 0)) && echo passed || echo FAILED) in $((SECONDS - started)) s in all (build included)"
exit "$rc"
