#!/usr/bin/env python3
"""The commands the README and docs show are complete, copyable and run.

Every `build/pactrain` command in a ```sh block of README.md and docs/**/*.md (continuation lines
joined) must be complete: no `...` placeholder, and a `train` command must start from a recipe
(`--config`). With --run PACTRAIN, each block's pactrain commands then run in order in a scratch
folder for a few steps (a recipe's text data replaced by a small file, image data cut to a few
hundred samples, an image folder replaced by the build's fixture folder at 64x64); those under mpirun on 2 ranks with --mpiexec MPIEXEC, else on one (and those
that need ranks, --sync, not at all); those behind scripts/testbed, srun or a GPU the machine
lacks are only checked.
Usage: check_doc_commands.py ROOT [--run PACTRAIN [--mpiexec MPIEXEC] [--image-folder DIR]];
exits 1 naming each command that fails.
"""
import pathlib
import re
import shlex
import subprocess
import sys
import tempfile

root = pathlib.Path(sys.argv[1]).resolve()
args = sys.argv[2:]
pactrain = str(pathlib.Path(args[1]).resolve()) if args[:1] == ["--run"] else None
mpiexec = args[3] if args[2:3] == ["--mpiexec"] and args[3] != "none" else None
image_folder = args[args.index("--image-folder") + 1] if "--image-folder" in args else None
pages = [root / "README.md"] + sorted((root / "docs").rglob("*.md"))
block = re.compile(r"```sh\n(.*?)```", re.S)


def commands(text):
    """(line number, command) for each pactrain command in the page's sh blocks, by block."""
    for match in block.finditer(text):
        first_line = text.count("\n", 0, match.start(1)) + 1
        joined, start, found = "", None, []
        for offset, line in enumerate(match.group(1).splitlines()):
            if start is None:
                start = first_line + offset
            joined += line.rstrip("\\").rstrip() + " " if line.endswith("\\") else line
            if line.endswith("\\"):
                continue
            code = joined.split(" #")[0].strip()
            if "build/pactrain" in code:
                found.append((start, code))
            joined, start = "", None
        yield found


def replace_value(words, key, value):
    """The words with KEY's value replaced by VALUE, or KEY VALUE added."""
    if key in words:
        i = words.index(key)
        return words[:i + 1] + [value] + words[i + 2:]
    return words + [key, value]


def quick(code, text_file):
    """The command as a quick run, or None when it needs a testbed, a cluster, a GPU, or (for
    --sync) ranks that this build cannot start."""
    if code.startswith(("scripts/testbed", "srun", "sh ")):
        return None
    if "--device cuda" in code and not pathlib.Path("/dev/nvidia0").exists():
        return None
    words = shlex.split(code)
    launcher = []
    if words[0] == "mpirun" and mpiexec:
        launcher = [mpiexec, "--oversubscribe", "-n", "2"]
    elif "--sync" in words:
        return None
    words = words[words.index("build/pactrain"):]
    words[0] = pactrain
    words = [str(root / w) if w.startswith("apps/recipes/") else w for w in words]

    def setting(key, value):  # the page's own value stays, except for the run's length
        if key not in words:
            words.extend([key, value])
        elif key == "--max-steps":
            words[words.index(key) + 1] = value

    if words[1] not in ("train", "eval", "generate"):
        return launcher + words
    config = " ".join(words)
    fortunes = "--data fortunes" in config or "gpt-nano.toml" in config
    if fortunes:
        words = [w for w in words if w not in ("--data", "fortunes")]
        words += ["--data", "text", "--text-file", text_file]
    folder = "imagefolder" in config or "-imagenet.toml" in config
    if folder and not image_folder:
        return None
    if folder:  # the page's folder is the user's; the fixture stands in, small and quick
        words = replace_value(words, "--data-dir", image_folder)
        if words[1] == "train":
            for key, value in [("--image-size", "64"), ("--global-batch", "8"), ("--epochs", "1")]:
                words = replace_value(words, key, value)
    if words[1] == "train":
        for key, value in [("--max-steps", "2"), ("--threads", "1"), ("--quiet", None)]:
            if value is None:
                words += [key] if key not in words else []
            else:
                setting(key, value)
        if fortunes:
            setting("--eval-iters", "2")
        elif not folder:
            setting("--train-subset", "256")
            setting("--test-subset", "100")
    elif words[1] == "eval" and not fortunes and not folder:
        setting("--test-subset", "100")
    return launcher + words


failures = 0
ran = 0
for page in pages:
    name = page.relative_to(root)
    for found in commands(page.read_text()):
        scratch = tempfile.TemporaryDirectory()
        text_file = pathlib.Path(scratch.name) / "text.txt"
        text_file.write_text("".join(f"The cat {i % 9} sat on the mat, said ROMEO.\n" for i in range(300)))
        for line, code in found:
            if "..." in code:
                print(f"{name}:{line}: a placeholder '...' in: {code}")
                failures += 1
                continue
            if re.search(r"build/pactrain train\b", code) and "--help" not in code and "--config" not in code:
                print(f"{name}:{line}: a train command without a recipe (--config): {code}")
                failures += 1
                continue
            if not pactrain:
                continue
            words = quick(code, str(text_file))
            if words is None:
                continue
            ran += 1
            done = subprocess.run(words, cwd=scratch.name, capture_output=True, text=True)
            if done.returncode != 0:
                print(f"{name}:{line}: failed ({done.returncode}): {code}\n{done.stderr[-800:]}")
                failures += 1
print(f"{ran} commands run, {failures} problems")
sys.exit(1 if failures else 0)
