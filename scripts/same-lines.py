#!/usr/bin/env python3
"""Whether NEW holds every non-blank line of OLD, as many times (a text that was only moved):
`scripts/same-lines.py <(git show REV:include/mtls.h) include/mtls.h`. Prints the lines removed
and added; exits 1 when a line of OLD is missing from NEW (added lines, such as new section
banners, are listed but allowed with --allow-added)."""
import collections
import sys

args = [a for a in sys.argv[1:] if not a.startswith("--")]
old, new = (collections.Counter(l for l in open(p).read().split("\n") if l.strip()) for p in args)
removed, added = list((old - new).elements()), list((new - old).elements())
for line in removed:
    print("removed:", line)
for line in added:
    print("added:", line)
print(f"same-lines: {sum(old.values())} lines before, {sum(new.values())} after, "
      f"{len(removed)} removed, {len(added)} added")
sys.exit(1 if removed or (added and "--allow-added" not in sys.argv) else 0)
