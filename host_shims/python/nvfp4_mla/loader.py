"""Finding, loading and checking the plugin: the C loader's decisions and words, in Python.

Selection is NVFP4_MLA_PLUGIN (a path to the .so, or a folder holding libnvfp4_mla.so; a name
without a slash is the file in the working folder, never searched for on the dynamic loader's path;
exactly "none" disables; surrounding whitespace and keyword-like values naming no file are refused, by the
settings rule). The header (magic, ABI major, minimum table size) and every member the table's
struct_size covers (none may be NULL) are checked before anything else is read. `require_capabilities`
refuses a configuration the plugin cannot serve, naming the plugin path, both ABI versions and every missing
capability, in the same words as host_shims/loader/nvfp4_mla_loader.c (this package's
tests/test_loading.py checks the words against the same mock plugins, host_shims/python/tests/). Every PluginError carries the C loader's machine-readable
`reason` (NVFP4_MLA_REASON_*).
"""

import ctypes as C
import hashlib
import operator
import os
import platform
import signal
import stat
import struct
import subprocess
import sys

from . import _abi
from .settings import SettingError, parse_path, quote


class PluginError(RuntimeError):
    """The plugin could not be loaded, or refused a request; `reason` classifies it."""

    def __init__(self, message, reason=""):
        super().__init__(message)
        self.reason = reason


class PluginDisabled(PluginError):
    """NVFP4_MLA_PLUGIN=none."""


class PluginNotSelected(PluginError):
    """NVFP4_MLA_PLUGIN is unset or empty."""


HOST_ABI = f"{_abi.ABI_MAJOR}.{_abi.ABI_MINOR}"


# What a host without a selection is told (the environment variable unset or empty).
NOT_SELECTED = f"no nvfp4-mla plugin selected (set {_abi.PLUGIN_ENV} to the plugin file or its folder)"

_KEYWORD_LIKE = ("none", "0", "1", "false", "true", "off", "on", "no", "yes", "disable", "disabled")


# The C loader's limit on a selection: its path buffer less the "/libnvfp4_mla.so" a folder gets.
_PATH_LIMIT = 4096 - (len(_abi.PLUGIN_FILE) + 1) - 1 - 1


def shown(path):
    """`path` as a message shows it: bytes that are not UTF-8 (os.fsdecode's surrogates) as \\xNN."""
    return os.fsencode(path).decode("utf-8", "backslashreplace")


def _select(selection, environ=None):
    """The C loader's select_plugin: the file to open, or the exception it would report."""
    from_env = selection is None  # the variable (of `environ`, else the process's), not the host's selection
    name = _abi.PLUGIN_ENV if from_env else "plugin selection"
    given = not from_env  # say which
    if given and not isinstance(selection, (str, os.PathLike)):
        raise TypeError(f"plugin selection {selection!r}: expected a path (str or os.PathLike), \"none\" or None "
                        f"(None reads {_abi.PLUGIN_ENV})")
    if given:
        selection = os.fsdecode(selection)
    else:  # Python has no secure_getenv; see docs/integration.md
        selection = (os.environ if environ is None else environ).get(_abi.PLUGIN_ENV)
    if not selection:
        raise PluginNotSelected("no nvfp4-mla plugin selected (the plugin selection is empty: give the plugin file or "
                                "its folder)" if given else
                                NOT_SELECTED,
                                "not_selected")
    if selection == "none":
        raise PluginDisabled("nvfp4-mla plugin disabled (the plugin selection is \"none\")" if given else
                             f"nvfp4-mla plugin disabled ({_abi.PLUGIN_ENV}=none)", "disabled")
    try:
        path = parse_path(name, selection)
    except SettingError as exc:
        raise PluginError(str(exc), "invalid_selection") from None
    if len(os.fsencode(path)) > _PATH_LIMIT:  # the C loader's words (plugin/settings.c, copy_path)
        raise PluginError(f"{name} is {len(os.fsencode(path))} bytes long, longer than the {_PATH_LIMIT}-byte limit "
                          "of a path", "invalid_selection")
    if not os.path.exists(path) and path.isascii() and path.lower() in _KEYWORD_LIKE:
        raise PluginError(f"{name}={quote(path)} names no file and is not the keyword \"none\" (exactly, lower "
                          "case), which disables the plugin: give the plugin file or its folder", "invalid_selection")
    path = os.path.join(path, _abi.PLUGIN_FILE) if os.path.isdir(path) else path
    # A name without a slash is the file in the working folder, as in the C loader: dlopen would
    # search its path for it instead ("libc.so.6" loaded the system libc).
    return path if "/" in path else "./" + path


