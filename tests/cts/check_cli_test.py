#!/usr/bin/env python3
"""`tessera check` as a vendor's CI runs it: the configuration file, the JUnit XML report (parsed with
xml.etree, as a CI server would), the exit codes, and the graph suites against real compiler and
quantizer plugins, a deliberately broken one included. One scenario per ctest test:

  check_cli_test.py --tessera BIN --scenario NAME [--chain DIR] [--faulty DIR] [--printer DIR]
                    [--quantizers DIR] [--schema FILE] [--accelerator]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

ARGS = None
TMP = tempfile.mkdtemp(prefix="tessera_check_cli_")
FAILURES = []


def check(cond, what):
    if not cond:
        FAILURES.append(what)
        print("FAIL:", what)


def run(args, env_extra=None, plugin_path=None):
    env = dict(os.environ)
    env.pop("TESSERA_TEST_CHAIN_FAULT", None)
    if plugin_path is not None:
        env["TESSERA_PLUGIN_PATH"] = plugin_path
    env.update(env_extra or {})
    p = subprocess.run([ARGS.tessera, "check"] + args, env=env, capture_output=True, text=True, timeout=600)
    return p.returncode, p.stdout, p.stderr


def write_config(name, obj):
    path = os.path.join(TMP, name)
    with open(path, "w") as f:
        json.dump(obj, f, indent=2)
    if ARGS.schema:
        validate_with_schema(obj, path)
    return path


def validate_with_schema(obj, path):
    try:
        import jsonschema
    except ImportError:
        return
    with open(ARGS.schema) as f:
        schema = json.load(f)
    errors = list(jsonschema.Draft202012Validator(schema).iter_errors(obj))
    check(not errors, f"{path} does not validate against {ARGS.schema}: {[e.message for e in errors]}")


def parse_junit(path):
    """The JUnit structure as Jenkins and GitLab read it; checks the counts against the testcases."""
    root = ET.parse(path).getroot()
    check(root.tag == "testsuites", f"root element is <{root.tag}>, expected <testsuites>")
    suites = root.findall("testsuite")
    check(len(suites) == 1, f"{len(suites)} <testsuite> elements, expected 1")
    cases = []
    for suite in suites:
        tcs = suite.findall("testcase")
        failures = sum(1 for tc in tcs if tc.find("failure") is not None)
        skipped = sum(1 for tc in tcs if tc.find("skipped") is not None)
        for element, label in ((suite, "testsuite"), (root, "testsuites")):
            check(int(element.get("tests")) == len(tcs), f"{label} tests={element.get('tests')}, testcases: {len(tcs)}")
            check(int(element.get("failures")) == failures, f"{label} failures={element.get('failures')}, counted {failures}")
            check(int(element.get("skipped")) == skipped, f"{label} skipped={element.get('skipped')}, counted {skipped}")
            check(int(element.get("errors")) == 0, f"{label} errors={element.get('errors')}")
            check(float(element.get("time")) >= 0, f"{label} time={element.get('time')}")
        check(abs(sum(float(tc.get("time")) for tc in tcs) - float(suite.get("time"))) < 1e-3 * max(1, len(tcs)),
              "testsuite time is not the sum of its testcases' times")
        for tc in tcs:
            check(tc.get("name") and tc.get("classname"), f"testcase without name or classname: {tc.attrib}")
            check(float(tc.get("time")) >= 0, f"testcase time {tc.get('time')}")
            check(tc.find("failure") is None or tc.find("skipped") is None, f"{tc.get('name')}: both failure and skipped")
            failure, skip = tc.find("failure"), tc.find("skipped")
            cases.append({
                "name": tc.get("name"), "classname": tc.get("classname"),
                "failure": None if failure is None else failure.get("message"),
                "skipped": None if skip is None else skip.get("message"),
            })
    return root, cases


# ---------------------------------------------------------------- scenarios

def scenario_junit():
    """The op suite on the CPU with an allowlist, skip entries (top level and per device) and a reason
    full of XML markup; the JUnit file agrees with the JSON report of the same run."""
    reason = 'half precision <not yet> & "soon" \u00e9'
    cfg = write_config("ops.json", {
        "config_version": 1,
        "allow": ["add", "add_alpha", "matmul", "relu"],
        "skip": [{"case": "matmul", "dtypes": ["float16", "bf16"], "reason": reason},
                 {"case": "relu", "devices": ["npu"], "reason": "never on this device"}],
        "tolerances": {"matmul": {"rtol": 0.001, "dtypes": {"float32": {"atol": 0.0001}}}},
        "devices": {"cpu": {"skip": [{"case": "add_alpha", "reason": "cpu-only rule"}]}},
    })
    junit = os.path.join(TMP, "ops.xml")
    rc, out, err = run(["--device", "cpu", "--config", cfg, "--junit", junit, "--seed", "7"])
    check(rc == 0, f"exit {rc}, expected 0: {err}")
    rc2, js, err2 = run(["--device", "cpu", "--config", cfg, "--seed", "7", "--json"])
    check(rc2 == 0, f"--json exit {rc2}: {err2}")
    report = json.loads(js)
    _, cases = parse_junit(junit)
    check(len(cases) == len(report["cases"]), f"{len(cases)} testcases, the JSON report has {len(report['cases'])}")
    check(report["config_file"] == cfg and report["suite"] == "ops", f"JSON header: {report['config_file']}, {report['suite']}")
    ops = {c["op"] for c in report["cases"]}
    bases = {c["operator"].split(".")[0] for c in report["cases"]}
    check(bases == {"add", "matmul", "relu"}, f"the allowlist ran the operators {sorted(bases)}")
    check({"add", "add_alpha", "add_broadcast", "matmul", "matmul_batched", "relu"} <= ops, f"the allowlist ran {sorted(ops)}")
    skipped = {c["name"]: c["skipped"] for c in cases if c["skipped"]}
    want_skipped = {"matmul float16", "matmul bfloat16", "matmul_batched float16", "matmul_batched bfloat16"}
    want_skipped |= {c["op"] + " " + c["dtype"] for c in report["cases"] if c["op"] == "add_alpha"}
    check(set(skipped) == want_skipped, f"skipped testcases {sorted(skipped)}, expected {sorted(want_skipped)}")
    check(skipped.get("matmul float16", "").endswith(reason), f"reason not round-tripped: {skipped.get('matmul float16')!r}")
    check(all(c["outcome"] == "skip" for c in report["cases"] if c["op"] + " " + c["dtype"] in want_skipped),
          "a skipped case is not reported as skip in JSON")
    check(report["summary"]["skip"] == len(want_skipped) and report["summary"]["pass"] == len(cases) - len(want_skipped),
          f"summary {report['summary']}: skipped cases must not count as passed")
    check("relu float32" in {c["name"] for c in cases if not c["skipped"]}, "relu was skipped on cpu (its rule names npu)")
    check(f"{len(want_skipped)} skip" in out, "the table's summary does not count the skips")
    check(all(c["classname"].startswith("cts.cpu.") for c in cases), "classnames")


def scenario_doc_examples():
    """The configuration files shown in the docs are accepted (and validate against the schema)."""
    import re
    for page in ("conformance.md", "plugin-guide.md"):
        with open(os.path.join(ARGS.docs, page)) as f:
            blocks = [b for b in re.findall(r"```json\n(.*?)```", f.read(), re.S) if '"config_version"' in b]
        check(blocks, f"{page} shows no configuration file")
        for i, text in enumerate(blocks):
            cfg = write_config(f"doc{i}.json", json.loads(text))
            rc, out, err = run(["--device", "cpu", "--config", cfg, "--ops", "matmul,relu"])
            check(rc == 0, f"{page} example {i}: exit {rc}: {err.strip()}")


def scenario_config_errors():
    """Bad configuration files: exit status 2, one line naming the file, the JSON path and the fix."""
    bad = [
        ({"config_version": 1, "skip": [{"case": "matmull", "reason": "x"}]}, "$.skip[0].case", "did you mean 'matmul'"),
        ({"config_version": 1, "skip": [{"case": "matmul"}]}, "$.skip[0]", "missing \"reason\""),
        ({"config_version": 1, "skip": [{"case": "matmul", "reason": " "}]}, "$.skip[0].reason", "empty reason"),
        ({"config_version": 1, "allow": ["relu", "sofmax"]}, "$.allow[1]", "did you mean 'softmax'"),
        ({"config_version": 1, "allow": ["pointwise_chian"]}, "$.allow[0]", "did you mean 'pointwise_chain'"),
        ({"config_version": 1, "tolerence": {}}, "$.tolerence", "did you mean 'tolerances'"),
        ({"config_version": 1, "tolerances": {"matmul": {"atol": "big"}}}, "$.tolerances.matmul.atol", "expected a finite number"),
        ({"config_version": 1, "tolerances": {"matmul": {"dtypes": {"flaot32": {}}}}}, "$.tolerances.matmul.dtypes.flaot32",
         "did you mean 'float32'"),
        ({"config_version": 1, "devices": {"npu": {"skip": [{"case": "add", "reason": "r", "devices": ["x"]}]}}},
         "$.devices.npu.skip[0].devices", "unknown key"),
        ({"config_version": 2}, "$.config_version", "expected 1"),
        ({"allow": ["add"]}, "$:", "missing \"config_version\""),
    ]
    for i, (obj, path, fix) in enumerate(bad):
        cfg = os.path.join(TMP, f"bad{i}.json")
        with open(cfg, "w") as f:
            json.dump(obj, f)
        rc, out, err = run(["--device", "cpu", "--config", cfg])
        check(rc == 2, f"{obj}: exit {rc}, expected 2")
        check(f"{cfg}: {path}" in err and fix in err, f"{obj}: message {err.strip()!r} lacks {path!r} / {fix!r}")
        check(out == "", f"{obj}: ran cases despite the bad file")
    cfg = os.path.join(TMP, "notjson.json")
    with open(cfg, "w") as f:
        f.write('{"config_version": 1,\n  "skip": [ }\n')
    rc, _, err = run(["--device", "cpu", "--config", cfg])
    check(rc == 2 and "not JSON" in err and "line 2" in err, f"not JSON: exit {rc}, {err.strip()!r}")
    rc, _, err = run(["--device", "cpu", "--config", os.path.join(TMP, "missing.json")])
    check(rc == 2 and "cannot be read" in err, f"missing file: exit {rc}, {err.strip()!r}")
    rc, _, err = run(["--device", "cpu", "--frobnicate"])
    check(rc == 2, f"unknown flag: exit {rc}")
    rc, _, err = run(["--compiler", "a", "--quantizer", "b"])
    check(rc == 2, f"--compiler with --quantizer: exit {rc}")
    rc, _, err = run(["--compiler", "a", "--dtypes", "float16"])
    check(rc == 2 and "op suite" in err, f"--dtypes with --compiler: exit {rc}, {err.strip()!r}")
    rc, out, _ = run(["--list"])
    check(rc == 0 and "add_alpha" in out.split() and "matmul_bias_relu" in out.split() and "mlp_relu" in out.split(),
          "--list lacks cases or programs")


def graph_run(args, plugin_path, env=None):
    junit = os.path.join(TMP, "graph.xml")
    rc, out, err = run(args + ["--junit", junit], env, plugin_path)
    _, cases = parse_junit(junit)
    return rc, out, err, cases


def scenario_compilers():
    """The in-tree compiler plugins give the interpreter's results on every program."""
    names = None
    runs = [("chain_compiler", ARGS.chain), ("graph_printer", ARGS.printer)]
    if ARGS.accelerator:
        runs.append(("my_hardware_device_compiler", ""))
    for plugin, path in runs:
        rc, out, err, cases = graph_run(["--compiler", plugin], path)
        check(rc == 0, f"{plugin}: exit {rc}: {out}{err}")
        check(not any(c["failure"] for c in cases), f"{plugin}: failures {[c['failure'] for c in cases if c['failure']]}")
        got = [c["name"] for c in cases]
        names = names or got
        check(got == names and len(got) >= 7, f"{plugin}: programs {got}")
        check(all(c["classname"] == f"compiler.{plugin}.{c['name']}" for c in cases), f"{plugin}: classnames")
        rc, js, err = run(["--compiler", plugin, "--json", "--seed", "5"], None, path)
        report = json.loads(js)
        check(report["suite"] == "compiler" and report["plugin"] == plugin, f"{plugin}: JSON header")
        taken = [int(c["details"].split()[2]) for c in report["cases"] if c["outcome"] == "pass"]
        auto = [c for c in report["cases"] if c["op"] == "automatic_dynamic"]
        check(auto and auto[0]["details"].endswith("in 2 artifacts"),
              f"{plugin}: automatic_dynamic is static first, then one symbolic recompile: {auto}")
        if plugin == "graph_printer":
            check(all(t == 0 for t in taken), f"graph_printer takes no node, reported {taken}")
        else:
            check(any(t > 0 for t in taken), f"{plugin} took no partition: {taken}")
        if plugin == "my_hardware_device_compiler":
            check(report["device"].startswith("my_hardware_device"), f"device {report['device']}")
            conv = [c for c in report["cases"] if c["op"] == "conv_block"]
            check(conv and conv[0]["outcome"] == "unsupported", "conv_block on the accelerator: conv2d has no kernel there")


