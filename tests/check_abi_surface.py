#!/usr/bin/env python3
"""Compares two ABI surfaces dumped by abidw (the XML corpus of libabigail): the exported symbols
and the layout of every struct declared in the public headers (abi/nvfp4_mla*.h).

    usage: check_abi_surface.py exact   BASELINE.abi CURRENT.abi
           check_abi_surface.py extends BASELINE.abi CURRENT.abi

exact    the current surface is the baseline's: the same symbols, the same structs with the same
         size and the same members (name, offset, type). Any change fails.
extends  the current surface still holds the baseline's, laid out the same (what a host built
         against the baseline's headers relies on): every baseline symbol (with its version) is
         exported; every baseline struct exists, no smaller, with each baseline member at the same
         offset with the same type and name. Two kinds of change pass, the only ones an ABI minor
         may make: members appended past the baseline's end (the struct grows), and a reserved word
         given a use in place (a member named reserved* at the same offset and type, renamed).

Why not abidiff alone: with the suppressions that keep the plugin's private types out, abidiff
reported appended table members as "filtered out" and exited 0 (abi/CHANGELOG.md, ABI 1.1), and it
has no notion of "the old surface, laid out the same, with appended members allowed".
Exit 0 when the comparison holds, 1 with one line per difference otherwise.
"""
import re
import sys
import xml.etree.ElementTree as ET

PUBLIC_HEADER = re.compile(r"(^|/)abi/nvfp4_mla[a-z_]*\.h$")


class Corpus:
    def __init__(self, path):
        root = ET.parse(path).getroot()
        self.types = {}
        for element in root.iter():
            if element.get("id") and element.tag != "subrange":
                self.types.setdefault(element.get("id"), element)
        self.symbols = {(s.get("name"), s.get("version") or "") for s in root.iter("elf-symbol")}
        self.structs = {}
        for element in root.iter():
            if element.tag in ("class-decl", "union-decl") and element.get("is-declaration-only") != "yes" \
                    and PUBLIC_HEADER.search(element.get("filepath") or "") and element.get("name"):
                self.structs[element.get("name")] = self.layout(element)

    def name_of(self, type_id, depth=0):
        """The type as C spells it, from its id (typedef names kept: a typedef is a name in the ABI)."""
        e = self.types.get(type_id)
        if e is None or depth > 40:
            return f"?{type_id}"
        tag = e.tag
        if tag in ("type-decl", "typedef-decl", "class-decl", "union-decl", "enum-decl"):
            return e.get("name") or f"<anonymous {tag}>"
        if tag == "pointer-type-def":
            return self.name_of(e.get("type-id"), depth + 1) + "*"
        if tag == "qualified-type-def":
            quals = " ".join(q for q in ("const", "volatile") if e.get(q) == "yes")
            return f"{quals} {self.name_of(e.get('type-id'), depth + 1)}"
        if tag == "array-type-def":
            dims = "".join(f"[{s.get('length')}]" for s in e.iter("subrange"))
            return self.name_of(e.get("type-id"), depth + 1) + dims
        if tag == "function-type":
            params = ", ".join(self.name_of(p.get("type-id"), depth + 1) for p in e.iter("parameter"))
            ret = next(iter(e.iter("return")), None)
            return f"{self.name_of(ret.get('type-id'), depth + 1) if ret is not None else 'void'} ({params})"
        return f"<{tag}>"

    def layout(self, element):
        members = []
        for dm in element.findall("data-member"):
            var = dm.find("var-decl")
            members.append((int(dm.get("layout-offset-in-bits", "0")), var.get("name"), self.name_of(var.get("type-id"))))
        return int(element.get("size-in-bits", "0")), members


def compare(mode, base, cur):
    problems = []
    missing = base.symbols - cur.symbols
    problems += [f"symbol {name} (version {version or 'none'}) is gone" for name, version in sorted(missing)]
    if mode == "exact":
        problems += [f"symbol {name} (version {version or 'none'}) is new" for name, version in
                     sorted(cur.symbols - base.symbols)]
        problems += [f"struct {name} is new" for name in sorted(set(cur.structs) - set(base.structs))]
    for name, (size, members) in sorted(base.structs.items()):
        if name not in cur.structs:
            problems.append(f"struct {name} is gone")
            continue
        cur_size, cur_members = cur.structs[name]
        if mode == "exact" and (size, members) != (cur_size, cur_members):
            problems.append(f"struct {name} changed: {size} bits {members} -> {cur_size} bits {cur_members}")
            continue
        if cur_size < size:
            problems.append(f"struct {name} shrank from {size} to {cur_size} bits")
        at = {offset: (member, kind) for offset, member, kind in cur_members}
        for offset, member, kind in members:
            now = at.get(offset)
            if now is None:
                problems.append(f"{name}.{member} (bit {offset}, {kind}): no member starts there any more")
            elif now[1] != kind:
                problems.append(f"{name}.{member} (bit {offset}): type {kind} -> {now[1]}")
            elif now[0] != member and not member.startswith("reserved"):
                problems.append(f"{name}.{member} (bit {offset}, {kind}): renamed {now[0]}")
    return problems


def main(argv):
    if len(argv) != 4 or argv[1] not in ("exact", "extends"):
        print(__doc__.split("\n\n")[1])
        return 2
    base, cur = Corpus(argv[2]), Corpus(argv[3])
    if not base.structs or not base.symbols:
        print(f"{argv[2]}: no public struct or symbol found (not an abidw corpus of the plugin?)")
        return 1
    problems = compare(argv[1], base, cur)
    for p in problems:
        print(p)
    verdict = "holds" if not problems else f"FAILS ({len(problems)} differences)"
    print(f"{argv[1]} {argv[2]}: {len(base.structs)} structs, {len(base.symbols)} symbols: {verdict}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
