#!/usr/bin/env python3
"""Lists the Swift API's public declarations that have no `///` doc comment.

The Swift API is what is `public` (or `open`) in Sources/MTLS* (the core's targets and the
umbrella); each such declaration, and each case of a public enum, carries a doc comment directly
above it (attributes such as `@discardableResult` may stand between). Exit status 1 with one
`file:line: declaration` per missing comment; 0 when every one is documented.

  scripts/check-swift-docs.py [ROOT]
"""
import os
import re
import sys

DECL = re.compile(r'^\s*(?:@[\w.]+(?:\([^)]*\))?\s+)*(?:public|open)\s+(?!import\b)(?:[\w()]+\s+)*?'
                  r'(func|var|let|class|struct|enum|init|typealias|protocol|actor|subscript|case|static|final|'
                  r'mutating|nonisolated|convenience|override|indirect|private\(set\))\b')
ATTRIBUTE = re.compile(r'^\s*@[\w.]+(?:\(.*\))?\s*$')
PUBLIC_ENUM = re.compile(r'^\s*(?:@[\w.]+(?:\([^)]*\))?\s+)*public\s+(?:indirect\s+)?enum\b')
CASE = re.compile(r'^\s*(?:indirect\s+)?case\s+\w')


def documented(lines, i):
    """Whether the declaration on line i has a doc comment above it (attributes skipped)."""
    j = i - 1
    while j >= 0 and ATTRIBUTE.match(lines[j]):
        j -= 1
    if j < 0:
        return False
    above = lines[j].strip()
    return above.startswith('///') or above.endswith('*/')


def missing(path):
    lines = open(path, encoding='utf-8').read().split('\n')
    out = []
    # Brace depth of each public enum's body, to find its cases.
    depth = 0
    enum_depths = []
    in_block_comment = False
    for i, line in enumerate(lines):
        code = line.split('//')[0] if not in_block_comment else ''
        if '/*' in line and '*/' not in line:
            in_block_comment = True
        if in_block_comment and '*/' in line:
            in_block_comment = False
        if DECL.match(line) and not documented(lines, i):
            out.append((i + 1, line.strip()))
        elif enum_depths and depth == enum_depths[-1] and CASE.match(line) and not documented(lines, i):
            out.append((i + 1, line.strip()))
        opened = PUBLIC_ENUM.match(line) is not None
        for ch in re.sub(r'"(?:[^"\\]|\\.)*"', '""', code):
            if ch == '{':
                depth += 1
                if opened:
                    enum_depths.append(depth)
                    opened = False
            elif ch == '}':
                if enum_depths and depth == enum_depths[-1]:
                    enum_depths.pop()
                depth -= 1
    return out


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), '..')
    sources = os.path.join(root, 'Sources')
    found = []
    for target in sorted(os.listdir(sources)):
        if not target.startswith('MTLS'):
            continue
        for folder, _, files in sorted(os.walk(os.path.join(sources, target))):
            for name in sorted(files):
                if name.endswith('.swift'):
                    path = os.path.join(folder, name)
                    found += [(os.path.relpath(path, root), n, text) for n, text in missing(path)]
    for path, n, text in found:
        print(f'{path}:{n}: {text}')
    if found:
        print(f'{len(found)} public declarations without a /// doc comment', file=sys.stderr)
        return 1
    print('check-swift-docs: every public declaration in Sources/MTLS* has a doc comment')
    return 0


if __name__ == '__main__':
    sys.exit(main())