def scenario_broken_compiler():
    """A compiler plugin that computes wrong results fails, each failure naming the program and the
    max error; a tolerance override for one program makes that one pass."""
    env = {"TESSERA_TEST_CHAIN_FAULT": "wrong_results"}
    rc, out, err, cases = graph_run(["--compiler", "chain_compiler_faulty", "--seed", "3"], ARGS.faulty, env)
    check(rc == 1, f"exit {rc}, expected 1: {err}")
    failed = {c["name"]: c["failure"] for c in cases if c["failure"]}
    check("pointwise_chain" in failed, f"pointwise_chain not flagged: {cases}")
    for name, msg in failed.items():
        check(f"program '{name}'" in msg and "max error" in msg, f"{name}: message {msg!r}")
    check("max error 0.25 " in failed.get("pointwise_chain", ""), f"the skew is 0.25: {failed.get('pointwise_chain')!r}")
    check("FAIL" in out and "pointwise_chain" in out, "the table does not show the failure")
    cfg = write_config("loose.json", {"config_version": 1, "tolerances": {"pointwise_chain": {"atol": 0.3}},
                                      "skip": [{"case": "conv_block", "reason": "vendor ticket 42"}]})
    rc, _, err, cases = graph_run(["--compiler", "chain_compiler_faulty", "--config", cfg], ARGS.faulty, env)
    by_name = {c["name"]: c for c in cases}
    check(rc == 1, f"with the tolerance override: exit {rc}, expected 1 (other programs still fail)")
    check(by_name["pointwise_chain"]["failure"] is None, "atol 0.3 for pointwise_chain did not apply")
    check("vendor ticket 42" in (by_name["conv_block"]["skipped"] or ""), "conv_block not skipped with its reason")
    check(by_name["matmul_bias_relu"]["failure"] is not None, "the override leaked to another program")
    rc, _, err, _ = graph_run(["--compiler", "chain_compiler_faulty"], ARGS.faulty)  # no fault asked
    check(rc == 0, f"the same plugin without the fault: exit {rc}: {err}")


