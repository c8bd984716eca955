"""The ctypes mirrors against the C headers: struct layouts, every constant, and the results of the
record rules of nvfp4_mla_record.h (the manifest the build emits, host_shims/python/layout_manifest.c)."""
import ctypes
import json
import math
import os

import pytest

from nvfp4_mla import _abi, settings

MIRRORS = {
    "nvfp4_mla_header_t": _abi.Header, "nvfp4_mla_capability_t": _abi.Capability, "nvfp4_mla_tensor_t": _abi.Tensor,
    "nvfp4_mla_write_args_t": _abi.WriteArgs, "nvfp4_mla_gather_args_t": _abi.GatherArgs,
    "nvfp4_mla_attend_args_t": _abi.AttendArgs, "nvfp4_mla_merge_args_t": _abi.MergeArgs,
    "nvfp4_mla_host_desc_t": _abi.HostDesc,
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


def number(value):
    return {"inf": math.inf, "-inf": -math.inf, "nan": math.nan}.get(value, value)


def test_manifest_should_cover_every_mirrored_struct(manifest):
    assert set(manifest) - {"constants", "rules", "settings"} == set(MIRRORS)


def test_every_constant_should_equal_the_c_header(manifest):
    c = manifest["constants"]
    numbers = {k: v for k, v in c.items() if k not in ("strings", "capabilities", "writer_policies")}
    assert len(numbers) > 60
    for name, value in numbers.items():
        assert getattr(_abi, name.removeprefix("NVFP4_MLA_")) == value, name
    for name, value in c["strings"].items():
        assert getattr(_abi, name.removeprefix("NVFP4_MLA_")) == value, name


def test_capabilities_should_equal_the_c_header(manifest):
    assert dict(_abi.CAPABILITIES) == manifest["constants"]["capabilities"]
    assert all(_abi.cap_name(bit) == name for name, bit in manifest["constants"]["capabilities"].items())


def test_writer_policies_should_equal_the_c_header(manifest):
    policies = manifest["constants"]["writer_policies"]
    assert list(policies) == list(_abi.WRITER_POLICIES) and "rtn" in policies and "mse" in policies
    for name, (policy_id, c_name, cap) in policies.items():
        assert (_abi.WRITER_POLICIES[name], _abi.writer_policy_name(policy_id), _abi.writer_policy_cap(policy_id)) == \
            (policy_id, c_name, cap)
    assert _abi.writer_policy_name(99) == "unknown"


def test_layout_rules_should_equal_the_c_header(manifest):
    r = manifest["rules"]
    for layout, size, name, ops in r["record_bytes"]:
        assert (_abi.record_bytes(layout), _abi.layout_name(layout), _abi.layout_ops(layout)) == (size, name, ops)
    for layout, mode, has in r["layout_has_mode"]:
        assert int(_abi.layout_has_mode(layout, mode)) == has, (layout, mode)
    for mode, scale in r["default_outer_scale"]:
        assert _abi.default_outer_scale(mode) == number(scale)


def test_call_rules_should_equal_the_c_header(manifest):
    r = manifest["rules"]
    for ops, layout, mode, bits in r["caps_needed"]:
        assert _abi.caps_needed(ops, layout, mode) == bits, (ops, layout, mode)
    assert len(r["mode_check"]) > 500
    for op, layout, mode, scale, result in r["mode_check"]:
        assert _abi.mode_check(op, layout, mode, number(scale)) == result, (op, layout, mode, scale)


@pytest.mark.parametrize("c_name", sorted(MIRRORS))
def test_ctypes_layout_should_equal_the_c_layout(manifest, c_name):
    mirror = MIRRORS[c_name]
    assert ctypes.sizeof(mirror) == manifest[c_name]["size"], c_name
    for member, offset in manifest[c_name]["fields"].items():
        assert getattr(mirror, member).offset == offset, f"{c_name}.{member}"


def test_settings_table_should_equal_the_c_table(manifest):
    rows = manifest["settings"]["rows"]
    assert [r["name"] for r in rows] == [s.name for s in settings.SETTINGS]
    assert len(rows) >= 8  # the configuration's four, init's three, the loader's NVFP4_MLA_PLUGIN
    for row, mirror in zip(rows, settings.SETTINGS):
        assert (row["kind"], row["reader"], row["unset"], tuple(row["choices"]), row["what"], row["lo"], row["hi"]) == \
            (mirror.kind, mirror.reader, mirror.unset, mirror.choices, mirror.what, mirror.lo, mirror.hi), row["name"]
    assert settings.WRITER_POLICY.choices == tuple(_abi.WRITER_POLICIES)


def test_settings_rule_should_equal_the_c_rule(manifest):
    parses = manifest["settings"]["parses"]
    assert len(parses) >= 8 * 25 and any(rc for _, _, rc, _ in parses) and any(not rc for _, _, rc, _ in parses)
    for row, value, rc, result in parses:
        mirror = settings.SETTINGS[row]
        try:
            got = settings.parse(mirror, value)
        except settings.SettingError as exc:
            assert (rc, str(exc)) == (-1, result), (mirror.name, value)
            continue
        assert rc == 0, (mirror.name, value, result)
        if mirror.kind == "choice":
            got = mirror.choices.index(got)
        assert got == result, (mirror.name, value)
