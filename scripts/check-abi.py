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
  check-abi.py types HEADER PYTHON_SRC LIBRARY SOURCES_DIR
      every function's return and parameter types, argument by argument: the ctypes restype
      and argtypes the Python package declares (every library function it declares), and the
      parameter types of the Swift @_cdecl/@c definitions. An integer must be the same width
      and signedness, a pointer a pointer to the same thing (c_void_p stands for any pointer,
      c_char_p for a char or byte pointer, an opaque handle is OpaquePointer in Swift), a
      struct pointer the struct, a callback the typedef's signature.

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
    """{function: parameter count} of every function the header declares."""
    return {name: len(params) for name, (_, params) in header_signatures(header)[0].items()}


def swift_cdecls(sources):
    """(C name, parameter texts, return type text or None, file) of every @_cdecl/@c function."""
    for root, _, files in os.walk(sources):
        for f in files:
            if not f.endswith(".swift"):
                continue
            text = strip_comments(open(os.path.join(root, f)).read())
            for m in re.finditer(r'@(?:_cdecl\("|c\()(mtls_[a-z0-9_]+)', text):
                fm = re.compile(r"\bfunc\s+[A-Za-z0-9_]+\s*(?:<[^>]*>)?\s*\(").search(text, m.end())
                if not fm:
                    continue
                inside = balanced(text, fm.end() - 1)
                rm = re.match(r"\s*->\s*([^{]+?)\s*\{", text[fm.end() + len(inside) + 1:])
                yield m.group(1), split_top(inside), rm.group(1) if rm else None, f


def swift_functions(sources):
    return {name: len(params) for name, params, _, _ in swift_cdecls(sources)}


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


# ---- types, argument by argument -------------------------------------------------------------
#
# A C type is reduced to (base, depth, const): base is a scalar name ("int", "uint", "size",
# "int64", "uint8", "char", "void", "ulong", ...), a struct name ("mtls_conn"), or a callback
# ("fn", return, params); depth counts pointers; const is whether the pointee is const.

C_SCALARS = {
    "int": "int", "signed int": "int", "unsigned": "uint", "unsigned int": "uint", "size_t": "size",
    "ssize_t": "ssize", "int64_t": "int64", "uint64_t": "uint64", "int32_t": "int", "uint32_t": "uint",
    "uint16_t": "uint16", "int16_t": "int16", "uint8_t": "uint8", "int8_t": "int8", "char": "char",
    "unsigned char": "uint8", "void": "void", "unsigned long": "ulong", "long": "long", "double": "double",
    "_Bool": "bool", "bool": "bool", "time_t": "int64", "mtls_status": "int",
}


def c_type(decl, typedefs, param=True):
    """(base, depth, const) of a C parameter declaration or return type."""
    decl = decl.strip()
    fp = re.match(r"(.*?)\(\s*\*\s*([A-Za-z_][A-Za-z0-9_]*)?\s*\)\s*\((.*)\)$", decl, flags=re.S)
    if fp:  # an inline function pointer parameter
        params = split_top(fp.group(3))
        return (("fn", c_type(fp.group(1), typedefs, False),
                 tuple(c_type(x, typedefs) for x in params if x.strip() != "void")), 0, False)
    depth = decl.count("*")
    if re.search(r"\[\s*\]$", decl):
        depth += 1
        decl = re.sub(r"\[\s*\]$", "", decl)
    words = re.findall(r"[A-Za-z_][A-Za-z0-9_]*", decl)
    const = "const" in words
    words = [w for w in words if w not in ("const", "struct", "enum", "MTLS_EXTERN", "restrict")]
    if param and len(words) > 1 and not (len(words) == 2 and words[0] in ("unsigned", "signed", "long")
                                         and words[1] in ("int", "char", "long") ):
        words = words[:-1]  # the parameter's name
    name = " ".join(words)
    if name in typedefs:
        base, d, _ = typedefs[name]
        return (base, d + depth, const)
    if name in C_SCALARS:
        return (C_SCALARS[name], depth, const)
    return (name, depth, const)