# Pointer members a host reads or calls, in table order (the C loader's null_member list).
_POINTER_MEMBERS = ("plugin_name", "version", "git_revision", "cuda_archs", "record_format", "status_string",
                    "last_error", "init", "shutdown", "context_info", "config_create", "config_info",
                    "config_layer_scale", "config_destroy", "write", "gather", "attend_workspace_bytes", "attend",
                    "merge")


def _null_member(table):
    """The first member the table's struct_size covers but leaves NULL, else None."""
    def is_null(name):  # the raw pointer: a c_char_p field would read b"" and NULL alike as false
        return C.c_void_p.from_address(C.addressof(table) + getattr(_abi.Plugin, name).offset).value is None

    for name in _POINTER_MEMBERS:
        if _abi.table_has(table, name) and is_null(name):
            return name
    return "capabilities" if table.capability_count and is_null("capabilities") else None


class LoadedPlugin:
    """A dlopen()ed plugin whose header passed the checks; `table` is its nvfp4_mla_plugin_t."""

    def __init__(self, path, lib, table):
        self.path = path
        self._lib = lib  # keeps the library loaded while the table is used
        self.table = table

    @property
    def abi(self):
        return f"{self.table.header.abi_major}.{self.table.header.abi_minor}"

    def capability_bits(self):
        """Compiled capabilities, minus operations the table is too short to hold (older minors)."""
        bits = self.table.capability_bits
        for member, cap in (("write", "op.write"), ("gather", "op.gather"), ("attend", "op.attend"),
                            ("merge", "op.merge_partials"), ("config_destroy", "config.cache_identity")):
            if not _abi.table_has(self.table, member):
                bits &= ~_abi.CAP[cap]
        return bits

    def capabilities(self):
        """(name, revision) of every compiled capability the table lists, unknown names included."""
        caps = self.table.capabilities
        return [(caps[i].name.decode(), caps[i].revision) for i in range(self.table.capability_count)]


def _check_table(header_ptr):
    """(refusal, detail, reason) for a table the host must not use, else None (check_table in C)."""
    if not header_ptr:
        return "its entry returned no table", "", "not_a_plugin"
    h = header_ptr.contents
    if h.magic != _abi.ABI_MAGIC:
        return "wrong magic", f" (0x{h.magic:08x}, expected 0x{_abi.ABI_MAGIC:08x})", "not_a_plugin"
    if h.abi_major != _abi.ABI_MAJOR:
        return ("ABI major mismatch", f" (plugin ABI {h.abi_major}.{h.abi_minor}, host ABI {HOST_ABI})",
                "abi_mismatch")
    if h.struct_size < _abi.TABLE_MIN_SIZE:
        return ("table too small", f" (struct_size {h.struct_size} < {_abi.TABLE_MIN_SIZE}; plugin ABI "
                f"{h.abi_major}.{h.abi_minor}, host ABI {HOST_ABI})", "abi_mismatch")
    missing = _null_member(C.cast(header_ptr, C.POINTER(_abi.Plugin)).contents)
    if missing:
        return ("table member", f" \"{missing}\" is NULL (plugin ABI {h.abi_major}.{h.abi_minor}, host ABI "
                f"{HOST_ABI}; every member its struct_size {h.struct_size} covers must be set)", "incomplete_table")
    return None


# The ELF file shape of this host (the C loader's HOST_ELF_*): dlopen maps only objects of its own class,
# byte order and machine. A machine not listed here is not checked (dlopen still refuses a wrong one).
_ELF_CLASS = 2 if struct.calcsize("P") == 8 else 1
_ELF_DATA = 1 if sys.byteorder == "little" else 2
_ELF_MACHINE = {"x86_64": 62, "amd64": 62, "aarch64": 183, "arm64": 183, "ppc64le": 21, "ppc64": 21}.get(
    platform.machine().lower(), 0)
_CUT_SHORT = "(cut short: an interrupted copy or a full disk?)"


