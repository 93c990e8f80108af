#!/usr/bin/env bash
# Prints the path of a Python command-line tool, installing it first into a venv of its own
# under the cache (never into the system Python: `pip install` there fails on a stock Debian).
#
# Usage: scripts/pytool.sh TOOL [PACKAGE...]      e.g.  scripts/pytool.sh cfn-lint cfn-lint
#        "$(scripts/pytool.sh cfn-lint cfn-lint)" template.yaml
#        scripts/pytool.sh --lib NAME PACKAGE...    a venv of libraries (no command of their
#        own): prints its python, e.g. scripts/pytool.sh --lib sqs-extended amazon-sqs-extended-client
#
# Environment: SQS_CLAIM_CACHE (default ~/.cache/sqs-claim), SQS_CLAIM_PYTHON (default python3).
set -euo pipefail
lib=""
if [[ "${1:-}" == "--lib" ]]; then
    lib=${2:?usage: scripts/pytool.sh --lib NAME PACKAGE...}
    shift 2
    [[ $# -gt 0 ]] || { echo "usage: scripts/pytool.sh --lib NAME PACKAGE..." >&2; exit 2; }
    set -- python "$@"
fi
tool=${1:?usage: scripts/pytool.sh TOOL [PACKAGE...]}
shift
packages=("$@")
[[ ${#packages[@]} -gt 0 ]] || packages=("$tool")
cache="${SQS_CLAIM_CACHE:-$HOME/.cache/sqs-claim}"
python="${SQS_CLAIM_PYTHON:-python3}"
venv="$cache/venv-${lib:-$tool}"
# One installer at a time per venv: tests that run at once on a fresh machine all ask for it,
# and a second `python -m venv` over a venv being made fails (or hands out a half-made one).
mkdir -p "$cache"
exec 9>"$venv.lock"
flock 9
# A library venv is rebuilt when the packages asked for change (a new pin).
stamp="$venv/.pytool-packages"
if [[ -n "$lib" && -x "$venv/bin/python" && "$(cat "$stamp" 2>/dev/null)" != "${packages[*]}" ]]; then
    rm -rf "$venv"
fi
if [[ ! -x "$venv/bin/$tool" ]]; then
    echo "pytool: installing ${packages[*]} into $venv" >&2
    mkdir -p "$cache"
    rm -rf "$venv"
    "$python" -m venv "$venv" >&2 || {
        echo "pytool: '$python -m venv' failed (Debian: apt-get install python3-venv)" >&2
        exit 1
    }
    "$venv/bin/python" -m pip install -q --disable-pip-version-check "${packages[@]}" >&2 || {
        rm -rf "$venv"
        echo "pytool: pip install ${packages[*]} failed" >&2
        exit 1
    }
    echo "${packages[*]}" >"$stamp"
fi
[[ -x "$venv/bin/$tool" ]] || { echo "pytool: $venv/bin/$tool missing after install" >&2; exit 1; }
# cargo-lambda (through cargo-zigbuild) looks for zig as `python3 -m ziglang`, with whichever
# python3 comes first on PATH, or as `zig` on PATH. The ziglang package it brings is in this venv
# only, so a venv of another tool first on PATH (the SAM CLI's) hid it: "Zig is not installed in
# your system". A `zig` beside the tool (the ziglang package's own binary) is found whatever the
# order of PATH, as long as the tool's directory is on it (which running the tool needs anyway).
if [[ ! -e "$venv/bin/zig" ]]; then
    for zig in "$venv"/lib/python3*/site-packages/ziglang/zig; do
        [[ -x "$zig" ]] || continue
        ln -s "../${zig#"$venv"/}" "$venv/bin/zig.tmp.$$" && mv -f "$venv/bin/zig.tmp.$$" "$venv/bin/zig"
        break
    done
fi
echo "$venv/bin/$tool"