def header_signatures(header):
    """{function: (return type, [parameter types])} and the header's callback typedefs."""
    text = strip_comments(open(header).read())
    typedefs = {}
    for m in re.finditer(r"typedef\s+enum\s+\w*\s*\{.*?\}\s*(\w+)\s*;", text, flags=re.S):
        typedefs[m.group(1)] = ("int", 0, False)
    for m in re.finditer(r"typedef\s+([^;(]*?)\(\s*\*\s*(mtls_\w+)\s*\)\s*\(", text):
        params = split_top(balanced(text, m.end() - 1))
        typedefs[m.group(2)] = (("fn", c_type(m.group(1), typedefs, False),
                                 tuple(c_type(x, typedefs) for x in params if x.strip() != "void")), 0, False)
    sigs = {}
    for m in re.finditer(r"^MTLS_EXTERN\s+([^;{#]*?)\b(mtls_[a-z0-9_]+)\s*\(", text, flags=re.M):
        params = split_top(balanced(text, m.end() - 1))
        sigs[m.group(2)] = (c_type(m.group(1), typedefs, False),
                            [c_type(x, typedefs) for x in params if x.strip() != "void"])
    return sigs, typedefs


def show(t):
    base, depth, const = t
    if isinstance(base, tuple):
        b = "callback(" + ", ".join(show(x) for x in base[2]) + ") -> " + show(base[1])
    else:
        b = base
    return ("const " if const and depth else "") + b + " " + "*" * depth if depth else b


PY_SCALARS = {
    "c_int": "int", "c_uint": "uint", "c_size_t": "size", "c_ssize_t": "ssize", "c_int64": "int64",
    "c_uint64": "uint64", "c_uint16": "uint16", "c_int16": "int16", "c_uint8": "uint8", "c_ubyte": "uint8",
    "c_int8": "int8", "c_byte": "int8", "c_char": "char", "c_ulong": "ulong", "c_long": "long",
    "c_double": "double", "c_bool": "bool", "c_int32": "int", "c_uint32": "uint", "c_longlong": "int64",
    "c_ulonglong": "uint64",
}


def py_type(t, structs):
    """(base, depth) of a ctypes type; base "any" for c_void_p (any pointer), "bytes" for c_char_p."""
    import ctypes
    if t is None:
        return ("void", 0)
    if t is ctypes.c_void_p:
        return ("any", 1)
    if t is ctypes.c_char_p:
        return ("bytes", 1)
    if isinstance(t, type) and issubclass(t, ctypes._Pointer):
        base, depth = py_type(t._type_, structs)
        return (base, depth + 1)
    if isinstance(t, type) and issubclass(t, ctypes._CFuncPtr):
        return (("fn", py_type(t._restype_, structs), tuple(py_type(a, structs) for a in (t._argtypes_ or ()))), 0)
    if isinstance(t, type) and issubclass(t, ctypes.Structure):
        return (structs.get(t, "struct " + t.__name__), 0)
    # ctypes aliases (c_uint32 is c_uint on this platform): compare by size and signedness.
    for name, base in PY_SCALARS.items():
        if t is getattr(ctypes, name, None):
            return (base, 0)
    return (repr(t), 0)


# Integers compare by width and signedness (ctypes' c_int64 is c_long on LP64, c_size_t c_ulong).
INTEGERS = {"int": (4, True), "uint": (4, False), "size": (8, False), "ssize": (8, True), "int64": (8, True),
            "uint64": (8, False), "long": (8, True), "ulong": (8, False), "uint16": (2, False),
            "int16": (2, True), "uint8": (1, False), "int8": (1, True), "char": (1, True), "bool": (1, False)}


def same_scalar(a, b):
    return a == b or (a in INTEGERS and INTEGERS.get(a) == INTEGERS.get(b))


def compatible(c, py):
    """Whether a ctypes type (base, depth) declares the C type c = (base, depth, const)."""
    cb, cd, _ = c
    pb, pd = py
    if pb == "any":  # c_void_p, or POINTER(c_void_p) ...: any pointer at least that deep
        return cd >= pd
    if pb == "bytes":  # c_char_p: a char, byte or void pointer
        return cd == pd and cb in ("char", "uint8", "int8", "void")
    if cb == "void" and cd >= 1 and pd >= 1:
        return cd <= pd  # void * accepts any pointer
    if isinstance(cb, tuple) or isinstance(pb, tuple):
        if not (isinstance(cb, tuple) and isinstance(pb, tuple)) or cd != pd:
            return False
        _, cret, cparams = cb
        _, pret, pparams = pb
        return compatible(cret, pret) and len(cparams) == len(pparams) and \
            all(compatible(a, b) for a, b in zip(cparams, pparams))
    if cd != pd:
        return False
    return same_scalar(cb, pb)


