"""The PEP 517 build backend of the nvfp4_mla package: a pure-Python wheel from the standard library.

Why not setuptools: an offline install (`pip install --no-index --no-build-isolation`) builds with
whatever the environment holds, and a plain virtual environment on Debian bookworm holds setuptools
66 without `wheel`, which fails with "invalid command 'bdist_wheel'". This backend needs nothing
but Python 3.8+, so `pip install host_shims/python` works as written online and offline, in any
environment that has pip. It reads the [project] table of pyproject.toml (name, version,
description, requires-python, license, readme, optional-dependencies, entry-points) and ships the
package folder `nvfp4_mla/`; tests/check_pip_install.sh installs it into a fresh virtual environment.

Hooks: build_wheel, build_sdist, build_editable (a .pth file naming this folder),
prepare_metadata_for_build_wheel, and the get_requires_* hooks (nothing). pip runs them with the
working directory at the package root (host_shims/python).
"""
import base64
import hashlib
import io
import os
import re
import tarfile
import zipfile

PACKAGE = "nvfp4_mla"
_TIME = (2020, 1, 1, 0, 0, 0)  # fixed entry times: the same tree gives the same wheel


def _project():
    """The [project] table of pyproject.toml (tomllib where Python has it, else the subset used)."""
    with open("pyproject.toml", "rb") as f:
        raw = f.read()
    try:
        import tomllib
        return tomllib.loads(raw.decode("utf-8"))["project"]
    except ImportError:
        pass
    text = raw.decode("utf-8")
    project, extras, entry_points, table = {}, {}, {}, None
    for line in text.splitlines():
        line = line.split(" #")[0].strip()
        if line.startswith("["):
            table = line.strip("[]")
            continue
        m = re.match(r'([A-Za-z0-9_-]+)\s*=\s*(.+)$', line)
        if not m:
            continue
        key, value = m.group(1), m.group(2).strip()
        if table == "project" and value.startswith('"'):
            project[key] = value.strip('"')
        elif table == "project" and key == "license":
            project[key] = {"text": re.search(r'"([^"]*)"', value).group(1)}
        elif table == "project.optional-dependencies":
            extras[key] = re.findall(r'"([^"]*)"', value)
        elif table and table.startswith("project.entry-points."):
            group = table[len("project.entry-points."):].strip('"')
            entry_points.setdefault(group, {})[key] = value.strip('"')
    project["optional-dependencies"] = extras
    project["entry-points"] = entry_points
    return project


def _dist_name(project):
    return re.sub(r"[-_.]+", "_", project["name"])


def _metadata(project):
    lines = ["Metadata-Version: 2.1", f"Name: {project['name']}", f"Version: {project['version']}"]
    if project.get("description"):
        lines.append(f"Summary: {project['description']}")
    if isinstance(project.get("license"), dict) and project["license"].get("text"):
        lines.append(f"License: {project['license']['text']}")
    if project.get("requires-python"):
        lines.append(f"Requires-Python: {project['requires-python']}")
    for dep in project.get("dependencies", []):
        lines.append(f"Requires-Dist: {dep}")
    for extra, deps in project.get("optional-dependencies", {}).items():
        lines.append(f"Provides-Extra: {extra}")
        lines.extend(f'Requires-Dist: {dep}; extra == "{extra}"' for dep in deps)
    body = ""
    if project.get("readme"):
        lines.append("Description-Content-Type: text/markdown")
        with open(project["readme"], encoding="utf-8") as f:
            body = "\n" + f.read()
    return "\n".join(lines) + "\n" + body


def _entry_points(project):
    """entry_points.txt (group -> name -> object reference), or None when the project declares none."""
    groups = project.get("entry-points") or {}
    if not groups:
        return None
    return "".join(f"[{group}]\n" + "".join(f"{name} = {ref}\n" for name, ref in sorted(names.items())) + "\n"
                   for group, names in sorted(groups.items()))


def _wheel_file():
    return "Wheel-Version: 1.0\nGenerator: nvfp4_mla_build\nRoot-Is-Purelib: true\nTag: py3-none-any\n"


def _package_files():
    for root, dirs, files in os.walk(PACKAGE):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(files):
            if not name.endswith((".pyc", ".pyo")):
                yield os.path.join(root, name)


def _write_wheel(wheel_directory, entries):
    """entries: (archive path, bytes) in order; adds RECORD and returns the wheel's file name."""
    project = _project()
    dist, version = _dist_name(project), project["version"]
    info = f"{dist}-{version}.dist-info"
    entries = list(entries) + [(f"{info}/METADATA", _metadata(project).encode("utf-8")),
                               (f"{info}/WHEEL", _wheel_file().encode("utf-8"))]
    if _entry_points(project):
        entries.append((f"{info}/entry_points.txt", _entry_points(project).encode("utf-8")))
    record = []
    name = f"{dist}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(os.path.join(wheel_directory, name), "w", zipfile.ZIP_DEFLATED) as z:
        for path, data in entries:
            z.writestr(zipfile.ZipInfo(path, _TIME), data, zipfile.ZIP_DEFLATED)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode("ascii")
            record.append(f"{path},sha256={digest},{len(data)}")
        record.append(f"{info}/RECORD,,")
        z.writestr(zipfile.ZipInfo(f"{info}/RECORD", _TIME), "\n".join(record) + "\n", zipfile.ZIP_DEFLATED)
    return name


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    project = _project()
    info = f"{_dist_name(project)}-{project['version']}.dist-info"
    os.makedirs(os.path.join(metadata_directory, info), exist_ok=True)
    files = [("METADATA", _metadata(project)), ("WHEEL", _wheel_file())]
    if _entry_points(project):
        files.append(("entry_points.txt", _entry_points(project)))
    for name, text in files:
        with open(os.path.join(metadata_directory, info, name), "w", encoding="utf-8") as f:
            f.write(text)
    return info


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    def entries():
        for path in _package_files():
            with open(path, "rb") as f:
                yield path.replace(os.sep, "/"), f.read()
    return _write_wheel(wheel_directory, entries())


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    pth = (os.path.abspath(".") + "\n").encode("utf-8")
    return _write_wheel(wheel_directory, [(f"__editable__.{PACKAGE}.pth", pth)])


def build_sdist(sdist_directory, config_settings=None):
    project = _project()
    base = f"{_dist_name(project)}-{project['version']}"
    name = f"{base}.tar.gz"
    files = ["pyproject.toml", project.get("readme", "README.md"), "_build/nvfp4_mla_build.py"] + list(_package_files())
    with tarfile.open(os.path.join(sdist_directory, name), "w:gz", format=tarfile.PAX_FORMAT) as tar:
        for path in files:
            tar.add(path, arcname=f"{base}/{path}", recursive=False)
        pkg_info = _metadata(project).encode("utf-8")
        info = tarfile.TarInfo(f"{base}/PKG-INFO")
        info.size = len(pkg_info)
        tar.addfile(info, io.BytesIO(pkg_info))
    return name
