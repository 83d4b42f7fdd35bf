"""The OpenAPI contract against the live daemon: schemathesis runs every check over every
operation of openapi.yaml (examples, coverage, fuzzing and stateful phases) with a fixed
seed and a few examples per operation, and finds nothing. schemathesis.toml holds the
rules a JSON Schema cannot (openapi.yaml says each in words) and bounds the endless
event stream."""
import collections
import pathlib
import subprocess
import sys

import yaml

from conftest import HEADWAYD, ROOT, run_headwayd

SEED = 1
MAX_EXAMPLES = 50


def schemathesis():
    """The schemathesis beside this Python (the test tools' virtual environment)."""
    return str(pathlib.Path(sys.executable).parent / "schemathesis")


def test_schemathesis_finds_nothing_with_every_check(tmp_path):
    # An admin token made offline before the start: without one, the run's first
    # POST /v1/tokens would make the first token and everything after would be 401.
    token = subprocess.run([HEADWAYD, "token", "create", "--scope", "admin", "--name", "contract",
                            "--db", str(tmp_path / "headway.db")],
                           check=True, capture_output=True, text=True).stdout.strip()
    assert token.startswith("hw_"), token
    # A webhook the run makes may name a public address this machine cannot reach: its
    # tests (POST /v1/webhooks/{id}/test, answered once the attempt ends) end within 1 s.
    with run_headwayd(tmp_path, "--webhook-timeout", "1") as base:
        run = subprocess.run(
            [schemathesis(), "--no-color", "--config-file", str(ROOT / "schemathesis.toml"),
             "run", str(ROOT / "openapi.yaml"), "--url", base, "--checks", "all",
             "--seed", str(SEED), "--max-examples", str(MAX_EXAMPLES), "--workers", "1",
             "--header", f"Authorization: Bearer {token}", "--request-timeout", "10"],
            cwd=tmp_path, capture_output=True, text=True, timeout=180)
    assert run.returncode == 0, run.stdout[-20000:] + run.stderr[-4000:]


def test_no_mapping_of_the_contract_repeats_a_key():
    """YAML keeps only the last of two equal keys, silently: a second `'403'` of an
    operation would hide the first from every reader of the contract."""
    repeated = []

    class Loader(yaml.SafeLoader):
        def construct_mapping(self, node, deep=False):
            keys = collections.Counter(self.construct_object(key, deep=deep) for key, _ in node.value)
            repeated.extend((key, node.start_mark.line + 1) for key, count in keys.items() if count > 1)
            return super().construct_mapping(node, deep)

    yaml.load((ROOT / "openapi.yaml").read_text(), Loader=Loader)
    assert repeated == [], f"keys repeated in a mapping (key, line): {repeated}"
