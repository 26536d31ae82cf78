#!/usr/bin/env python3
"""docs/walkthrough.md names the code as it is.

Every `path: name` it cites must be a file that defines or declares that name, every
`Class::member` it names must exist in the code, and its table "Files visited, and their length"
must list, with their current line counts and total, the files the stops cite, in the order the
stops first cite them.
Usage: check_walkthrough.py [--fix] ROOT; exits 1 naming each reference that is wrong. --fix
rewrites the table from the code instead (the citations stay for a person to mend).
"""
import pathlib
import re
import sys

fix = sys.argv[1:2] == ["--fix"]
root = pathlib.Path(sys.argv[2] if fix else sys.argv[1])
page = (root / "docs/walkthrough.md").read_text()
stops = page[: page.index("## Files visited")]
sources = {p: p.read_text() for ext in ("cpp", "h", "cu") for p in root.glob(f"[a-z]*/**/*.{ext}")
           if "build" not in p.parts}
problems = []


def defines(text, name):
    """Whether `text` defines or declares `name` (the last part of A::b, or a type)."""
    last = name.split("::")[-1]
    owner = name.split("::")[-2] if "::" in name else None
    if owner and not re.search(rf"\b(class|struct)\s+{owner}\b|\b{owner}::{last}\b", text):
        return False
    return re.search(rf"\b{re.escape(last)}\b\s*[({{]|\b(class|struct|enum class)\s+{last}\b|"
                     rf"\b{owner}::{last}\b" if owner else
                     rf"\b{re.escape(last)}\b\s*[({{]|\b(class|struct|enum class)\s+{last}\b",
                     text) is not None


cited_files = []
for match in re.finditer(r"`?([\w/]+\.(?:cpp|h|cu))(?:: ([A-Za-z_][\w:]*))?", stops):
    path, name = match.group(1), match.group(2)
    if "/" not in path:
        continue  # a file named without its folder, in passing
    if path not in cited_files:
        cited_files.append(path)
    file = root / path
    if not file.exists():
        problems.append(f"cites {path}, which does not exist")
    elif name and not defines(file.read_text(), name):
        problems.append(f"cites {path}: {name}, which that file does not define")
for name in set(re.findall(r"`([A-Z]\w+::\w+)`", stops)) | set(re.findall(r"\*\*`([A-Z]\w+::\w+)`\*\*", stops)):
    if not any(defines(text, name) for text in sources.values()):
        problems.append(f"names {name}, which no source file defines")

if fix:
    rows = [f"| `{p}` | {len((root / p).read_text().splitlines())} |" for p in cited_files
            if (root / p).exists()]
    total_lines = sum(int(r.split("|")[2]) for r in rows)
    new_table = "\n".join(rows) + f"\n| total ({len(rows)} files) | {total_lines} |\n"
    page = re.sub(r"^\| `[\w/.]+` \| \d+ \|\n(?:^\| `[\w/.]+` \| \d+ \|\n)*^\| total \(\d+ files\) \| \d+ \|\n",
                  lambda m: new_table, page, flags=re.M)
    (root / "docs/walkthrough.md").write_text(page)
table = re.findall(r"^\| `([\w/.]+)` \| (\d+) \|$", page, re.M)
total = re.search(r"^\| total \((\d+) files\) \| (\d+) \|$", page, re.M)
listed = [path for path, _ in table]
if listed != cited_files:
    problems.append("the table of files visited is not the files the stops cite, in order:\n  "
                    + "\n  ".join(f"| `{p}` | {len((root / p).read_text().splitlines())} |"
                                  for p in cited_files if (root / p).exists()))
for path, lines in table:
    actual = len((root / path).read_text().splitlines()) if (root / path).exists() else -1
    if int(lines) != actual:
        problems.append(f"the table says {path} has {lines} lines; it has {actual}")
counted = sum(int(lines) for _, lines in table)
if not total or int(total.group(1)) != len(table) or int(total.group(2)) != counted:
    problems.append(f"the table's total should read: | total ({len(table)} files) | {counted} |")
for p in problems:
    print("docs/walkthrough.md: " + p)
print(f"{len(cited_files)} files cited, {len(problems)} problems")
sys.exit(1 if problems else 0)