def scenario_quantizers():
    """The sample quantizer: lowered int8 programs match its quantize/dequantize programs, every
    quantized linear/conv2d lowered; a quantizer that gives an edge two specs, and one whose
    annotations the int8 kernels cannot take, fail by program."""
    rc, out, err, cases = graph_run(["--quantizer", "keep_ends_quantizer"], ARGS.quantizers)
    check(rc == 0, f"keep_ends_quantizer: exit {rc}: {out}{err}")
    check(len(cases) == 3 and not any(c["failure"] or c["skipped"] for c in cases), f"keep_ends_quantizer: {cases}")
    rc, js, _ = run(["--quantizer", "keep_ends_quantizer", "--json"], None, ARGS.quantizers)
    report = json.loads(js)
    for c in report["cases"]:
        words = c["details"].replace(",", "").split()
        quantized, lowered = int(words[words.index("linear/conv2d:") + 1]), int(words[-1])
        check(quantized > 0 and lowered >= quantized, f"{c['op']}: {c['details']}")
    rc, out, err, cases = graph_run(["--quantizer", "two_specs_quantizer"], ARGS.quantizers)
    check(rc == 1, f"two_specs_quantizer: exit {rc}, expected 1")
    check(cases and all(c["failure"] and "failed to annotate" in c["failure"] and f"program '{c['name']}'" in c["failure"]
                        for c in cases), f"two_specs_quantizer: {cases}")
    rc, out, err, cases = graph_run(["--quantizer", "unlowerable_quantizer"], ARGS.quantizers)
    check(rc == 1, f"unlowerable_quantizer: exit {rc}, expected 1: {out}{err}")
    check(cases and all(c["failure"] and "not lowered to int8 kernels" in c["failure"] and "linear" in c["failure"]
                        for c in cases), f"unlowerable_quantizer: {cases}")
    rc, _, err, cases = graph_run(["--quantizer", "no_such_quantizer"], ARGS.quantizers)
    check(rc == 1 and "no_such_quantizer" in err, f"unknown quantizer: exit {rc}: {err}")
    check(len(cases) == 1 and cases[0]["name"] == "setup" and cases[0]["failure"], "the JUnit file of a failed setup")


def main():
    global ARGS
    p = argparse.ArgumentParser()
    p.add_argument("--tessera", required=True)
    p.add_argument("--scenario", required=True)
    p.add_argument("--chain", default="")
    p.add_argument("--faulty", default="")
    p.add_argument("--printer", default="")
    p.add_argument("--quantizers", default="")
    p.add_argument("--schema", default="")
    p.add_argument("--accelerator", action="store_true")
    p.add_argument("--docs", default="")
    ARGS = p.parse_args()
    globals()["scenario_" + ARGS.scenario]()
    if FAILURES:
        print(f"{len(FAILURES)} check(s) failed")
        sys.exit(1)
    print("ok")


if __name__ == "__main__":
    main()
