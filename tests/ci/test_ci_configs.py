"""The accelerator manifests (.github/configs/*.yml) and their validator/runner,
.github/scripts/accelerators.py."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import run_python

from ci_helpers import GOOD_CONFIG, REPO, SCRIPTS, run_script

CONFIG = ".github/configs/acc.yml"


def problems(result) -> list[str]:
    return [line for line in result.stdout.splitlines() + result.stderr.splitlines() if line]


def assert_rejected(result, *expected: str) -> list[str]:
    """Exit 1, and each expected text on a line of its own (one line per problem)."""
    lines = problems(result)
    assert result.returncode == 1, lines
    assert "Traceback" not in result.stderr, result.stderr
    for text in expected:
        assert any(text in line for line in lines), (text, lines)
    return lines


# -- the project's own configs -------------------------------------------------------------


def test_the_repository_configs_are_valid():
    result = run_script("accelerators", "validate")
    assert result.returncode == 0, result.stdout + result.stderr
    names = result.stdout.strip().rsplit(": ", 1)[1].split(", ")
    assert {"cpu", "flagos-host", "cuda", "flagos-cuda"} <= set(names)


def test_ci_matrix_has_the_hosted_accelerators():
    result = run_script("accelerators", "matrix", "cpu,flagos-host")
    assert result.returncode == 0, result.stderr
    include = json.loads(result.stdout)["include"]
    assert [e["config"] for e in include] == ["cpu", "flagos-host"]
    for entry in include:
        assert entry["runs_on"] == ["ubuntu-latest"]
        assert entry["report"] == f"reports/{entry['config']}.json"
        assert entry["report_md"] == f"reports/{entry['config']}.md"
    assert {e["device"] for e in include} == {"cpu", "flagos"}


# -- a good config and what the commands make of it ----------------------------------------


def test_good_config_validates_and_lists(scratch):
    scratch.config("acc", GOOD_CONFIG)
    result = scratch.run("validate")
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip() == "1 accelerator config(s) valid: acc"
    listed = scratch.run("list")
    assert listed.stdout == "acc\ttest accelerator\n"


def test_matrix_entry(scratch):
    scratch.config("acc", GOOD_CONFIG)
    scratch.config(
        "box",
        GOOD_CONFIG.replace("reports/acc.json", "reports/box.json")
        + 'container: "vendor/image:1.0"\ncontainer-options: "--device /dev/x"\n'
        + 'python: "3.12"\n',
    )
    result = scratch.run("matrix")
    assert result.returncode == 0, result.stderr
    acc, box = json.loads(result.stdout)["include"]
    assert acc == {
        "config": "acc",
        "name": "test accelerator",
        "runs_on": ["ubuntu-latest"],
        "python": "",
        "container": "",
        "container_options": "--init",
        "timeout_minutes": 30,
        "device": "cpu",
        "report": "reports/acc.json",
        "report_md": "reports/acc.md",
        "shard": "1/1",
        "artifact": "conformance-acc",
    }
    assert (box["container"], box["container_options"], box["python"]) == (
        "vendor/image:1.0",
        "--device /dev/x",
        "3.12",
    )
    one = json.loads(scratch.run("matrix", "box").stdout)["include"]
    assert [e["config"] for e in one] == ["box"]


def test_matrix_of_an_unknown_accelerator_names_the_known_ones(scratch):
    scratch.config("acc", GOOD_CONFIG)
    assert_rejected(
        scratch.run("matrix", "acc,tpu"),
        ".github/configs/tpu.yml: no such accelerator config (configs: acc)",
    )


def test_env_lines(scratch):
    scratch.config(
        "acc",
        GOOD_CONFIG.replace("  FLAGOS_ACCELERATOR: host\n", "  FLAGOS_ACCELERATOR: host\n  COUNT: 2\n"),
    )
    result = scratch.run("env", "acc")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "FLAGOS_ACCELERATOR=host\nCOUNT=2\n"


def _fake_pytest(scratch) -> Path:
    """A `pytest` in $VENV/bin that records its arguments, directory and environment."""
    bin_dir = scratch.root / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    fake = bin_dir / "pytest"
    fake.write_text(
        f"#!{sys.executable}\n"
        "import json, os, sys\n"
        "json.dump({'argv': sys.argv[1:], 'cwd': os.getcwd(),\n"
        "           'accel': os.environ.get('FLAGOS_ACCELERATOR')},\n"
        "          open('ran.json', 'w'))\n"
        "sys.exit(3)\n"
    )
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    return fake


def _pytest_of_acc(scratch):
    """Config `acc` and the fake pytest; returns run(*args, cwd=None): `accelerators.py pytest acc ARGS`
    without VENV and FLAGOS_ACCELERATOR around it."""
    scratch.config("acc", GOOD_CONFIG)
    (scratch.root / "conformance" / "test_x.py").write_text("")
    _fake_pytest(scratch)
    env = {k: v for k, v in os.environ.items() if k not in ("VENV", "FLAGOS_ACCELERATOR")}
    return lambda *args, cwd=None: run_script(
        "accelerators", "--root", str(scratch.root), "pytest", "acc", *args, cwd=cwd, env=env
    )


def _recorded(scratch) -> dict:
    """What the fake pytest recorded of its last run."""
    return json.loads((scratch.root / "ran.json").read_text())


def test_pytest_runs_the_config_command_from_the_root_with_env_and_venv(scratch, tmp_path):
    result = _pytest_of_acc(scratch)("-x", "-k", "conv", cwd=tmp_path)
    assert result.returncode == 3, result.stderr  # pytest's exit status comes through
    ran = _recorded(scratch)
    assert ran == {
        "argv": [
            "-p",
            "flagos",
            "--flagos-device=cpu",
            "conformance/",
            "--flagos-expectations=conformance/expectations/cpu.toml",
            "--flagos-report=reports/acc.json",
            "--flagos-strict",
            "-x",
            "-k",
            "conv",
        ],
        "cwd": str(scratch.root.resolve()),
        "accel": "host",
    }
    # the command is echoed first, so a log shows what to run locally
    assert result.stderr.splitlines()[0].startswith("+ FLAGOS_ACCELERATOR=host pytest -p flagos ")


def test_setup_runs_the_script_with_the_config_env(scratch):
    scratch.config("acc", GOOD_CONFIG)
    (scratch.root / "setup.sh").write_text('echo "accelerator=$FLAGOS_ACCELERATOR in $PWD"\n')
    result = scratch.run("setup", "acc")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"accelerator=host in {scratch.root.resolve()}"


def test_commands_refuse_an_invalid_config(scratch):
    scratch.config("acc", GOOD_CONFIG.replace("--flagos-strict", ""))
    for command in (("env", "acc"), ("setup", "acc"), ("pytest", "acc"), ("matrix",)):
        assert_rejected(scratch.run(*command), f"{CONFIG}: pytest: --flagos-strict is missing")


# -- one clear line per problem -------------------------------------------------------------


def test_missing_expectations_file_is_rejected(scratch):
    scratch.config(
        "acc",
        GOOD_CONFIG.replace("cpu.toml", "xpu.toml").replace("--flagos-device=cpu", "--flagos-device=xpu"),
    )
    lines = assert_rejected(
        scratch.run("validate"),
        f"{CONFIG}: pytest: --flagos-expectations: conformance/expectations/xpu.toml does not exist",
    )
    assert len(lines) == 1


def test_expectations_of_another_device_are_rejected(scratch):
    scratch.expectations("cuda")
    scratch.config("acc", GOOD_CONFIG.replace("cpu.toml", "cuda.toml"))
    assert_rejected(
        scratch.run("validate"),
        f"{CONFIG}: pytest: --flagos-expectations: conformance/expectations/"
        "cuda.toml is not the expectations file of device 'cpu' (expected "
        "expectations/cpu.toml or expectations/acc.toml)",
    )


def test_expectations_named_after_the_config_are_accepted(scratch):
    scratch.expectations("acc")
    scratch.config("acc", GOOD_CONFIG.replace("cpu.toml", "acc.toml"))
    assert scratch.run("validate").returncode == 0


def test_expectations_that_do_not_parse_are_rejected(scratch):
    pytest.importorskip("tomllib")
    scratch.expectations("cpu", "[[xfail]]\nid = 'x'\n[[bogus]]\n")
    scratch.config("acc", GOOD_CONFIG)
    assert_rejected(
        scratch.run("validate"),
        "cpu.toml: unknown table 'bogus' (expected [[xfail]] or [[skip]])",
        "cpu.toml: [[xfail]] entry 1 needs an id and a reason",
    )
    scratch.expectations("cpu", "[[xfail]\n")
    assert_rejected(scratch.run("validate"), "cpu.toml: does not parse as TOML")


@pytest.mark.parametrize(
    "edit, expected",
    [
        (
            ("timeout-minutes: 30", "timout-minutes: 30"),
            [
                "acc.yml: timout-minutes: unknown key (did you mean timeout-minutes?)",
                "acc.yml: timeout-minutes: required",
            ],
        ),
        (
            ("timeout-minutes: 30", "timeout-minutes: 0"),
            ["acc.yml: timeout-minutes: must be a whole number of minutes, 1..1440"],
        ),
        (
            ("setup: setup.sh", "setup: scripts/missing.sh"),
            ["acc.yml: setup: scripts/missing.sh does not exist"],
        ),
        (
            ("setup: setup.sh", "setup: ../outside.sh"),
            ["acc.yml: setup: ../outside.sh must be a path inside the repository"],
        ),
        (("runs-on: [ubuntu-latest]", "runs-on: []"), ["acc.yml: runs-on: required"]),
        (
            ("FLAGOS_ACCELERATOR: host", "FLAGOS_ACCELERATOR: true"),
            ["acc.yml: env: FLAGOS_ACCELERATOR: the value must be a string (quote it)"],
        ),
        (
            ("FLAGOS_ACCELERATOR: host", "FLAGOS_ACCELERATOR: on"),
            ["acc.yml: line 5: 'on' reads as a YAML 1.1 boolean in YAML: quote it"],
        ),
        (
            ('name: "test accelerator"', "name: x\npython: 3.10"),
            ["acc.yml: line 2: '3.10' reads as a number in YAML: quote it"],
        ),
        (
            ('name: "test accelerator"', "name: x\ncontainer-options: --gpus all"),
            ["acc.yml: container-options: given without a container"],
        ),
        (
            ('name: "test accelerator"', "name: x\n1: one"),
            ["acc.yml: 1: unknown key"],
        ),
        (
            ("timeout-minutes: 30", 'timeout-minutes: "30"'),
            ["acc.yml: timeout-minutes: must be a whole number of minutes, 1..1440"],
        ),
        (
            ("runs-on: [ubuntu-latest]", "runs-on: [{os: linux}]"),
            ["acc.yml: runs-on: must be a runner label or a list of labels (strings)"],
        ),
        (
            ("FLAGOS_ACCELERATOR: host", "FLAGOS_ACCELERATOR: [host]"),
            ["acc.yml: env: FLAGOS_ACCELERATOR: the value must be a string (quote it)"],
        ),
        (("env:\n  FLAGOS_ACCELERATOR: host", "env: host"), ["acc.yml: env: must be a mapping of VARIABLE: value"]),
        (("pytest: pytest", "pytest: |\n  pytest"), ["acc.yml: pytest: the command must be one line"]),
        (
            ("--flagos-strict", "--flagos-strict > log.txt"),
            ["acc.yml: pytest: '>' is shell syntax, but the command runs without a shell"],
        ),
        (
            ("pytest -p flagos", "FOO=1 pytest -p flagos"),
            [
                "acc.yml: pytest: 'FOO=1': put environment variables in `env`",
                "acc.yml: pytest: the command must start with `pytest`",
            ],
        ),
        (("-p flagos ", ""), ["acc.yml: pytest: `-p flagos` is missing"]),
        (("--flagos-device=cpu ", ""), ["acc.yml: pytest: --flagos-device=DEVICE is missing"]),
        (
            ("--flagos-device=cpu", "--flagos-device=Not A Device"),
            ["acc.yml: pytest: --flagos-device=Not is not a device"],
        ),
        (
            ("reports/acc.json", "reports/acc.md"),
            ["acc.yml: pytest: --flagos-report: reports/acc.md must end in .json"],
        ),
        (
            ("--flagos-strict", "--flagos-stric"),
            [
                "acc.yml: pytest: unknown option --flagos-stric (did you mean --flagos-strict?)",
                "acc.yml: pytest: --flagos-strict is missing",
            ],
        ),
        (
            (" conformance/ ", " tests/ "),
            ["acc.yml: pytest: the command does not run the suite: add conformance/"],
        ),
        (
            (" conformance/ ", " conformance/test_nothing.py "),
            ["acc.yml: pytest: conformance/test_nothing.py does not exist"],
        ),
    ],
)
def test_each_problem_is_one_clear_line(scratch, edit, expected):
    old, new = edit
    assert old in GOOD_CONFIG
    scratch.config("acc", GOOD_CONFIG.replace(old, new, 1))
    lines = assert_rejected(scratch.run("validate"), *expected)
    assert all(line.startswith(".github/configs/acc.yml: ") for line in lines), lines
    assert len(lines) == len(expected), lines


def test_every_problem_of_every_file_is_listed(scratch):
    scratch.config(
        "acc",
        GOOD_CONFIG.replace("timeout-minutes: 30", "timeout-minutes: 9999").replace(
            "setup: setup.sh", "setup: nope.sh"
        ),
    )
    scratch.config("box", GOOD_CONFIG)  # acc's report path, but acc is invalid anyway
    scratch.config("Bad_Name", GOOD_CONFIG.replace("reports/acc.json", "reports/b.json"))
    (scratch.root / ".github" / "configs" / "stray.yaml").write_text("")
    lines = assert_rejected(scratch.run("validate"))
    assert sorted(lines) == sorted(
        [
            ".github/configs/stray.yaml: config files end in .yml",
            ".github/configs/Bad_Name.yml: the file name 'Bad_Name' must be lower-case letters, "
            "digits and dashes (it names the accelerator in the matrix)",
            ".github/configs/acc.yml: setup: nope.sh does not exist",
            ".github/configs/acc.yml: timeout-minutes: must be a whole number of minutes, 1..1440",
        ]
    )


def test_duplicate_report_paths_are_rejected(scratch):
    scratch.config("acc", GOOD_CONFIG)
    scratch.config("box", GOOD_CONFIG)
    lines = assert_rejected(
        scratch.run("validate"),
        ".github/configs/box.yml: pytest: --flagos-report=reports/acc.json "
        "is also the report of acc.yml (each accelerator needs its own)",
    )
    assert len(lines) == 1


def test_validate_named_files_only(scratch):
    good = scratch.config("acc", GOOD_CONFIG)
    scratch.config("bad", "name: [\n")
    assert scratch.run("validate", str(good)).returncode == 0
    assert_rejected(
        scratch.run("validate"), ".github/configs/bad.yml: line 2: not valid YAML: while parsing a flow node"
    )


def test_no_configs_is_a_problem(scratch):
    assert_rejected(scratch.run("validate"), ".github/configs: no accelerator configs (*.yml)")


def test_the_file_must_be_a_mapping(scratch):
    scratch.config("acc", "- a\n- b\n")
    assert_rejected(scratch.run("validate"), "acc.yml: the file must be a mapping of the keys name, runs-on")


def test_yaml_flow_mappings_and_comments_are_read(scratch):
    scratch.config(
        "acc", GOOD_CONFIG.replace("env:\n  FLAGOS_ACCELERATOR: host", "env: {FLAGOS_ACCELERATOR: host}  # one")
    )
    assert scratch.run("env", "acc").stdout == "FLAGOS_ACCELERATOR=host\n"


def test_without_pyyaml_one_line_says_what_to_install():
    script = SCRIPTS / "accelerators.py"
    block_yaml = f"import runpy, sys; sys.modules['yaml'] = None; runpy.run_path({str(script)!r}, run_name='__main__')"
    result = run_python(block_yaml, "validate", timeout=60)
    assert (result.returncode, result.stdout, result.stderr) == (
        1,
        "",
        "accelerators.py needs PyYAML: pip install pyyaml\n",
    )


# -- reading YAML (PyYAML's safe loader, and what parse_yaml refuses) -----------------------

SNIPPETS = [
    "a: 1\nb: -2\nc: text with spaces  # comment\nd: 'it''s'\ne: \"q \\\" d\"\n",
    "list:\n  - a\n  - 'b c'\n  -   3\nsame_indent:\n- p\n- q\n",
    "flow: [a, 'b, c', \"d\", 4]\nempty: []\nnull1:\nnull2: ~\nt: true\nf: False\n",
    "nested:\n  inner:\n    deep: value\n  other: [1]\nafter: x\n",
    "url: https://example.org/a#frag\nlabel: 8-gpu\nhash: a#b\nver: v1.2.3\n",
    "# only a comment\n---\nkey: value\n",
    "quoted: ['on', \"3.10\", '010']\nflow: {k: v}\nitems:\n  - k: v\nblock: |\n  text\n",
]


@pytest.mark.parametrize("text", SNIPPETS)
def test_plain_yaml_reads_as_pyyaml_reads_it(accelerators, text):
    yaml = pytest.importorskip("yaml")
    assert accelerators.parse_yaml(text) == yaml.safe_load(text)


@pytest.mark.parametrize(
    "text, message",
    [
        ("a: 1\na: 2\n", "line 2: duplicate key 'a'"),
        ("a: {b: 1, b: 2}\n", "line 1: duplicate key 'b'"),
        ("a: &anchor x\nb: *anchor\n", "line 2: aliases (*name) are not read here: write the value out"),
        ("a:\n\tb: 1\n", "line 2: not valid YAML: while scanning for the next token, found character '\\t'"),
        ("a: 1\n  b: 2\n", "line 2: not valid YAML: mapping values are not allowed here"),
        ("a: b: c\n", "line 1: not valid YAML: mapping values are not allowed here"),
        ("a: 2024-01-01\n", "line 1: '2024-01-01' reads as a date in YAML: quote it"),
        ("a: 010\n", "line 1: '010' reads as a number in YAML: quote it"),
        ("a: 0x1F\n", "line 1: '0x1F' reads as a number in YAML: quote it"),
        ("a: 1:30\n", "line 1: '1:30' reads as a number in YAML: quote it"),
        ("a: [x, 3.10]\n", "line 1: '3.10' reads as a number in YAML: quote it"),
        ("a: yes\n", "line 1: 'yes' reads as a YAML 1.1 boolean in YAML: quote it"),
        ("on: x\n", "line 1: 'on' reads as a YAML 1.1 boolean in YAML: quote it"),
        (
            "a: 'open\n",
            "line 1: not valid YAML: while scanning a quoted scalar, found unexpected end of stream (line 2)",
        ),
        ("a: !!python/name:os.system\n", "line 1: not valid YAML: could not determine a constructor"),
        (
            "a: 1\n---\nb: 2\n",
            "line 1: not valid YAML: expected a single document in the stream, but found another document (line 2)",
        ),
    ],
)
def test_parse_yaml_refuses_in_one_line(accelerators, text, message):
    with pytest.raises(accelerators.ConfigError) as info:
        accelerators.parse_yaml(text)
    assert f"line {info.value.line}: {info.value}".startswith(message)


# -- the set-up scripts -------------------------------------------------------------------


@pytest.mark.parametrize("script", sorted((REPO / ".github/scripts/setup").glob("*.sh")), ids=lambda p: p.name)
def test_setup_scripts_are_valid_bash(script):
    result = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_host_setup_finds_the_makefile_torch_pin():
    """host.sh installs the torch version that the Makefile pins; the sed must find it."""
    import re

    script = (REPO / ".github/scripts/setup/host.sh").read_text()
    sed = re.search(r"sed -n '([^']+)' Makefile", script).group(1)
    pin = subprocess.run(["sed", "-n", sed, str(REPO / "Makefile")], capture_output=True, text=True).stdout.splitlines()
    assert pin and re.fullmatch(r"[0-9]+\.[0-9]+(\.[0-9]+)?", pin[0]), pin


# -- shards: one accelerator's suite over several machines (pytest-split) -------------------


def test_matrix_with_shards_has_one_entry_per_shard_with_its_own_report(scratch):
    scratch.config("acc", GOOD_CONFIG)
    result = scratch.run("matrix", "acc", "--shards", "3")
    assert result.returncode == 0, result.stderr
    entries = json.loads(result.stdout)["include"]
    assert [(e["config"], e["shard"]) for e in entries] == [("acc", "1/3"), ("acc", "2/3"), ("acc", "3/3")]
    assert [e["report"] for e in entries] == [f"reports/acc.shard-{k}-of-3.json" for k in (1, 2, 3)]
    assert entries[1]["report_md"] == "reports/acc.shard-2-of-3.md"
    assert entries[1]["artifact"] == "conformance-acc-shard-2-of-3"
    # unsharded: one entry, the config's own report
    (one,) = json.loads(scratch.run("matrix", "acc").stdout)["include"]
    assert (one["shard"], one["report"], one["artifact"]) == ("1/1", "reports/acc.json", "conformance-acc")
    bad = scratch.run("matrix", "acc", "--shards", "0")
    assert bad.returncode == 2 and "--shards: give a number of shards >= 1" in bad.stderr, bad.stderr


def test_pytest_of_one_shard_splits_the_suite_and_names_the_shard_report(scratch, tmp_path):
    run = _pytest_of_acc(scratch)
    result = run("--shard", "2/3", "-x", cwd=tmp_path)
    assert result.returncode == 3, result.stderr
    assert _recorded(scratch)["argv"] == [
        "-p",
        "flagos",
        "--flagos-device=cpu",
        "conformance/",
        "--flagos-expectations=conformance/expectations/cpu.toml",
        "--flagos-report=reports/acc.shard-2-of-3.json",
        "--flagos-strict",
        "--splits",
        "3",
        "--group",
        "2",
        "-x",
    ]
    # 1/1 is the plain command
    run("--shard", "1/1", cwd=tmp_path)
    assert _recorded(scratch)["argv"][5] == "--flagos-report=reports/acc.json"
    for bad in ("0/3", "4/3", "x"):
        result = run("--shard", bad)
        assert result.returncode == 2 and "--shard: give K/N" in result.stderr, result.stderr
