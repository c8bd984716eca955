#!/bin/sh
# The built plugin's ABI surface (every type reachable from nvfp4_mla_plugin_v1, as declared in
# abi/*.h) against the ABI 1.0 baseline kept in abi/baseline/. Any reported change fails: a
# deliberate one refreshes the baseline (command below) and gets an entry in abi/CHANGELOG.md.
# Skips (77) where abigail-tools is not installed.
#   usage: check_abi_baseline.sh SOURCE_ROOT PLUGIN.so
set -u
src=$1
so=$2
command -v abidiff >/dev/null 2>&1 || { echo "abidiff not installed (apt-get install abigail-tools): skipped"; exit 77; }
abidiff --headers-dir2 "$src/abi" --suppressions "$src/abi/baseline/internal.suppr" \
    "$src/abi/baseline/libnvfp4_mla-1.0.abi" "$so"
rc=$?
if [ $rc -ne 0 ]; then
    echo "FAIL: abidiff exit $rc (4 = ABI change, 8 = incompatible change) against abi/baseline."
    echo "If the change is deliberate: bump NVFP4_MLA_ABI_MINOR (append-only) or MAJOR, note it in abi/CHANGELOG.md, and run"
    echo "  abidw --headers-dir abi/ --drop-undefined-syms --suppressions abi/baseline/internal.suppr $so > abi/baseline/libnvfp4_mla-1.0.abi"
    exit 1
fi
echo "ok: no change to the ABI surface against abi/baseline/libnvfp4_mla-1.0.abi"
