"""Loading and the refusal matrix: the same mock plugins and the same words as the C loader."""
import os
import platform
import struct
import sys

import pytest

import nvfp4_mla
from nvfp4_mla import _abi, loader
from nvfp4_mla.errors import member


def mock(mock_dir, name):
    return os.path.join(mock_dir, f"libmock_{name}.so")


def test_loader_should_accept_the_real_plugin_by_file_and_by_folder(plugin_path):
    assert nvfp4_mla.load(plugin_path).abi == "1.1"
    folder = nvfp4_mla.load(os.path.dirname(plugin_path))
    assert folder.path.endswith("/libnvfp4_mla.so")
    assert folder.table.record_format == b"nvfp4_ds_mla"


def test_loader_should_follow_the_environment(monkeypatch, plugin_path):
    monkeypatch.setenv("NVFP4_MLA_PLUGIN", "none")
    with pytest.raises(nvfp4_mla.PluginDisabled, match=r"disabled \(NVFP4_MLA_PLUGIN=none\)"):
        nvfp4_mla.load()
    monkeypatch.delenv("NVFP4_MLA_PLUGIN")
    with pytest.raises(nvfp4_mla.PluginNotSelected, match="set NVFP4_MLA_PLUGIN"):
        nvfp4_mla.load()
    monkeypatch.setenv("NVFP4_MLA_PLUGIN", "/nonexistent/libnvfp4_mla.so")
    with pytest.raises(nvfp4_mla.PluginError, match="cannot load nvfp4-mla plugin /nonexistent/libnvfp4_mla.so:") as err:
        nvfp4_mla.load()
    assert err.value.reason == "not_found"
    monkeypatch.setenv("NVFP4_MLA_PLUGIN", plugin_path)
    assert nvfp4_mla.load().path == plugin_path


@pytest.mark.parametrize("name, words, reason", [
    ("future_major", "does not export nvfp4_mla_plugin_v1 (host ABI 1.1); it implements ABI major 2 only",
     "abi_mismatch"),
    ("wrong_major", "refused: ABI major mismatch (plugin ABI 2.0, host ABI 1.1)", "abi_mismatch"),
    ("bad_magic", "refused: wrong magic (0x12345678, expected 0x4d34464e)", "not_a_plugin"),
    ("null_entry", "refused: its entry returned no table", "not_a_plugin"),
    ("tiny_table", "refused: table too small (struct_size 16 <", "abi_mismatch"),
    ("not_a_plugin", "it is not an nvfp4-mla plugin", "not_a_plugin"),
    ("null_init", 'refused: table member "init" is NULL (plugin ABI 1.1, host ABI 1.1; every member its '
                  "struct_size", "incomplete_table"),
    ("null_attend", 'refused: table member "attend" is NULL', "incomplete_table"),
    ("null_merge", 'refused: table member "merge" is NULL (plugin ABI 1.1', "incomplete_table"),
    ("null_version", 'refused: table member "version" is NULL', "incomplete_table"),
])
def test_loader_should_refuse_with_the_c_loaders_words(mock_dir, name, words, reason):
    with pytest.raises(nvfp4_mla.PluginError) as err:
        nvfp4_mla.load(mock(mock_dir, name))
    assert words in str(err.value)
    assert mock(mock_dir, name) in str(err.value)
    assert err.value.reason == reason


def test_require_should_never_reach_a_null_member(mock_dir, monkeypatch):
    """Issue 13, case 2: the host is refused at load, before require() could call config_create."""
    monkeypatch.setenv("NVFP4_MLA_PLUGIN", mock(mock_dir, "null_init"))
    with pytest.raises(nvfp4_mla.PluginError, match='table member "init" is NULL'):
        nvfp4_mla.require(nvfp4_mla.load(), nvfp4_mla.CacheFormat())


def test_members_past_an_older_table_should_be_unsupported_not_read(mock_dir):
    old = nvfp4_mla.load(mock(mock_dir, "old_minor_null_attend"))  # attend is NULL but not covered
    assert member(old, "gather")
    with pytest.raises(nvfp4_mla.Unsupported, match=r"its table \(\d+ bytes\) has no attend member"):
        member(old, "attend")


