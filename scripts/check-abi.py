#!/usr/bin/env python3
"""The C header is the only definition of the ABI; this checks everything else against it.

  check-abi.py exports HEADER LIBRARY SOURCES_DIR
      every function declared in the header is exported by the library and defined by a
      @_cdecl/@c function in the Swift sources with the same number of parameters, and the
      library exports nothing the header does not declare.
  check-abi.py layout HEADER PYTHON_SRC LIBRARY
      every struct of the header has a ctypes Structure in the Python package with the same
      fields, size and offsets, as a C program compiled from the header prints them.

Exits non-zero with one line per difference.
"""
import json
import os
import re
import subprocess
import sys
import tempfile


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", " ", text)


def split_top(params):
    """Split a parameter list at the commas that are not inside parentheses."""
    params = params.replace("->", " returns ")  # a Swift function type's arrow is not a bracket
    depth, cur, out = 0, "", []
    for ch in params:
        if ch in "(<[":
            depth += 1
        elif ch in ")>]":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    if cur.strip():
        out.append(cur)
    return [p.strip() for p in out]


def balanced(text, start):
    """The text inside the parentheses that open at text[start]."""
    depth = 0
    for i in range(start, len(text)):
        if text[i] == "(":
            depth += 1
        elif text[i] == ")":
            depth -= 1
            if depth == 0:
                return text[start + 1:i]
    raise ValueError("unbalanced parentheses")


def header_functions(header):
    text = strip_comments(open(header).read())
    funcs = {}
    for m in re.finditer(r"MTLS_EXTERN[^;{]*?\b(mtls_[a-z0-9_]+)\s*\(", text):
        params = split_top(balanced(text, m.end() - 1))
        funcs[m.group(1)] = 0 if params in ([], ["void"]) else len(params)
    return funcs


def swift_functions(sources):
    funcs = {}
    for root, _, files in os.walk(sources):
        for f in files:
            if not f.endswith(".swift"):
                continue
            text = strip_comments(open(os.path.join(root, f)).read())
            for m in re.finditer(r'@(?:_cdecl\("|c\()(mtls_[a-z0-9_]+)', text):
                fm = re.compile(r"\bfunc\s+[A-Za-z0-9_]+\s*(?:<[^>]*>)?\s*\(").search(text, m.end())
                if not fm:
                    continue
                params = split_top(balanced(text, fm.end() - 1))
                funcs[m.group(1)] = len(params)
    return funcs


def exported(library):
    out = subprocess.run(["nm", "-D", "--defined-only", library], check=True, capture_output=True, text=True).stdout
    names = set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[1] in "TWDBRVGSi":  # global bindings only: lower case letters are local
            names.add(parts[2].split("@")[0])
    return names


def check_exports(header, library, sources):
    problems = []
    declared = header_functions(header)
    defined = swift_functions(sources)
    exports = exported(library)
    for name, n in sorted(declared.items()):
        if name not in defined:
            problems.append(f"{name}: declared in the header, no @_cdecl function in {sources}")
        elif defined[name] != n:
            problems.append(f"{name}: {n} parameter(s) in the header, {defined[name]} in the Swift definition")
        if name not in exports:
            problems.append(f"{name}: declared in the header, not exported by {library}")
    for name in sorted(set(defined) - set(declared)):
        problems.append(f"{name}: defined in Swift, not declared in the header")
    for name in sorted(exports - set(declared)):
        problems.append(f"{name}: exported by {library}, not declared in the header")
    print(f"check-abi exports: {len(declared)} functions declared, {len(exports)} exported, {len(problems)} problem(s)")
    return problems


