#!/usr/bin/env bash
# Out-of-tree SDK stage: installs the release build to a temporary prefix, builds plugins/template
# and samples/my_hardware_device (the accelerator and its compiler plugin) against it with
# find_package(Tessera), runs their tests, builds the graph-printer compiler plugin and the sample
# quantizer plugin against it and runs their tests with them, then runs the conformance kit
# (`tessera check`) of the installed runtime on the accelerator (with a configuration file and
# JUnit reports), its compiler plugin and the sample quantizer, and for every device present.
# Environment: TESSERA_BUILD_DIR (default build/release), JOBS.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$(pwd)
BUILD=${TESSERA_BUILD_DIR:-build/release}
JOBS=${JOBS:-2}
[ -f "$BUILD/CMakeCache.txt" ] || { echo "10_out_of_tree: no build in $BUILD; run ./run.sh test first" >&2; exit 1; }

WORK=$(mktemp -d "${TMPDIR:-/tmp}/tessera-oot.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
PREFIX=$WORK/prefix
echo "install $BUILD -> $PREFIX"
cmake --install "$BUILD" --prefix "$PREFIX" >/dev/null

# The installed runtime must find its own plugins (next to the library) with no configuration.
unset TESSERA_PLUGIN_PATH TESSERA_PLUGINS_SELECT TESSERA_PLUGINS_DISABLE
"$PREFIX/bin/tessera" devices

for project in plugins/template samples/my_hardware_device; do
  name=$(basename "$project")
  echo "==> out-of-tree build of $project"
  cmake -S "$ROOT/$project" -B "$WORK/build-$name" -G Ninja -DCMAKE_BUILD_TYPE=Release \
        -DCMAKE_PREFIX_PATH="$PREFIX" >/dev/null
  cmake --build "$WORK/build-$name" -j "$JOBS"
  (cd "$WORK/build-$name" && ctest --output-on-failure)
  # Installing the vendor's plugin next to the runtime's makes it discoverable with no configuration.
  cmake --install "$WORK/build-$name" --prefix "$WORK/vendor-$name" >/dev/null
  ls "$WORK/vendor-$name/lib/tessera/plugins/"*.json "$WORK/vendor-$name/lib/tessera/plugins/"lib*.so >/dev/null
done

# The accelerator's compiler plugin (a second plugin of the same project, tested above by
# test_my_hardware_device_compiler) is installed next to the accelerator and finds it there: it
# links the accelerator library by soname with RUNPATH $ORIGIN (Note [Shared driver library]).
mhd_plugins="$WORK/vendor-my_hardware_device/lib/tessera/plugins"
ls "$mhd_plugins/my_hardware_device_compiler.json" >/dev/null
dynamic=$(readelf -d "$mhd_plugins/libmy_hardware_device_compiler.so")
grep -q 'NEEDED.*\[libmy_hardware_device.so\]' <<<"$dynamic"
grep -q 'R.*PATH.*\[\$ORIGIN\]' <<<"$dynamic"

# A compiler plugin in C built against the installed SDK: the graph ABI test of this build loads it
# (through TESSERA_PLUGIN_PATH) and checks that it prints graphs as graph_string() does.
echo "==> out-of-tree build of tests/compiler/graph_printer"
cmake -S "$ROOT/tests/compiler/graph_printer" -B "$WORK/build-graph_printer" -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_PREFIX_PATH="$PREFIX" >/dev/null
cmake --build "$WORK/build-graph_printer" -j "$JOBS"
if [ -x "$BUILD/bin/test_graph_abi" ]; then
  TESSERA_PLUGIN_PATH="$WORK/build-graph_printer/plugins" "$BUILD/bin/test_graph_abi"
fi

# A quantizer plugin in C++ (QuantizerBase) built against the installed SDK: the quantization tests load
# it from its manifest and quantize with it (docs/quantization.md, "Writing a quantizer").
echo "==> out-of-tree build of samples/keep_ends_quantizer"
cmake -S "$ROOT/samples/keep_ends_quantizer" -B "$WORK/build-keep_ends_quantizer" -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_PREFIX_PATH="$PREFIX" >/dev/null
cmake --build "$WORK/build-keep_ends_quantizer" -j "$JOBS"
if [ -x "$BUILD/bin/test_quant" ]; then
  TESSERA_PLUGINS_SELECT=cpu,keep_ends_quantizer TESSERA_PLUGIN_PATH="$WORK/build-keep_ends_quantizer/plugins" \
    "$BUILD/bin/test_quant" --gtest_filter='QuantPlugin.*'
fi

# The seed example as an application built against the package.
echo "==> out-of-tree build of samples/seed_example"
cmake -S "$ROOT/samples/seed_example" -B "$WORK/build-seed" -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_PREFIX_PATH="$PREFIX" >/dev/null
cmake --build "$WORK/build-seed" -j "$JOBS"
TESSERA_PLUGIN_PATH="$WORK/build-my_hardware_device/lib/tessera/plugins" "$WORK/build-seed/seed_example"

# The conformance kit of the installed runtime against the out-of-tree accelerator, as a vendor's CI
# runs it (docs/conformance.md): a configuration file and a JUnit report, checked to parse; then
# the graph suites through its compiler plugin and the sample quantizer, then every device the
# installed runtime provides on its own.
echo "==> tessera check --device my_hardware_device (out-of-tree plugin)"
cat > "$WORK/cts_config.json" <<'JSON'
{ "config_version": 1,
  "skip": [{"case": "conv_block", "devices": ["my_hardware_device"],
            "reason": "conv2d has no kernel on the accelerator and its plugin forbids the CPU fallback"}] }
JSON
mhd_path="$WORK/build-my_hardware_device/lib/tessera/plugins"
TESSERA_PLUGIN_PATH="$mhd_path" "$PREFIX/bin/tessera" check --device my_hardware_device \
  --config "$WORK/cts_config.json" --junit "$WORK/junit-my_hardware_device.xml"
TESSERA_PLUGIN_PATH="$mhd_path" "$PREFIX/bin/tessera" check --compiler my_hardware_device_compiler \
  --config "$WORK/cts_config.json" --junit "$WORK/junit-my_hardware_device_compiler.xml"
TESSERA_PLUGIN_PATH="$WORK/build-keep_ends_quantizer/plugins" "$PREFIX/bin/tessera" check \
  --quantizer keep_ends_quantizer --junit "$WORK/junit-keep_ends_quantizer.xml"
python3 - "$WORK"/junit-*.xml <<'PY'
import sys, xml.etree.ElementTree as ET
for path in sys.argv[1:]:
    suite = ET.parse(path).getroot().find("testsuite")
    cases = suite.findall("testcase")
    assert cases and int(suite.get("tests")) == len(cases), path
    assert int(suite.get("failures")) == sum(c.find("failure") is not None for c in cases) == 0, path
    print(f"{path}: {len(cases)} testcases, {suite.get('skipped')} skipped")
PY
devices=$("$PREFIX/bin/tessera" devices --json |
  python3 -c 'import json, sys; print(" ".join(sorted({d["type"] for d in json.load(sys.stdin)["devices"]})))')
for dev in $devices; do
  echo "==> tessera check --device $dev (installed)"
  "$PREFIX/bin/tessera" check --device "$dev"
done
echo "10_out_of_tree: ok"