def python_functions(python_src):
    """{name: (restype, argtypes)} of every library function the Python package declares."""
    import ctypes
    python_structures(python_src)  # imports every module, so every declaration has run
    import importlib
    lib = importlib.import_module("mtls._lib").lib
    out = {}
    for name, f in vars(lib).items():
        if name.startswith("mtls_") and isinstance(f, ctypes._CFuncPtr) and f.argtypes is not None:
            out[name] = (f.restype, list(f.argtypes))
    return out


SWIFT_SCALARS = {
    "Int32": "int", "CInt": "int", "UInt32": "uint", "CUnsignedInt": "uint", "Int": "ssize", "UInt": "size",
    "Int64": "int64", "UInt64": "uint64", "UInt16": "uint16", "Int16": "int16", "UInt8": "uint8", "Int8": "char",
    "CChar": "char", "CUnsignedLong": "ulong", "CLong": "long", "Double": "double", "Bool": "bool",
    "Void": "void", "()": "void", "CUnsignedChar": "uint8", "CBool": "bool",
}


def swift_type(t, aliases=None, typedefs=None, scope=None):
    """(base, depth) of a Swift parameter type of a @_cdecl function; `aliases` are the Swift
    typealiases ({name or Type.name: text}), `typedefs` the header's callback typedefs."""
    aliases, typedefs = aliases or {}, typedefs or {}
    again = lambda x: swift_type(x, aliases, typedefs, scope)  # noqa: E731
    t = t.strip().replace(" returns ", " -> ")
    t = re.sub(r"^(?:_\s+)?[A-Za-z_][A-Za-z0-9_]*\s*:", "", t).strip() if re.match(r"^(?:_\s+)?[A-Za-z_]\w*\s*:", t) else t
    t = re.sub(r"=.*$", "", t).strip()
    t = t.removeprefix("@escaping").strip()
    while t.endswith("?") or t.endswith("!"):
        t = t[:-1].strip()
    while t.startswith("(") and len(balanced(t, 0)) == len(t) - 2:  # (T)? is T
        t = t[1:-1].strip()
        while t.endswith("?") or t.endswith("!"):
            t = t[:-1].strip()
    if "." in t and t in aliases:
        return again(aliases[t])
    if t in aliases or (scope and f"{scope}.{t}" in aliases):
        return again(aliases.get(f"{scope}.{t}", aliases.get(t)))
    if t in typedefs:  # a C callback typedef imported from the header
        base, depth, _ = typedefs[t]
        return (("fn", drop_const(base[1]), tuple(drop_const(x) for x in base[2])), depth)
    cm = re.match(r"@convention\(c\)\s*\((.*)\)\s*->\s*(.*)$", t, flags=re.S)
    if cm:
        params = [x for x in split_top(cm.group(1)) if x]
        return (("fn", again(cm.group(2)), tuple(again(x) for x in params)), 0)
    pm = re.match(r"Unsafe(?:Mutable)?Pointer<(.*)>$", t, flags=re.S)
    if pm:
        base, depth = again(pm.group(1))
        return (base, depth + 1)
    if t in ("UnsafeRawPointer", "UnsafeMutableRawPointer"):
        return ("void", 1)
    if t == "OpaquePointer":
        return ("opaque", 1)
    if t in SWIFT_SCALARS:
        return (SWIFT_SCALARS[t], 0)
    return (t, 0)


def drop_const(t):
    base, depth, _ = t
    return (base, depth)


def swift_aliases(sources):
    """Every Swift typealias in `sources`: {Name: text} and {Enclosing.Name: text}."""
    aliases = {}
    for root, _, files in os.walk(sources):
        for f in files:
            if not f.endswith(".swift"):
                continue
            lines = strip_comments(open(os.path.join(root, f)).read()).split("\n")
            enclosing = []
            for i, line in enumerate(lines):
                d = re.match(r"^(\s*)(?:[a-z]+\s+)*(?:class|struct|enum|extension)\s+(\w+)", line)
                if d:
                    enclosing = [e for e in enclosing if e[0] < len(d.group(1))] + [(len(d.group(1)), d.group(2))]
                a = re.match(r"^(\s*)(?:[a-z]+\s+)*typealias\s+(\w+)\s*=\s*(.*)$", line)
                if a:
                    text = a.group(3)
                    j = i
                    while text.count("(") > text.count(")") and j + 1 < len(lines):
                        j += 1
                        text += " " + lines[j].strip()
                    owners = [e for e in enclosing if e[0] < len(a.group(1))]
                    key = f"{owners[-1][1]}.{a.group(2)}" if owners and a.group(1) else a.group(2)
                    aliases[key] = text.strip()
                    aliases.setdefault(a.group(2), text.strip())
    return aliases


