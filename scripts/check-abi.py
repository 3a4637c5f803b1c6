#!/usr/bin/env python3
"""The C header is the only definition of the ABI; this checks everything else against it.

  check-abi.py exports HEADER LIBRARY SOURCES_DIR
      every function declared in the header is exported by the library and defined by a
      @_cdecl/@c function in the Swift sources with the same number of parameters, and the
      library exports nothing the header does not declare.
  check-abi.py layout HEADER PYTHON_SRC LIBRARY
      every struct of the header has a ctypes Structure in the Python package with the same
      fields, size and offsets, as a C program compiled from the header prints them.
  check-abi.py constants HEADER PYTHON_SRC LIBRARY SOURCES_DIR
      the header's constants are the only ones: every MTLS_E_* code has one Python exception
      class declaring it, named as the library names it (mtls_error_name); every Python
      constant, flag table and key-type list named after a header macro has its value; the
      Swift codes are the header's (MTLSError.swift uses the MTLS_E_* macros, all of them),
      and no Swift source retypes a macro with another value.

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


def header_constants(header):
    """The header's status codes ({name: value}) and its integer and string macros."""
    text = strip_comments(open(header).read())
    codes = {k: int(v) for k, v in re.findall(r"\b(MTLS_(?:E_[A-Z0-9_]+|OK))\s*=\s*(-?\d+)", text)}
    macros = {}
    for name, value in re.findall(r"^\s*#define\s+(MTLS_[A-Z0-9_]+)[ \t]+([^\n]+?)\s*$", text, flags=re.M):
        if re.fullmatch(r"-?(0x[0-9A-Fa-f]+|\d+)", value):
            macros[name] = int(value, 0)
        elif re.fullmatch(r'"[^"]*"', value):
            macros[name] = value[1:-1]
    return codes, macros


# Python tables that map a header constant to a word: (module, attribute, macro prefix, which
# side of the dict holds the value, exceptions to "the word in upper case is the macro's tail").
PY_TABLES = [
    ("mtls.tls", "CLIENT_AUTH", "MTLS_CLIENT_AUTH_", "value", {}),
    ("mtls.tls", "CA_NAMES", "MTLS_CA_NAMES_", "value", {}),
    ("mtls.rotation", "EVENT_KINDS", "MTLS_EVENT_", "key", {}),
    ("mtls.trust", "_KINDS", "MTLS_TRUST_", "key", {}),
    ("mtls.trust", "_PURPOSES", "MTLS_PURPOSE_", "value", {None: "DEFAULT"}),
    ("mtls.tokens", "_KINDS", "MTLS_TOKEN_OBJECT_", "key", {"certificate": "CERT"}),
    ("mtls.store", "_CLASS_NAMES", "MTLS_STORE_", "key", {}),
]
# Python key-type lists: every MTLS_KEY_TYPE_* name ("all"), or some of them ("subset").
PY_KEY_TYPE_LISTS = [("mtls.pki", "KEY_TYPES", "all"), ("mtls.tokens", "TOKEN_KEY_TYPES", "subset")]


def assigned_names(module):
    """The names a module assigns at its top level (not those it imports)."""
    import ast
    names = set()
    for node in ast.parse(open(module.__file__).read()).body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        for t in targets:
            names.update(e.id for e in (t.elts if isinstance(t, ast.Tuple) else [t]) if isinstance(e, ast.Name))
    return names


