#!/usr/bin/env python3
"""Checks sdk/schema/manifest.schema.json against manifests: every manifest given (files or folders
of *.json, e.g. the build's plugin folder and the sources' manifests) must validate, and a set of
broken manifests must not. Exits 77 (skipped) when the jsonschema module is not installed."""
import copy
import glob
import json
import os
import sys

try:
    import jsonschema
except ImportError:
    print("jsonschema not installed; skipped")
    sys.exit(77)


def main():
    schema_path, inputs = sys.argv[1], sys.argv[2:]
    with open(schema_path) as f:
        schema = json.load(f)
    validator_cls = getattr(jsonschema, "Draft202012Validator", None)
    if validator_cls is None:
        print("jsonschema has no draft 2020-12 validator; skipped")
        sys.exit(77)
    validator_cls.check_schema(schema)
    validator = validator_cls(schema)
    failures = 0
    files = []
    for p in inputs:
        files += sorted(glob.glob(os.path.join(p, "*.json"))) if os.path.isdir(p) else [p]
    for path in files:
        with open(path) as f:
            doc = json.load(f)
        errors = sorted(validator.iter_errors(doc), key=lambda e: list(e.path))
        for e in errors:
            print(f"{path}: {'/'.join(map(str, e.path))}: {e.message}")
            failures += 1
    good = {"manifest_version": 1, "name": "npu", "kind": "backend", "library": "libnpu.so",
            "abi": {"major": 1, "minor": 0}, "version": "1.0.0",
            "device": {"slot": "privateuse1", "name": "npu"},
            "requires": {"cpu_features": ["avx2"], "libraries": ["libc.so.6"]}, "priority": 3}
    if list(validator.iter_errors(good)):
        print("the reference manifest does not validate")
        failures += 1
    broken = []
    for field in ("manifest_version", "name", "kind", "library", "abi", "version", "device"):
        m = copy.deepcopy(good)
        del m[field]
        broken.append((f"missing {field}", m))
    for field, value in (("manifest_version", 2), ("kind", "gpu"), ("priority", "high"), ("name", "a b"),
                         ("device", {"type": "tpu"}), ("device", {"slot": "privateuse4", "name": "x"}),
                         ("device", {"slot": "privateuse1"}), ("requires", {"cpu_features": "avx2"}),
                         ("requires", {"gpu": []}), ("abi", {"minor": 0})):
        m = copy.deepcopy(good)
        m[field] = value
        broken.append((f"{field}={json.dumps(value)}", m))
    for what, m in broken:
        if not list(validator.iter_errors(m)):
            print(f"the schema accepts a broken manifest ({what})")
            failures += 1
    print(f"{len(files)} manifest(s) checked, {len(broken)} broken ones refused, {failures} problem(s)")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
