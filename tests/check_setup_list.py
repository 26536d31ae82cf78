#!/usr/bin/env python3
"""Checks that docs/building.md's "What a fresh machine needs" table lists exactly the Debian packages
scripts/setup.sh installs, so that the page a new user reads cannot drift from the script.
Usage: check_setup_list.py ROOT; exits 1 naming each package found in only one of them.
"""
import pathlib
import re
import sys

root = pathlib.Path(sys.argv[1])
script = (root / "scripts/setup.sh").read_text()
listed = re.search(r"^packages=\((.*?)\)", script, re.S | re.M)
if not listed:
    sys.exit("scripts/setup.sh: no packages=(...) list found")
installed = {p for p in listed.group(1).split() if not p.startswith('"$')}

readme = (root / "docs/building.md").read_text()
section = re.search(r"^## What a fresh machine needs\n(.*?)(?=^## |\Z)", readme, re.S | re.M)
if not section:
    sys.exit("docs/building.md: no '## What a fresh machine needs' section")
rows = [line for line in section.group(1).splitlines() if line.startswith("| `")]
documented = {name for row in rows for name in re.findall(r"`([^`]+)`", row.split("|")[1])}

ok = True
for name in sorted(installed - documented):
    print(f"scripts/setup.sh installs {name}, but docs/building.md's table does not list it")
    ok = False
for name in sorted(documented - installed):
    print(f"docs/building.md's table lists {name}, but scripts/setup.sh does not install it")
    ok = False
print(f"{len(installed)} packages checked" if ok else "docs/building.md and scripts/setup.sh disagree")
sys.exit(0 if ok else 1)
