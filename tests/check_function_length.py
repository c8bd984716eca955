#!/usr/bin/env python3
"""No function longer than about one screen (house style, docs/architecture.md): every C, C++, CUDA and Python
function under abi/, kernels/, plugin/, host_shims/, bench/ and tests/ has at most LIMIT lines,
counted from the first line of its signature to its closing brace (C) or its last line (Python).
No file is exempt (the attention kernels' exemption ended with the attention work it waited for).
    usage: check_function_length.py SOURCE_ROOT
"""
import ast
import os
import re
import sys

LIMIT = 80
FOLDERS = ("abi", "kernels", "plugin", "host_shims", "bench", "tests")
C_FILES = (".c", ".h", ".cu", ".cuh", ".cpp")


def blank(text):
    """Comments, strings and preprocessor lines as spaces (newlines kept): braces in them do not count."""
    pattern = re.compile(r'/\*.*?\*/|//[^\n]*|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'|^[ \t]*#[^\n]*(?:\\\n[^\n]*)*',
                         re.S | re.M)
    return pattern.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)


def c_functions(text):
    """(name, first line, last line) of each top-level brace block that follows a signature."""
    code, found, depth, head, head_line, line = blank(text), [], 0, "", 1, 1
    scopes = []  # per open top-level brace: the function (name, line) or None
    for ch in code:
        if ch == "\n":
            line += 1
        if depth == 0 and ch == "{":
            h = head.strip()
            if re.fullmatch(r'extern\s*|namespace(\s+\w+)?', h):  # extern "C" { ... }: its inside is top level
                scopes.append("transparent")
                head = ""
                continue
            named = re.findall(r"(\w+)\s*\(", h)
            is_function = named and "=" not in h.split("(")[0] and not re.match(r"(struct|union|enum|typedef)\b", h)
            scopes.append((named[-1] if named and "__launch_bounds__" not in named[-1] else (named or [""])[0], head_line)
                          if is_function else None)
            depth, head = 1, ""
        elif depth == 0 and ch == "}" and scopes and scopes[-1] == "transparent":
            scopes.pop()
            head = ""
        elif depth == 0 and ch in ";}":
            head = ""
        elif depth == 0:
            if not head.strip() and not ch.isspace():
                head_line = line
            head += ch
        elif ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                scope = scopes.pop()
                if scope:
                    found.append((scope[0], scope[1], line))
    return found


def python_functions(text):
    return [(n.name, n.lineno, n.end_lineno) for n in ast.walk(ast.parse(text))
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]


def main(root):
    long_ones, checked = [], 0
    for folder in FOLDERS:
        for dirpath, _dirs, files in os.walk(os.path.join(root, folder)):
            for name in sorted(files):
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, root)
                if not name.endswith(C_FILES + (".py",)):
                    continue
                with open(path, errors="replace") as f:
                    text = f.read()
                functions = python_functions(text) if name.endswith(".py") else c_functions(text)
                checked += len(functions)
                long_ones += [(rel, fn, first, last - first + 1) for fn, first, last in functions
                              if last - first + 1 > LIMIT]
    for rel, fn, first, lines in long_ones:
        print(f"{rel}:{first}: {fn} has {lines} lines (limit {LIMIT}): split it")
    print(f"{checked} functions checked, {len(long_ones)} longer than {LIMIT} lines")
    return 1 if long_ones else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
