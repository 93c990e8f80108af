# Shared by scripts/measure-deployed.sh and scripts/measure-profiles.sh (sourced, from the
# repository root; `target` is the cargo target dir whose release `payments` and `consumer` are
# the baseline).

# section BINARY NAME: the section's size in bytes (0 when the binary has none).
section() { local hex; hex=$(readelf -SW "$1" | awk -v s="$2" '$2 == s { print $6 }'); echo $((16#${hex:-0})); }

# mb BYTES: in MB, one decimal.
mb() { python3 -c 'import sys; print(f"{int(sys.argv[1]) / 1e6:.1f}")' "$1"; }

# drop_table TABLE: drops a table of this run (and its accounts table) from DynamoDB Local.
drop_table() {
    python3 -c 'import importlib.util as u, sys
s = u.spec_from_file_location("mr", "scripts/measure-rss.py"); m = u.module_from_spec(s)
s.loader.exec_module(m); m.drop_table(sys.argv[1], sys.argv[2])' "$SQS_CLAIM_DYNAMODB_ENDPOINT" "$1" || true
}

# side_by_side NAME N RUNS INIT_RUNS [--also LABEL=PATH ...]: on DynamoDB Local (started if
# need be), scripts/measure-rss.py (peak RSS of a warm batch of N and CPU, against the floor)
# and scripts/measure-init.py (exec to the first `next`, against a bare lambda_runtime
# function: benches/bare_lambda.rs), `$target/release/consumer` and each --also in the same runs.
side_by_side() {
    local name=$1 n=$2 runs=$3 init_runs=$4 status=0
    shift 4
    scripts/standins.sh up >/dev/null
    set -a
    . .standins/env
    set +a
    python3 scripts/measure-rss.py --n "$n" --runs "$runs" --no-invoke "$@"
    local table="init-$name-$$"
    "$target/release/payments" init --store "dynamodb:$table" >/dev/null 2>&1
    python3 scripts/measure-init.py --runs "$init_runs" --store "dynamodb:$table" \
        --env "AWS_ENDPOINT_URL_DYNAMODB=$SQS_CLAIM_DYNAMODB_ENDPOINT" \
        --bin "$target/release/consumer" "$@" || status=$?
    drop_table "$table"
    return "$status"
}