def check_constants(header, python_src, library, sources):
    import ctypes
    import importlib
    import pkgutil
    codes, macros = header_constants(header)
    problems, notes = [], []
    sys.path.insert(0, python_src)
    try:
        import mtls
        import mtls.errors as errors
    except ImportError as e:  # mtls.errors refuses to load when its names are not the library's
        return [f"the Python package does not load: {e}"]
    lib = ctypes.CDLL(library)
    lib.mtls_error_name.restype = ctypes.c_char_p
    lib.mtls_strerror.restype = ctypes.c_char_p

    # Status codes: the library names each one, and one Python class declares each one.
    declared = {}
    # Error itself carries a default (internal) for a bare Error(); aliases (MTLSError) are skipped.
    for attr, cls in vars(errors).items():
        if isinstance(cls, type) and issubclass(cls, errors.Error) and cls is not errors.Error \
                and cls.__name__ == attr and "code" in cls.__dict__:
            declared.setdefault(cls.__dict__["code"], []).append(cls)
    for name, code in sorted(codes.items(), key=lambda kv: -kv[1]):
        if code == 0:
            continue
        libname = lib.mtls_error_name(code).decode()
        if libname == "unknown" or lib.mtls_strerror(code).decode().startswith("unknown"):
            problems.append(f"{name} ({code}): the library has no name or text for it (MTLSError.Code.all)")
        owners = declared.get(code, [])
        if len(owners) != 1:
            problems.append(f"{name} ({code}): declared by {len(owners)} classes in mtls.errors "
                            f"({', '.join(c.__name__ for c in owners) or 'none'}); one is needed")
        cls = errors.BY_CODE.get(code)
        if cls is None:
            problems.append(f"{name} ({code}): not in mtls.errors.BY_CODE")
        elif cls.code != code or cls.name != libname:
            problems.append(f"{name} ({code}): mtls.errors.{cls.__name__} has code {cls.code} and name "
                            f"{cls.name!r}; the header says {code}, the library {libname!r}")
    for code, owners in declared.items():
        for cls in owners:
            if code not in codes.values():
                problems.append(f"mtls.errors.{cls.__name__}: code {code} is not in the header")
            elif "name" in cls.__dict__ and cls.__dict__["name"] != lib.mtls_error_name(code).decode():
                problems.append(f"mtls.errors.{cls.__name__}: name {cls.__dict__['name']!r}, the library says "
                                f"{lib.mtls_error_name(code).decode()!r}")
    for code in errors.BY_CODE:
        if code not in codes.values():
            problems.append(f"mtls.errors.BY_CODE: code {code} is not in the header")

    # Python constants: a module-level UPPER_CASE int or str named after a macro (with or without
    # MTLS_, or with the module's name: store.IDENTITY is MTLS_STORE_IDENTITY) has its value; an
    # integer constant that names no macro is a retyped number the header does not define.
    checked = 0
    for info in pkgutil.walk_packages(mtls.__path__, "mtls."):
        try:
            m = importlib.import_module(info.name)
        except ImportError:
            continue  # optional extras (requests, httpx) that are not installed
        short = info.name.split(".")[-1].upper()
        for attr, value in vars(m).items():
            if not re.fullmatch(r"[A-Z][A-Z0-9_]*", attr) or isinstance(value, bool) \
                    or not isinstance(value, (int, str)) or attr not in assigned_names(m):
                continue
            macro = next((c for c in (attr, "MTLS_" + attr, f"MTLS_{short}_{attr}") if c in macros), None)
            if macro is None:
                if isinstance(value, int):
                    problems.append(f"{info.name}.{attr} = {value!r}: no header macro of that name")
                continue
            checked += 1
            if macros[macro] != value:
                problems.append(f"{info.name}.{attr} = {value!r}, the header's {macro} is {macros[macro]!r}")
    for module, attr, prefix, side, words in PY_TABLES:
        table = getattr(importlib.import_module(module), attr)
        for k, v in table.items():
            word, value = (v, k) if side == "key" else (k, v)
            macro = prefix + words.get(word, str(word).upper().replace("-", "_"))
            checked += 1
            if macro not in macros:
                problems.append(f"{module}.{attr}: {word!r} names no header macro ({macro})")
            elif macros[macro] != value:
                problems.append(f"{module}.{attr}: {word!r} is {value!r}, the header's {macro} is {macros[macro]!r}")
    abi = tuple(importlib.import_module("mtls._lib").ABI_VERSION)
    checked += 1
    if abi != (macros["MTLS_VERSION_MAJOR"], macros["MTLS_VERSION_MINOR"]):
        problems.append(f"mtls._lib.ABI_VERSION = {abi}, the header's version is "
                        f"{macros['MTLS_VERSION_MAJOR']}.{macros['MTLS_VERSION_MINOR']}")
    key_types = [v for k, v in macros.items() if k.startswith("MTLS_KEY_TYPE_")]
    for module, attr, how in PY_KEY_TYPE_LISTS:
        names = list(getattr(importlib.import_module(module), attr))
        checked += 1
        if how == "all" and names != key_types:
            problems.append(f"{module}.{attr} = {names}, the header's MTLS_KEY_TYPE_* are {key_types}")
        elif how == "subset" and not set(names) <= set(key_types):
            problems.append(f"{module}.{attr}: {sorted(set(names) - set(key_types))} are not MTLS_KEY_TYPE_* names")

    # Swift: the codes are the header's macros, every one of them, and nothing retypes a macro.
    error_swift = os.path.join(sources, "MTLSBase", "MTLSError.swift")
    text = strip_comments(open(error_swift).read())
    used = []
    for name, init in re.findall(r"static let `?(\w+)`? = Code\(([^)]*)\)", text):
        m = re.fullmatch(r"header:\s*(MTLS_E_[A-Z0-9_]+)", init.strip())
        if not m or m.group(1) not in codes:
            problems.append(f"MTLSError.Code.{name} = Code({init}): not one of the header's MTLS_E_* codes")
        else:
            used.append(m.group(1))
    for name in sorted(set(c for c in codes if c != "MTLS_OK") - set(used)):
        problems.append(f"{name}: not mirrored in MTLSError.Code ({error_swift})")
    for root, _, files in os.walk(sources):
        for f in files:
            if not f.endswith(".swift"):
                continue
            path = os.path.join(root, f)
            for name, value in re.findall(r"\b(?:let|var)\s+(MTLS_[A-Z0-9_]+)\s*(?::\s*\w+)?\s*=\s*(-?(?:0x[0-9A-Fa-f]+|\d+)|\"[^\"]*\")",
                                          strip_comments(open(path).read())):
                if name not in macros and name not in codes:
                    continue
                literal = value[1:-1] if value.startswith('"') else int(value, 0)
                header_value = macros.get(name, codes.get(name))
                if literal != header_value:
                    problems.append(f"{path}: {name} = {value}, the header says {header_value!r}")
                else:
                    problems.append(f"{path}: {name} retyped (same value; use the header's macro through CMTLSHeader)")
    for n in notes:
        print("  note: " + n)
    print(f"check-abi constants: {len(codes)} codes and {len(macros)} macros of the header, {checked} Python "
          f"constants and tables checked, {len(problems)} problem(s)")
    return problems


def main():
    if len(sys.argv) == 5 and sys.argv[1] == "exports":
        problems = check_exports(*sys.argv[2:])
    elif len(sys.argv) == 5 and sys.argv[1] == "layout":
        os.environ.setdefault("MTLS_LIBRARY", sys.argv[4])
        problems = check_layout(sys.argv[2], sys.argv[3])
    elif len(sys.argv) == 6 and sys.argv[1] == "constants":
        os.environ.setdefault("MTLS_LIBRARY", sys.argv[4])
        problems = check_constants(*sys.argv[2:])
    else:
        sys.exit(__doc__)
    for p in problems:
        print("  " + p, file=sys.stderr)
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
