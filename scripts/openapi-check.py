#!/usr/bin/env python3
"""Checks openapi.yaml for the tests.

  openapi-check.py routes            prints "METHOD /path" for every operation in the spec
  openapi-check.py instances FILE    validates JSON instances against component schemas;
                                     FILE holds lines "SchemaName<TAB>json"; prints one line
                                     per failure and exits 1 if any failed
"""
import json
import pathlib
import sys

import yaml
from jsonschema import Draft202012Validator

spec = yaml.safe_load((pathlib.Path(__file__).resolve().parent.parent / "openapi.yaml").read_text())

if sys.argv[1] == "routes":
    for path, item in spec["paths"].items():
        for method in item:
            if method in {"get", "put", "post", "delete", "patch", "head", "options"}:
                print(method.upper(), path)
elif sys.argv[1] == "instances":
    failures = 0
    for number, line in enumerate(pathlib.Path(sys.argv[2]).read_text().splitlines(), 1):
        name, text = line.split("\t", 1)
        schema = {"$ref": f"#/components/schemas/{name}", "components": spec["components"]}
        for error in Draft202012Validator(schema).iter_errors(json.loads(text)):
            failures += 1
            print(f"line {number} ({name}): {error.message} at {list(error.absolute_path)}")
    sys.exit(1 if failures else 0)
