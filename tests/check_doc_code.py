#!/usr/bin/env python3
"""Checks that code shown in the documentation is the code that is built and tested.

A Markdown file marks a code block with an HTML comment on the line before it:
    <!-- code: prune/criteria/movement.cpp -->
    ```cpp
    ...the whole file...
    ```
and the block must equal that file (relative to the repository root) exactly.
Usage: check_doc_code.py ROOT DOC.md [DOC.md ...]; exits 1 naming every block that differs.
"""
import pathlib
import re
import sys

root = pathlib.Path(sys.argv[1])
failures = 0
checked = 0
for doc in sys.argv[2:]:
    text = (root / doc).read_text()
    for match in re.finditer(r"<!-- code: (\S+) -->\n```\w*\n(.*?)```", text, re.S):
        path, block = match.group(1), match.group(2)
        source = root / path
        checked += 1
        if not source.exists():
            print(f"{doc}: shows {path}, which does not exist")
            failures += 1
        elif source.read_text() != block:
            print(f"{doc}: the block marked {path} differs from the file; copy the file into it")
            failures += 1
if checked == 0:
    print("no marked code blocks found in " + " ".join(sys.argv[2:]))
    failures += 1
print(f"{checked} code blocks checked, {failures} problems")
sys.exit(1 if failures else 0)
