#!/bin/sh
# The built plugin exports exactly the ABI entry, and needs only the C library family and cJSON
# (no CUDA runtime, no libcrypto: both are linked statically). Usage: check_plugin_elf.sh PLUGIN.so
set -eu
so=$1
exports=$(nm -D --defined-only "$so" | awk '$2 != "A" {print $3}' | sed 's/@.*//' | sort -u)
if [ "$exports" != "nvfp4_mla_plugin_v1" ]; then
    echo "FAIL: $so exports [$exports], expected only nvfp4_mla_plugin_v1"; exit 1
fi
for lib in $(readelf -d "$so" | sed -n 's/.*NEEDED.*\[\(.*\)\]/\1/p'); do
    case "$lib" in
        libc.so.*|libm.so.*|libdl.so.*|libpthread.so.*|librt.so.*|ld-linux*.so.*|libcjson.so.*) ;;
        *) echo "FAIL: $so needs $lib (allowed: the C library family and libcjson)"; exit 1 ;;
    esac
done
echo "ok: exports nvfp4_mla_plugin_v1 only; NEEDED: $(readelf -d "$so" | sed -n 's/.*NEEDED.*\[\(.*\)\]/\1/p' | tr '\n' ' ')"
