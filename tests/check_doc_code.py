#!/usr/bin/env python3
"""Checks that code shown in the documentation is the code that is built and tested.

A Markdown file marks a code block with an HTML comment on the line before it:
    <!-- code: prune/criteria/movement.cpp -->
    ```cpp
    ...the whole file...
    ```
and the block must equal that file (relative to the repository root) exactly. A page that says
"one new file of N lines" must show a first block of N lines.
Usage: check_doc_code.py [--fix] ROOT DOC.md [DOC.md ...]; exits 1 naming every block that
differs. --fix copies the files into their blocks instead.
"""
import pathlib
import re
import sys

args = sys.argv[1:]
fix = bool(args) and args[0] == "--fix"
if fix:
    args = args[1:]
root = pathlib.Path(args[0])
docs = args[1:]
pattern = re.compile(r"(<!-- code: (\S+) -->\n```\w*\n)(.*?)```", re.S)
failures = 0
checked = 0
for doc in docs:
    text = (root / doc).read_text()
    if fix:
        text = pattern.sub(lambda m: m.group(1) + (root / m.group(2)).read_text() + "```", text)
        (root / doc).write_text(text)
    for match in pattern.finditer(text):
        path, block = match.group(2), match.group(3)
        source = root / path
        checked += 1
        if not source.exists():
            print(f"{doc}: shows {path}, which does not exist")
            failures += 1
        elif source.read_text() != block:
            print(f"{doc}: the block marked {path} differs from the file; copy the file into it")
            failures += 1
    claim = re.search(r"file of (\d+) lines", text)
    first = pattern.search(text)
    if claim and first and (root / first.group(2)).exists():
        lines = len((root / first.group(2)).read_text().splitlines())
        if lines != int(claim.group(1)):
            print(f"{doc}: says its file has {claim.group(1)} lines; {first.group(2)} has {lines}")
            failures += 1
if checked == 0:
    print("no marked code blocks found in " + " ".join(docs))
    failures += 1
print(f"{checked} code blocks checked, {failures} problems")
sys.exit(1 if failures else 0)