@pytest.mark.parametrize("value, words", [
    (" none", 'NVFP4_MLA_PLUGIN=" none" has leading or trailing whitespace: give the path without it'),
    ("   ", 'NVFP4_MLA_PLUGIN="   " has leading or trailing whitespace'),
    ("None", 'NVFP4_MLA_PLUGIN="None" names no file and is not the keyword "none" (exactly, lower case)'),
    ("off", 'NVFP4_MLA_PLUGIN="off" names no file'),
])
def test_loader_should_refuse_a_malformed_selection(monkeypatch, value, words):
    monkeypatch.setenv("NVFP4_MLA_PLUGIN", value)
    with pytest.raises(nvfp4_mla.PluginError) as err:
        nvfp4_mla.load()
    assert words in str(err.value)
    assert err.value.reason == "invalid_selection"


def test_loader_should_take_a_bare_name_as_a_file_in_the_working_folder(monkeypatch, tmp_path, plugin_path):
    """Issue 37: as the C loader, never the dynamic loader's search path ("libc.so.6" is not looked up)."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(nvfp4_mla.PluginError) as err:
        nvfp4_mla.load("libc.so.6")
    assert err.value.reason == "not_found"
    assert str(err.value).startswith("cannot load nvfp4-mla plugin ./libc.so.6: ")
    os.symlink(plugin_path, tmp_path / "libnvfp4_mla.so")
    assert nvfp4_mla.load("libnvfp4_mla.so").path == "./libnvfp4_mla.so"


def test_require_should_name_every_missing_capability(mock_dir):
    p = nvfp4_mla.load(mock(mock_dir, "no_per_token"))
    with pytest.raises(nvfp4_mla.PluginError) as err:
        loader.require_capabilities(p, _abi.LAYOUT_FP8_ROPE_368, _abi.SCALE_PER_TOKEN)
    assert str(err.value) == (f"nvfp4-mla plugin {mock(mock_dir, 'no_per_token')} (ABI 1.1, host ABI 1.1) cannot serve "
                              "per-token scales on fp8_rope_368 (requested by the configuration): missing "
                              "write.per_token_scale, read.latent_scale_per_token")
    assert "serves static scales" in loader.require_capabilities(p, _abi.LAYOUT_FP8_ROPE_368, _abi.SCALE_STATIC)


def test_older_and_future_minors_should_be_read_by_struct_size(mock_dir):
    old = nvfp4_mla.load(mock(mock_dir, "old_minor"))
    assert old.capability_bits() & _abi.CAP["op.gather"]
    assert not old.capability_bits() & _abi.CAP["op.attend"]  # the member is past its table
    with pytest.raises(nvfp4_mla.PluginError, match="missing op.attend"):
        loader.require_capabilities(old, _abi.LAYOUT_FP8_ROPE_368, _abi.SCALE_STATIC, extra=_abi.CAP["op.attend"])
    future = nvfp4_mla.load(mock(mock_dir, "future_minor"))
    assert future.abi == "1.7"
    assert ("future.capability", 3) in future.capabilities()


def test_merge_should_be_masked_where_a_1_0_table_ends_before_it(mock_dir, plugin):
    old = nvfp4_mla.load(mock(mock_dir, "v1_0_merge_bit"))  # sets the bit, but its table ends at attend
    assert old.table.capability_bits & _abi.CAP["op.merge_partials"]
    assert not old.capability_bits() & _abi.CAP["op.merge_partials"]
    dcp = _abi.CAP["op.attend"] | _abi.CAP["op.merge_partials"]
    with pytest.raises(nvfp4_mla.PluginError, match=r"\(ABI 1\.0, host ABI 1\.1\) cannot serve static scales on "
                                                    r"fp8_rope_368 \(requested by the configuration\): missing "
                                                    r"op\.merge_partials$"):
        loader.require_capabilities(old, _abi.LAYOUT_FP8_ROPE_368, _abi.SCALE_STATIC, extra=dcp)
    with pytest.raises(nvfp4_mla.Unsupported, match=r"has no merge member"):
        member(old, "merge")
    assert "serves static scales" in loader.require_capabilities(plugin, _abi.LAYOUT_FP8_ROPE_368, _abi.SCALE_STATIC, extra=dcp)


def test_require_on_the_real_plugin_should_accept_both_modes_and_refuse_what_a_device_lacks(plugin):
    assert "serves per-token scales on fp8_rope_368" in nvfp4_mla.require(
        plugin, nvfp4_mla.CacheFormat(dynamic_scale=True, fp8_rope=True))
    assert "serves static scales on bf16_rope_432" in nvfp4_mla.require(plugin, nvfp4_mla.CacheFormat())
    assert "does not use the plugin" in nvfp4_mla.require(plugin, nvfp4_mla.CacheFormat(), cache_dtype="fp8")
    without_readers = plugin.capability_bits() & ~_abi.CAP["read.latent_scale_per_token"]
    with pytest.raises(nvfp4_mla.PluginError, match="missing read.latent_scale_per_token"):
        nvfp4_mla.require(plugin, nvfp4_mla.CacheFormat(dynamic_scale=True, fp8_rope=True), available=without_readers)


def _cut_copy(tmp_path, plugin_path, size, patch=None):
    data = bytearray(open(plugin_path, "rb").read())
    if patch:
        data[patch[0]] = patch[1]
    path = tmp_path / "libnvfp4_mla.so"
    path.write_bytes(bytes(data[:size]))
    return str(path), len(data)


@pytest.mark.parametrize("cut", [0, 10, 64, 1024, 4096, 20000, 65536, 1 << 20, "half", "-4096", "-1"])
def test_loader_should_refuse_a_plugin_file_cut_short(tmp_path, plugin_path, cut):
    """Issue 48, case 1: nvfp4_mla.load() of a cut-short plugin died of SIGBUS inside dlopen; now the
    file is refused before dlopen, in the C loader's words (tests/test_loader.c), naming the file."""
    whole = os.path.getsize(plugin_path)
    size = {"half": whole // 2, "-4096": whole - 4096, "-1": whole - 1}.get(cut, cut)
    path, _ = _cut_copy(tmp_path, plugin_path, size)
    with pytest.raises(nvfp4_mla.PluginError) as err:
        nvfp4_mla.load(path)
    words = str(err.value)
    assert words.startswith(f"cannot load nvfp4-mla plugin {path}: ")
    assert (f"the file is {size} bytes" if size < 64 else f"the {size}-byte file") in words
    assert "cut short: an interrupted copy or a full disk?" in words
    assert err.value.reason == "load_error"
    if size == 20000:
        assert "its loadable segment (program header 0) ends at byte" in words
    if size == whole - 1:
        assert "its section headers end at byte" in words


@pytest.mark.parametrize("offset, value, words", [
    (0, ord("X"), "not an ELF file (it does not start with \\x7fELF)"),
    (4, 1, "a 32-bit ELF file; this host is 64-bit"),
    (5, 2, "an ELF file of the other byte order (EI_DATA 2; this host's is 1)"),
    (16, 2, "an ELF file of type 2, not a shared object (ET_DYN, 3)"),
    (18, 40, "an ELF file for machine 40; this host is machine"),
    (54, 32, "an ELF file whose program headers are 32 bytes each, not 56"),
])
def test_loader_should_refuse_files_that_are_not_this_hosts_shared_objects(tmp_path, plugin_path, offset, value,
                                                                           words):
    path, whole = _cut_copy(tmp_path, plugin_path, None, (offset, value))
    with pytest.raises(nvfp4_mla.PluginError) as err:
        nvfp4_mla.load(path)
    assert str(err.value).startswith(f"cannot load nvfp4-mla plugin {path}: ")
    assert words in str(err.value)
    assert err.value.reason == "load_error"


def test_loader_should_refuse_a_fifo_without_blocking(tmp_path):
    path = str(tmp_path / "libnvfp4_mla.so")
    os.mkfifo(path)
    with pytest.raises(nvfp4_mla.PluginError, match="it is not a regular file") as err:
        nvfp4_mla.load(path)
    assert err.value.reason == "load_error"


def _dynamic(data):
    """(offset, size) of the plugin's PT_DYNAMIC segment, and its (tag, value) entries with their offsets."""
    phoff, phentsize, phnum = struct.unpack_from("<Q", data, 32)[0], *struct.unpack_from("<HH", data, 54)
    for i in range(phnum):
        p_type, _flags, offset, _va, _pa, filesz = struct.unpack_from("<IIQQQQ", data, phoff + i * phentsize)
        if p_type == 2:  # PT_DYNAMIC
            entries = {struct.unpack_from("<q", data, at)[0]: at for at in range(offset, offset + filesz, 16)}
            return offset, filesz, entries
    raise AssertionError("the plugin has no PT_DYNAMIC segment")


def _damage(data, which):
    offset, size, entries = _dynamic(data)
    if which == "dynamic zeroed":
        data[offset:offset + size] = bytes(size)
    elif which == "bogus STRTAB":  # DT_STRTAB (5) points far outside the object
        struct.pack_into("<Q", data, entries[5] + 8, 0x7FFFFFF00000)
    elif which == "RELACOUNT lies":  # DT_RELA (7)'s first relocation is not the relative one RELACOUNT promises
        rela = struct.unpack_from("<Q", data, entries[7] + 8)[0]
        struct.pack_into("<Q", data, rela + 8, 1)  # r_info = R_X86_64_64, symbol 0
    return data


@pytest.mark.skipif(platform.machine() != "x86_64", reason="the corruptions are written for x86-64 ELF files")
@pytest.mark.parametrize("which, child_words", [
    ("dynamic zeroed", "killed that process with signal 11 (Segmentation fault)"),
    ("bogus STRTAB", "killed that process with signal 11"),
    ("RELACOUNT lies", "ended that process with exit status 127"),
])
def test_loader_should_keep_the_host_alive_on_a_damaged_plugin(tmp_path, plugin_path, which, child_words):
    """Issue 58, N2: a corrupted (not cut short) plugin killed the host inside dlopen, in load() and so in
    vLLM's register(). With the digest file the build records beside it, load() refuses it before
    dlopen; without one, a child process loads it first, and what kills the child is refused. In the C
    loader's words (tests/test_loader.c)."""
    path = str(tmp_path / "libnvfp4_mla.so")
    with open(path, "wb") as f:
        f.write(_damage(bytearray(open(plugin_path, "rb").read()), which))
    with open(plugin_path + ".sha256") as src, open(path + ".sha256", "w") as dst:
        dst.write(src.read())
    with pytest.raises(nvfp4_mla.PluginError) as err:
        nvfp4_mla.load(path)
    assert str(err.value).startswith(f"cannot load nvfp4-mla plugin {path}: its SHA-256 is ")
    assert f"recorded in {path}.sha256 when it was built or installed: the file changed since" in str(err.value)
    assert err.value.reason == "load_error"
    os.unlink(path + ".sha256")
    with pytest.raises(nvfp4_mla.PluginError) as err:
        nvfp4_mla.load(path)
    assert f"loading it in a child process first (it has no digest file {path}.sha256)" in str(err.value)
    assert child_words in str(err.value)
    assert err.value.reason == "load_error"


def test_loader_should_refuse_a_digest_file_that_is_not_one(tmp_path, plugin_path):
    path = str(tmp_path / "libnvfp4_mla.so")
    with open(plugin_path, "rb") as src, open(path, "wb") as dst:
        dst.write(src.read())
    with open(path + ".sha256", "w") as f:
        f.write("not a digest\n")
    with pytest.raises(nvfp4_mla.PluginError, match=r"does not start with the file's SHA-256 \(64 hex digits"):
        nvfp4_mla.load(path)
    with open(plugin_path + ".sha256") as src, open(path + ".sha256", "w") as dst:
        dst.write(src.read().upper())  # the digits in either case, the name not compared
    assert nvfp4_mla.load(path).path == path


@pytest.mark.parametrize("layout, mode, words", [
    (_abi.LAYOUT_BF16_ROPE_432, _abi.SCALE_PER_TOKEN,
     "cannot serve per-token scales on bf16_rope_432: only fp8_rope_368 records carry the per-token scale s_t"),
    (_abi.LAYOUT_FP8_DS_MLA_656, _abi.SCALE_PER_TOKEN, "cannot serve per-token scales on fp8_ds_mla_656"),
    (9, _abi.SCALE_STATIC, "cannot serve layout 9: no such layout (NVFP4_MLA_LAYOUT_*: 1 fp8_rope_368"),
    (0, _abi.SCALE_STATIC, "cannot serve layout 0: no such layout"),
    (_abi.LAYOUT_FP8_ROPE_368, 7, "cannot serve scale mode 7 on fp8_rope_368: no such mode (NVFP4_MLA_SCALE_*"),
])
def test_require_capabilities_should_refuse_what_no_record_serves(plugin, layout, mode, words):
    """Issue 58, N8: loader.require accepted these ("serves static scales on unknown"); refused in the C
    loader's words (tests/test_loader.c), whatever the bits say."""
    with pytest.raises(nvfp4_mla.PluginError) as err:
        loader.require_capabilities(plugin, layout, mode, available=(1 << 64) - 1)
    assert words in str(err.value)
    assert plugin.path in str(err.value)
    assert err.value.reason == "config_error"


def test_require_capabilities_should_take_integers_only(plugin):
    with pytest.raises(TypeError, match=r"layout='368', scale_mode=1: expected integers"):
        loader.require_capabilities(plugin, "368", _abi.SCALE_STATIC)
    with pytest.raises(TypeError, match="expected integers"):
        loader.require_capabilities(plugin, _abi.LAYOUT_FP8_ROPE_368, True)
    assert not hasattr(loader, "require")  # issue 55: one require (nvfp4_mla.require takes a CacheFormat)


@pytest.mark.parametrize("value, words, reason", [
    ("None", 'NVFP4_MLA_PLUGIN="None" names no file and is not the keyword "none"', "invalid_selection"),
    (" x.so", 'NVFP4_MLA_PLUGIN=" x.so" has leading or trailing whitespace', "invalid_selection"),
    (os.fsdecode(b"x/\xff.so"), r"cannot load nvfp4-mla plugin x/\xff.so: No such file or directory", "not_found"),
    ("a" * 5001, "NVFP4_MLA_PLUGIN is 5001 bytes long, longer than the 4078-byte limit of a path", "invalid_selection"),
], ids=["None", "whitespace", "not-utf8", "5001-bytes"])
def test_loader_should_name_the_variable_of_a_snapshot_and_give_a_reason(value, words, reason):
    """Issue 58, N15: a snapshot's NVFP4_MLA_PLUGIN (vLLM's) was refused as "plugin selection=...", a path that
    is not UTF-8 with an empty reason, a 5001-byte one by dlopen ("File name too long"); now in the C loader's
    words (tests/test_loader.c), naming the variable."""
    with pytest.raises(nvfp4_mla.PluginError) as err:
        nvfp4_mla.load(environ={"NVFP4_MLA_PLUGIN": value})
    assert words in str(err.value)
    assert err.value.reason == reason


def test_vllm_decision_should_name_the_variable(monkeypatch):
    serving = pytest.importorskip("nvfp4_mla.vllm_plugin.serving")
    assert 'NVFP4_MLA_PLUGIN="None" names no file' in serving.decide({"NVFP4_MLA_PLUGIN": "None"}).error


@pytest.mark.skipif(platform.machine() != "x86_64", reason="the corruptions are written for x86-64 ELF files")
def test_an_embedded_interpreter_should_load_a_plugin_without_a_digest_in_a_forked_child_first(
        tmp_path, plugin_path, monkeypatch):
    """An interpreter embedded in another program has no sys.executable to start: the trial forks, as in C."""
    path = str(tmp_path / "libnvfp4_mla.so")
    with open(path, "wb") as f:
        f.write(_damage(bytearray(open(plugin_path, "rb").read()), "dynamic zeroed"))
    monkeypatch.setattr(sys, "executable", "")
    with pytest.raises(nvfp4_mla.PluginError, match=r"killed that process with signal 11 \(Segmentation fault\)"):
        nvfp4_mla.load(path)
    with open(plugin_path, "rb") as src, open(path, "wb") as dst:  # a whole plugin without a digest loads
        dst.write(src.read())
    assert nvfp4_mla.load(path).path == path
