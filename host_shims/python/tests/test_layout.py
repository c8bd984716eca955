"""The ctypes mirrors against the C compiler's layout (the manifest the build emits)."""
import ctypes
import json
import os

import pytest

from nvfp4_mla import _abi

MIRRORS = {
    "nvfp4_mla_header_t": _abi.Header, "nvfp4_mla_capability_t": _abi.Capability, "nvfp4_mla_tensor_t": _abi.Tensor,
    "nvfp4_mla_write_args_t": _abi.WriteArgs, "nvfp4_mla_gather_args_t": _abi.GatherArgs,
    "nvfp4_mla_attend_args_t": _abi.AttendArgs, "nvfp4_mla_host_desc_t": _abi.HostDesc,
    "nvfp4_mla_init_args_t": _abi.InitArgs, "nvfp4_mla_context_info_t": _abi.ContextInfo,
    "nvfp4_mla_config_request_t": _abi.ConfigRequest, "nvfp4_mla_config_info_t": _abi.ConfigInfo,
    "nvfp4_mla_plugin_t": _abi.Plugin,
}


@pytest.fixture(scope="module")
def manifest():
    path = os.environ.get("NVFP4_MLA_LAYOUT_MANIFEST")
    assert path, "NVFP4_MLA_LAYOUT_MANIFEST is not set"
    with open(path) as f:
        return json.load(f)


def test_manifest_should_cover_every_mirrored_struct(manifest):
    assert set(manifest) - {"constants"} == set(MIRRORS)


def test_layout_constants_should_equal_the_c_header(manifest):
    c = manifest["constants"]
    assert _abi.LAYOUT_FP8_ROPE_368 == c["NVFP4_MLA_LAYOUT_FP8_ROPE_368"]
    assert _abi.LAYOUT_BF16_ROPE_432 == c["NVFP4_MLA_LAYOUT_BF16_ROPE_432"]
    assert _abi.LAYOUT_FP8_DS_MLA_656 == c["NVFP4_MLA_LAYOUT_FP8_DS_MLA_656"]
    assert _abi.RECORD_BYTES == {c["NVFP4_MLA_LAYOUT_FP8_ROPE_368"]: c["NVFP4_MLA_RECORD_BYTES_368"],
                                 c["NVFP4_MLA_LAYOUT_BF16_ROPE_432"]: c["NVFP4_MLA_RECORD_BYTES_432"],
                                 c["NVFP4_MLA_LAYOUT_FP8_DS_MLA_656"]: c["NVFP4_MLA_RECORD_BYTES_656"]}
    assert (_abi.SCALE_STATIC, _abi.SCALE_PER_TOKEN) == (c["NVFP4_MLA_SCALE_STATIC"], c["NVFP4_MLA_SCALE_PER_TOKEN"])


def test_capabilities_should_equal_the_c_header(manifest):
    assert dict(_abi.CAPABILITIES) == manifest["constants"]["capabilities"]


@pytest.mark.parametrize("c_name", sorted(MIRRORS))
def test_ctypes_layout_should_equal_the_c_layout(manifest, c_name):
    mirror = MIRRORS[c_name]
    assert ctypes.sizeof(mirror) == manifest[c_name]["size"], c_name
    for member, offset in manifest[c_name]["fields"].items():
        assert getattr(mirror, member).offset == offset, f"{c_name}.{member}"
