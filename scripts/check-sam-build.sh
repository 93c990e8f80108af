#!/usr/bin/env bash
# make sam-build: the documented deploy build, checked without an AWS account or Docker.
# For each TEMPLATE (default template.yaml): `sam validate --lint`, then `sam build` (cargo-lambda,
# cross-compiling with zig) into a temp build dir, then scripts/check-bootstrap.py: every
# function's `bootstrap` is an ELF for the template's Architectures (arm64 -> AArch64).
# A template with an `Architecture` parameter (template.yaml) is built once per value it
# allows (arm64, x86_64: `--parameter-overrides Architecture=...`), each checked for its own.
# Each build's bootstraps are kept, as sam build wrote them, in
# $CARGO_TARGET_DIR/sam-artifacts/<template's directory and name>/<architecture or default>/<Function>/
# (scripts/smoke-bootstrap.py runs them; scripts/measure-deployed.sh measures them).
#
# Usage: scripts/check-sam-build.sh [TEMPLATE...]   (paths from the repository root)
#
# Environment:
#   SQS_CLAIM_SAM_TARGET_DIR  cargo's target dir for these builds (default
#                             ~/.cache/sqs-claim/target-sam): kept between runs, so a warm build
#                             takes seconds where a cold one takes minutes (docs/deploy.md)
#   SQS_CLAIM_CACHE           where the SAM CLI's and cargo-lambda's venvs go (scripts/pytool.sh)
#
# The SAM CLI and cargo-lambda come from PyPI through scripts/sam.sh. Nothing of the caller's
# AWS configuration is used: a dummy region and credentials (sam build and validate make no AWS
# call). The build dir is removed at exit; the work tree is left as it was (no .aws-sam/).
set -euo pipefail
cd "$(dirname "$0")/.."
[[ $# -gt 0 ]] || set -- template.yaml
cache="${SQS_CLAIM_CACHE:-$HOME/.cache/sqs-claim}"
export CARGO_TARGET_DIR="${SQS_CLAIM_SAM_TARGET_DIR:-$cache/target-sam}"
mkdir -p "$CARGO_TARGET_DIR"
for v in $(compgen -e | grep -E '^AWS_'); do unset "$v"; done
export AWS_REGION=us-east-1 AWS_DEFAULT_REGION=us-east-1 AWS_ACCESS_KEY_ID=check-sam-build \
    AWS_SECRET_ACCESS_KEY=check-sam-build AWS_CONFIG_FILE=/dev/null AWS_SHARED_CREDENTIALS_FILE=/dev/null
sam_python="$(dirname "$(scripts/pytool.sh sam aws-sam-cli)")/python"   # has PyYAML
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# The values a template's Architecture parameter allows, one per line; "-" when it has none.
architectures() {
    "$sam_python" - "$1" <<'PY'
import sys, yaml
class L(yaml.SafeLoader):
    pass
L.add_multi_constructor("!", lambda loader, suffix, node: None)
t = yaml.load(open(sys.argv[1]), Loader=L) or {}
allowed = ((t.get("Parameters") or {}).get("Architecture") or {}).get("AllowedValues")
print("\n".join(allowed) if allowed else "-")
PY
}
n=0
for template in "$@"; do
    [[ -f "$template" ]] || { echo "check-sam-build: no template $template" >&2; exit 1; }
    echo "== sam validate --lint $template" >&2
    scripts/sam.sh validate --lint --template-file "$template"
    # A failing helper stops the script (set -e), not a silent zero builds.
    archs=$(architectures "$template")
    for arch in $archs; do
        n=$((n + 1))
        overrides=() params=() label=default
        if [[ "$arch" != - ]]; then
            overrides=(--parameter-overrides "Architecture=$arch") params=("Architecture=$arch") label=$arch
        fi
        echo "== sam build $template${overrides[*]:+ ${overrides[*]}} (CARGO_TARGET_DIR=$CARGO_TARGET_DIR)" >&2
        start=$(date +%s)
        # --beta-features: the rust-cargolambda build method is a SAM beta feature (samconfig.toml
        # opts in for template.yaml; a template elsewhere has no samconfig.toml of its own).
        scripts/sam.sh build --template-file "$template" --build-dir "$tmp/$n/build" \
            --cache-dir "$tmp/$n/cache" --beta-features "${overrides[@]}"
        echo "== sam build $template${overrides[*]:+ ${overrides[*]}}: $(($(date +%s) - start)) s" >&2
        "$sam_python" scripts/check-bootstrap.py "$template" "$tmp/$n/build" "${params[@]}"
        rel=$(realpath --relative-to=. "$template")
        kept="$CARGO_TARGET_DIR/sam-artifacts/${rel%.*}/$label"
        rm -rf "$kept" && mkdir -p "$kept"
        for d in "$tmp/$n/build"/*/; do
            [[ -f "$d/bootstrap" ]] && cp -r "$d" "$kept/"
        done
        echo "== kept: $kept" >&2
    done
done
echo "check-sam-build: PASSED ($n build(s) of $# template(s))" >&2