def header_structs(header):
    text = strip_comments(open(header).read())
    structs = {}
    for m in re.finditer(r"typedef\s+struct\s+(mtls_[a-z0-9_]+)\s*\{(.*?)\}\s*\1\s*;", text, flags=re.S):
        fields = []
        for decl in m.group(2).split(";"):
            decl = decl.strip()
            if not decl:
                continue
            # "int min_tls, max_tls" declares two fields; a function pointer names its field in (*name).
            fp = re.search(r"\(\s*\*\s*([A-Za-z_][A-Za-z0-9_]*)\s*\)", decl)
            if fp:
                fields.append(fp.group(1))
                continue
            first, *rest = [d.strip() for d in decl.split(",")]
            fields.append(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", first)[-1])
            fields += [re.findall(r"[A-Za-z_][A-Za-z0-9_]*", r)[-1] for r in rest]
        structs[m.group(1)] = fields
    return structs


def c_layout(header, structs):
    lines = ["#include <stddef.h>", "#include <stdio.h>", f'#include "{os.path.abspath(header)}"', "int main(void) {",
             '  printf("{");']
    for i, (name, fields) in enumerate(structs.items()):
        sep = "," if i else ""
        lines.append(f'  printf("{sep}\\"{name}\\": {{\\"size\\": %zu, \\"fields\\": {{", sizeof({name}));')
        for j, f in enumerate(fields):
            fsep = "," if j else ""
            lines.append(f'  printf("{fsep}\\"{f}\\": %zu", offsetof({name}, {f}));')
        lines.append('  printf("}}");')
    lines += ['  printf("}\\n");', "  return 0;", "}"]
    with tempfile.TemporaryDirectory() as d:
        src, exe = os.path.join(d, "layout.c"), os.path.join(d, "layout")
        open(src, "w").write("\n".join(lines))
        subprocess.run(["cc", "-std=c11", "-Wall", "-Werror", "-o", exe, src], check=True)
        return json.loads(subprocess.run([exe], check=True, capture_output=True, text=True).stdout)


def python_structures(python_src):
    import ctypes
    import importlib
    import pkgutil
    sys.path.insert(0, python_src)
    import mtls
    found = []
    for mod in pkgutil.walk_packages(mtls.__path__, "mtls."):
        try:
            m = importlib.import_module(mod.name)
        except ImportError:
            continue  # optional extras (requests, httpx) that are not installed
        for obj in vars(m).values():
            if isinstance(obj, type) and issubclass(obj, ctypes.Structure) and obj is not ctypes.Structure \
                    and obj.__module__ == m.__name__ and obj not in found:
                found.append(obj)
    return found


def check_layout(header, python_src):
    structs = header_structs(header)
    layout = c_layout(header, structs)
    pys = python_structures(python_src)
    problems = []
    for name, fields in structs.items():
        match = [p for p in pys if [f[0] for f in p._fields_] == fields]
        if not match:
            best = max(pys, key=lambda p: len(set(f[0] for f in p._fields_) & set(fields)), default=None)
            problems.append(f"{name}: no ctypes Structure in the Python package has its fields {fields}"
                            + (f" (closest: {best.__module__}.{best.__name__})" if best else ""))
            continue
        for p in match:
            import ctypes
            if ctypes.sizeof(p) != layout[name]["size"]:
                problems.append(f"{name}: sizeof {layout[name]['size']} in C, {ctypes.sizeof(p)} in {p.__module__}.{p.__name__}")
            for f in fields:
                off = getattr(p, f).offset
                if off != layout[name]["fields"][f]:
                    problems.append(f"{name}.{f}: offset {layout[name]['fields'][f]} in C, {off} in {p.__module__}.{p.__name__}")
    print(f"check-abi layout: {len(structs)} structs of the header checked against {len(pys)} ctypes structures, "
          f"{len(problems)} problem(s)")
    return problems


def main():
    if len(sys.argv) == 5 and sys.argv[1] == "exports":
        problems = check_exports(*sys.argv[2:])
    elif len(sys.argv) == 5 and sys.argv[1] == "layout":
        os.environ.setdefault("MTLS_LIBRARY", sys.argv[4])
        problems = check_layout(sys.argv[2], sys.argv[3])
    else:
        sys.exit(__doc__)
    for p in problems:
        print("  " + p, file=sys.stderr)
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