def _elf_refusal(path):
    """Why `path` is not an ELF shared object dlopen can map whole, or None when it is (or when it cannot
    be opened: dlopen then says why). The C loader's check_elf, in its words: dlopen maps a file cut short
    (an interrupted copy, a full disk) as if whole, and the first touch of a page past its end raises
    SIGBUS inside dlopen, which kills the host; so the file is read first."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))  # a FIFO must not block
    except OSError:
        return None
    try:
        return _elf_shape(fd)
    finally:
        os.close(fd)


def _elf_shape(fd):
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        return "it is not a regular file"
    end, wide = st.st_size, _ELF_CLASS == 2
    # Elf64_Ehdr / Elf32_Ehdr: e_ident[16], e_type, e_machine, e_version, e_entry, e_phoff, e_shoff, e_flags,
    # e_ehsize, e_phentsize, e_phnum, e_shentsize, e_shnum, e_shstrndx.
    order = "<" if _ELF_DATA == 1 else ">"
    ehdr = struct.Struct(order + ("16sHHIQQQIHHHHHH" if wide else "16sHHIIIIIHHHHHH"))
    phdr = struct.Struct(order + ("IIQQQQQQ" if wide else "IIIIIIII"))  # p_type, then per class
    head = os.pread(fd, ehdr.size, 0)
    if len(head) < ehdr.size:
        return f"the file is {end} bytes, less than the {ehdr.size} of an ELF header {_CUT_SHORT}"
    ident, e_type, machine, _v, _entry, phoff, shoff, _f, _eh, phentsize, phnum, shentsize, shnum, _s = \
        ehdr.unpack(head)
    if ident[:4] != b"\x7fELF":
        return "not an ELF file (it does not start with \\x7fELF)"
    if ident[4] != _ELF_CLASS:
        bits = lambda c: "32-bit" if c == 1 else "64-bit"  # noqa: E731
        return f"a {bits(ident[4])} ELF file; this host is {bits(_ELF_CLASS)}"
    if ident[5] != _ELF_DATA:
        return f"an ELF file of the other byte order (EI_DATA {ident[5]}; this host's is {_ELF_DATA})"
    if e_type != 3:
        return f"an ELF file of type {e_type}, not a shared object (ET_DYN, 3)"
    if _ELF_MACHINE and machine != _ELF_MACHINE:
        return f"an ELF file for machine {machine}; this host is machine {_ELF_MACHINE}"
    if phentsize != phdr.size:
        return f"an ELF file whose program headers are {phentsize} bytes each, not {phdr.size}"
    if phoff > end or (end - phoff) // phdr.size < phnum:
        return f"its program headers end at byte {phoff + phnum * phdr.size}, past the end of the {end}-byte file " \
               f"{_CUT_SHORT}"
    for i in range(phnum):
        fields = phdr.unpack(os.pread(fd, phdr.size, phoff + i * phdr.size))
        p_type, offset, filesz = fields[0], (fields[2] if wide else fields[1]), (fields[5] if wide else fields[4])
        if p_type == 1 and (offset > end or end - offset < filesz):  # PT_LOAD
            return f"its loadable segment (program header {i}) ends at byte {offset + filesz}, past the end of the " \
                   f"{end}-byte file {_CUT_SHORT}"
    if shoff and (shoff > end or (end - shoff) // (shentsize or 1) < (shnum or 1)):  # written last: the same cut
        return f"its section headers end at byte {shoff + shnum * shentsize}, past the end of the {end}-byte file " \
               f"{_CUT_SHORT}"
    return None


def _recorded_digest(sidecar):
    """The 64 hex digits a digest file starts with (sha256sum's line; the name after them is not compared),
    None when there is no such file, or a refusal (str) in the C loader's words."""
    try:
        fd = os.open(sidecar, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        return None, None
    except OSError as exc:
        return None, f"cannot read its digest file {sidecar}: {exc.strerror}"
    try:
        regular = stat.S_ISREG(os.fstat(fd).st_mode)
        text = os.pread(fd, 65, 0) if regular else b""
    finally:
        os.close(fd)
    if not regular:
        return None, f"its digest file {sidecar} is not a regular file"
    digits = text[:64]
    if len(digits) < 64 or any(c not in b"0123456789abcdefABCDEF" for c in digits) or \
            (len(text) > 64 and text[64:65] not in (b" ", b"\t", b"\r", b"\n")):
        return None, (f"its digest file {sidecar} does not start with the file's SHA-256 (64 hex digits, as "
                      "sha256sum writes it): record it again with sha256sum, or remove the digest file")
    return digits.decode("ascii").lower(), None


def _digest_refusal(path):
    """(refusal or None, whether a digest file was there): the C loader's check_digest. A corrupted plugin
    (bytes changed in place: its dynamic section, its relocations) crashes the process that dlopen()s it;
    the build and `meson install` record its SHA-256 beside it, which it must match before dlopen."""
    sidecar = path + ".sha256"
    recorded, refusal = _recorded_digest(sidecar)
    if refusal or recorded is None:
        return refusal, refusal is not None
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                digest.update(chunk)
    except OSError as exc:
        return f"cannot read it to check its digest: {exc.strerror}", True
    if digest.hexdigest() != recorded:
        return (f"its SHA-256 is {digest.hexdigest()}, not the {recorded} recorded in {sidecar} when it was built or "
                "installed: the file changed since (damaged on disk or in a copy?); reinstall it, or, after a "
                "deliberate change such as strip, record it again (sha256sum FILE > FILE.sha256)"), True
    return None, True


_TRIAL = ("import ctypes, os, sys\n"
          "try:\n    ctypes.CDLL(sys.argv[1], mode=os.RTLD_NOW | os.RTLD_LOCAL)\n"
          "except (OSError, UnicodeDecodeError):\n    os._exit(3)\n"
          "os._exit(0)\n")


def _trial_refusal(path):
    """The C loader's trial_load, for a plugin without a digest file: load it in a child process first (a
    fresh interpreter, fork and exec: no lock of this process's threads is inherited), and refuse what
    kills that child. None when the child loaded it or dlopen refused it (the host's own load says why)."""
    head = f"loading it in a child process first (it has no digest file {shown(path)}.sha256)"
    try:
        if sys.executable:
            returncode = subprocess.run([sys.executable, "-I", "-S", "-c", _TRIAL, path], stdin=subprocess.DEVNULL,
                                        timeout=60, check=False).returncode
        else:
            returncode = _forked_trial(path)  # an embedded interpreter: no executable to start
    except subprocess.TimeoutExpired:
        return f"{head} did not finish in 60 s; the host did not load it"
    except OSError as exc:
        return f"it has no digest file ({shown(path)}.sha256), and it cannot be loaded in a child process first ({exc})"
    if returncode < 0:
        sig = -returncode
        return (f"{head} killed that process with signal {sig} ({signal.strsignal(sig)}): the file is damaged (its "
                "dynamic section or relocations?); the host did not load it")
    if returncode not in (0, 3):
        return (f"{head} ended that process with exit status {returncode} (127: the dynamic loader stopped on "
                "an inconsistency): the file is damaged; the host did not load it")
    return None


def _forked_trial(path):
    """The trial in a forked child (the C loader's way), for an interpreter without sys.executable: the
    child loads the file and _exit()s; its return code as subprocess gives it (-signal when killed)."""
    pid = os.fork()
    if pid == 0:
        code = 4
        try:
            for sig in (signal.SIGSEGV, signal.SIGBUS, signal.SIGILL, signal.SIGFPE, signal.SIGABRT):
                signal.signal(sig, signal.SIG_DFL)
            C.CDLL(path, mode=os.RTLD_NOW | os.RTLD_LOCAL)
            code = 0
        except (OSError, UnicodeDecodeError):
            code = 3
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)


def load(selection=None, *, environ=None):
    """Loads and checks the plugin; raises PluginDisabled, PluginNotSelected or PluginError. `selection`
    None reads NVFP4_MLA_PLUGIN from `environ` (a snapshot such as vLLM's; None: the process
    environment), and refusals then name the variable, as the C loader's do."""
    path = _select(selection, environ)
    refusal = _elf_refusal(path)
    if not refusal:
        refusal, has_digest = _digest_refusal(path)
        if not refusal and not has_digest and os.path.exists(path):
            refusal = _trial_refusal(path)
    if refusal:
        raise PluginError(f"cannot load nvfp4-mla plugin {shown(path)}: {refusal}", "load_error")
    try:
        lib = C.CDLL(path, mode=os.RTLD_NOW | os.RTLD_LOCAL)
    except (OSError, UnicodeDecodeError) as exc:
        reason = "not_found" if not os.path.exists(path) else "load_error"
        # dlerror's text of a path that is not UTF-8 comes back empty, or (CPython 3.11.7 and later)
        # as a UnicodeDecodeError from decoding it: say what the file system says
        why = (str(exc) if isinstance(exc, OSError) else "") or (
            os.strerror(2) if reason == "not_found" else "the dynamic loader gave no reason")
        raise PluginError(f"cannot load nvfp4-mla plugin {shown(path)}: {why}", reason) from None
    try:
        entry = getattr(lib, _abi.ENTRY_SYMBOL)
    except AttributeError:
        other = hasattr(lib, "nvfp4_mla_plugin_v2")
        tail = ("; it implements ABI major 2 only: upgrade the host" if other
                else "; it is not an nvfp4-mla plugin")
        raise PluginError(f"nvfp4-mla plugin {path} does not export {_abi.ENTRY_SYMBOL} "
                          f"(host ABI {HOST_ABI}){tail}", "abi_mismatch" if other else "not_a_plugin") from None
    entry.restype = C.POINTER(_abi.Header)
    entry.argtypes = []
    header_ptr = entry()
    refused = _check_table(header_ptr)
    if refused:
        refusal, detail, reason = refused
        raise PluginError(f"nvfp4-mla plugin {path} refused: {refusal}{detail}", reason)
    table = C.cast(header_ptr, C.POINTER(_abi.Plugin)).contents
    return LoadedPlugin(path, lib, table)


def requirement_bits(layout, scale_mode, extra=0):
    """The capability bits a cache configuration needs (as nvfp4_mla_requirement_caps): the record
    rule's bits for write, gather and any operation in `extra`, and `extra` itself."""
    ops = _abi.CAP["op.write"] | _abi.CAP["op.gather"] | _abi.CAP["op.attend"]
    called = _abi.CAP["op.write"] | _abi.CAP["op.gather"] | (extra & ops)
    return _abi.caps_needed(called, layout, scale_mode) | extra


def _unservable(layout, scale_mode):
    """What no plugin serves whatever its bits say (the C loader's unservable), else None."""
    if not _abi.record_bytes(layout):
        return (f"cannot serve layout {layout}: no such layout (NVFP4_MLA_LAYOUT_*: 1 fp8_rope_368, 2 bf16_rope_432, "
                "3 fp8_ds_mla_656)")
    if scale_mode not in (_abi.SCALE_STATIC, _abi.SCALE_PER_TOKEN):
        return (f"cannot serve scale mode {scale_mode} on {_abi.layout_name(layout)}: no such mode "
                "(NVFP4_MLA_SCALE_*: 1 static, 2 per-token)")
    if not _abi.layout_has_mode(layout, scale_mode):
        return (f"cannot serve per-token scales on {_abi.layout_name(layout)}: only fp8_rope_368 records carry the "
                "per-token scale s_t (per-token needs KV_FP8_ROPE=1's layout)")
    return None


def require_capabilities(plugin, layout, scale_mode, available=None, extra=0, user_requested=True):
    """Accepts the layout and scale mode against the capability bits `available` (the table's compiled
    bits by default, or a context's runtime bits) and returns the acceptance line, or raises PluginError
    naming what is missing, in nvfp4_mla_loader_require's words. A pair the record format does not have
    (an unknown layout or mode, per-token on a record without s_t) is refused whatever the bits say.
    nvfp4_mla.require(plugin, cache_format) is the one a host calls with a CacheFormat; this is its
    capability-bit step."""
    head = f"nvfp4-mla plugin {plugin.path} (ABI {plugin.abi}, host ABI {HOST_ABI})"
    try:
        if isinstance(layout, bool) or isinstance(scale_mode, bool):
            raise TypeError
        layout, scale_mode = operator.index(layout), operator.index(scale_mode)
    except TypeError:
        raise TypeError(f"layout={layout!r}, scale_mode={scale_mode!r}: expected integers (nvfp4_mla.LAYOUT_*, "
                        "nvfp4_mla.SCALE_*)") from None
    why = _unservable(layout, scale_mode)
    if why:
        raise PluginError(f"{head} {why}", "config_error")
    available = plugin.capability_bits() if available is None else available
    missing = requirement_bits(layout, scale_mode, extra) & ~available
    mode = "per-token" if scale_mode == _abi.SCALE_PER_TOKEN else "static"
    lay = _abi.layout_name(layout)
    if not missing:
        return f"{head} serves {mode} scales on {lay}"
    names = ", ".join(_abi.cap_name(1 << b) for b in range(64) if missing & (1 << b))
    asked = " (requested by the configuration)" if user_requested else ""
    raise PluginError(f"{head} cannot serve {mode} scales on {lay}{asked}: missing {names}", "missing_capability")