def swift_compatible(c, sw, opaque):
    cb, cd, _ = c
    sb, sd = sw
    if sb == "opaque":  # OpaquePointer: a pointer to one of the header's opaque handles
        return cd >= sd and (cd > sd or cb in opaque)
    if isinstance(cb, tuple) or isinstance(sb, tuple):
        if not (isinstance(cb, tuple) and isinstance(sb, tuple)) or cd != sd:
            return False
        return swift_compatible(cb[1], sb[1], opaque) and len(cb[2]) == len(sb[2]) and \
            all(swift_compatible(a, b, opaque) for a, b in zip(cb[2], sb[2]))
    if cd != sd:
        return False
    if same_scalar(cb, sb):
        return True
    return cb == "size" and sb == "ssize"  # Swift imports size_t as Int


def swift_signatures(sources, typedefs):
    aliases = swift_aliases(sources)
    st = lambda x: swift_type(x, aliases, typedefs)  # noqa: E731
    return {name: (st(ret) if ret else ("void", 0), [st(x) for x in params], f)
            for name, params, ret, f in swift_cdecls(sources)}


def check_types(header, python_src, library, sources):
    sigs, typedefs = header_signatures(header)
    text = strip_comments(open(header).read())
    opaque = set(re.findall(r"typedef\s+struct\s+(mtls_\w+)\s+\1\s*;", text))
    # Python Structures stand for the header struct with their fields.
    structs = {}
    fields = header_structs(header)
    for p in python_structures(python_src):
        for name, fs in fields.items():
            if [f[0] for f in p._fields_] == fs:
                structs[p] = name
    problems = []
    pyfuncs = python_functions(python_src)
    for name, (restype, argtypes) in sorted(pyfuncs.items()):
        if name not in sigs:
            problems.append(f"{name}: declared in Python, not in the header")
            continue
        cret, cparams = sigs[name]
        if len(argtypes) != len(cparams):
            problems.append(f"{name}: {len(cparams)} parameter(s) in the header, {len(argtypes)} argtypes in Python")
            continue
        pret = py_type(restype, structs)
        # A returned string the caller must free is declared c_void_p so ctypes does not copy it away.
        if not compatible(cret, pret) and not (cret[1] == 0 and cret[0] == "int" and pret == ("int", 0)):
            problems.append(f"{name}: returns {show(cret)} in the header, restype {restype!r} in Python")
        for i, (ct, pt) in enumerate(zip(cparams, argtypes)):
            if not compatible(ct, py_type(pt, structs)):
                problems.append(f"{name}: parameter {i + 1} is {show(ct)} in the header, {getattr(pt, '__name__', pt)} in Python")
    swift = swift_signatures(sources, typedefs)
    for name, (sret, sparams, where) in sorted(swift.items()):
        if name not in sigs:
            continue  # check_exports reports it
        cret, cparams = sigs[name]
        if len(sparams) != len(cparams):
            continue  # check_exports reports it
        if not swift_compatible(cret, sret, opaque):
            problems.append(f"{name}: returns {show(cret)} in the header, {sret} in {where}")
        for i, (ct, st) in enumerate(zip(cparams, sparams)):
            if not swift_compatible(ct, st, opaque):
                problems.append(f"{name}: parameter {i + 1} is {show(ct)} in the header, {st} in {where}")
    print(f"check-abi types: {len(sigs)} functions of the header, {len(pyfuncs)} declared in Python and "
          f"{len(swift)} defined in Swift checked argument by argument, {len(problems)} problem(s)")
    return problems


def main():
    if len(sys.argv) == 5 and sys.argv[1] == "exports":
        problems = check_exports(*sys.argv[2:])
    elif len(sys.argv) == 5 and sys.argv[1] == "layout":
        os.environ.setdefault("MTLS_LIBRARY", sys.argv[4])
        problems = check_layout(sys.argv[2], sys.argv[3])
    elif len(sys.argv) == 6 and sys.argv[1] == "types":
        os.environ.setdefault("MTLS_LIBRARY", sys.argv[4])
        problems = check_types(*sys.argv[2:])
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
