#!/usr/bin/env python3
"""Checks that `sam build` wrote each function's `bootstrap` for the template's architecture.

Usage: scripts/check-bootstrap.py TEMPLATE BUILD_DIR [PARAMETER=VALUE...]

For every `AWS::Serverless::Function` of TEMPLATE built by cargo-lambda (`Metadata.BuildMethod:
rust-cargolambda`), BUILD_DIR/<LogicalId>/bootstrap must be an ELF executable whose machine
(`e_machine`) is the one its `Architectures` names (the function's own, else `Globals.Function`'s,
else Lambda's default `x86_64`; a `!Ref` to a parameter is that parameter's value as given after
BUILD_DIR, the `--parameter-overrides` sam build was given, else its `Default`): arm64 -> AArch64,
x86_64 -> x86-64. A Graviton function given an
x86-64 binary (or the reverse) deploys fine and fails at its first invocation
("Runtime.InvalidEntrypoint": exec format error); this catches it at build time.

Prints one `ok:` line per function; exits 1 with one `error:` line per mismatch, or when the
template has no such function at all (nothing was checked).
"""

import os
import struct
import sys

import yaml

# e_machine values (the ELF specification) and Lambda's architecture names.
MACHINES = {183: "AArch64", 62: "x86-64"}
EXPECTED = {"arm64": 183, "x86_64": 62}


class _Loader(yaml.SafeLoader):
    """Reads CloudFormation's short forms (`!Ref`, `!GetAtt`, ...) as plain values."""


def _any_tag(loader, _suffix, node):
    if isinstance(node, yaml.ScalarNode):
        return loader.construct_scalar(node)
    if isinstance(node, yaml.SequenceNode):
        return loader.construct_sequence(node)
    return loader.construct_mapping(node)


_Loader.add_multi_constructor("!", _any_tag)
_Loader.add_constructor("!Ref", lambda loader, node: {"Ref": loader.construct_scalar(node)})


def elf_machine(path):
    """The ELF file's e_machine, or None if the file is not ELF."""
    with open(path, "rb") as f:
        header = f.read(20)
    if len(header) < 20 or header[:4] != b"\x7fELF":
        return None
    order = "<" if header[5] == 1 else ">"  # EI_DATA: 1 little-endian, 2 big-endian
    return struct.unpack(order + "H", header[18:20])[0]


def architecture(props, globals_fn, name, parameters):
    arch = props.get("Architectures", globals_fn.get("Architectures", ["x86_64"]))
    if isinstance(arch, list) and len(arch) == 1 and isinstance(arch[0], dict) and "Ref" in arch[0]:
        ref = arch[0]["Ref"]
        if ref not in parameters:
            raise ValueError(f"{name}: Architectures refers to {ref}, which is no parameter with a value")
        arch = [parameters[ref]]
    if not isinstance(arch, list) or len(arch) != 1 or arch[0] not in EXPECTED:
        raise ValueError(f"{name}: Architectures {arch!r} is not one arm64 or x86_64")
    return arch[0]


def main(argv):
    if len(argv) < 3 or not all("=" in a for a in argv[3:]):
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    template_path, build_dir = argv[1], argv[2]
    with open(template_path) as f:
        template = yaml.load(f, Loader=_Loader)
    parameters = {k: (v or {}).get("Default") for k, v in (template.get("Parameters") or {}).items()
                  if (v or {}).get("Default") is not None}
    parameters.update(a.split("=", 1) for a in argv[3:])
    globals_fn = (template.get("Globals") or {}).get("Function") or {}
    # sam build writes each function's artifact directory into the built template's CodeUri
    # (functions built alike share one); build/<Name> when the built template does not say.
    built = {}
    built_path = os.path.join(build_dir, "template.yaml")
    if os.path.isfile(built_path):
        with open(built_path) as f:
            built = (yaml.load(f, Loader=_Loader) or {}).get("Resources") or {}
    errors, checked = [], 0
    for name, resource in (template.get("Resources") or {}).items():
        if resource.get("Type") != "AWS::Serverless::Function":
            continue
        if (resource.get("Metadata") or {}).get("BuildMethod") != "rust-cargolambda":
            continue
        checked += 1
        try:
            arch = architecture(resource.get("Properties") or {}, globals_fn, name, parameters)
        except ValueError as e:
            errors.append(str(e))
            continue
        code_uri = ((built.get(name) or {}).get("Properties") or {}).get("CodeUri")
        artifact = code_uri if isinstance(code_uri, str) else name
        bootstrap = os.path.join(build_dir, artifact, "bootstrap")
        if not os.path.isfile(bootstrap):
            errors.append(f"{name}: no {bootstrap} (did sam build build it?)")
            continue
        machine = elf_machine(bootstrap)
        want = EXPECTED[arch]
        if machine != want:
            seen = "not an ELF file" if machine is None else MACHINES.get(machine, f"e_machine {machine}")
            errors.append(f"{name}: {bootstrap} is {seen}; Architectures {arch} needs {MACHINES[want]}")
            continue
        size = os.path.getsize(bootstrap) / 1e6
        print(f"ok: {name}: bootstrap is {MACHINES[machine]} ELF ({size:.1f} MB), as Architectures {arch} needs")
    if checked == 0:
        errors.append(f"{template_path}: no AWS::Serverless::Function with BuildMethod rust-cargolambda")
    for e in errors:
        print(f"error: {e}", file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
