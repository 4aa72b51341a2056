#!/usr/bin/env python3
"""Renders README.md and docs/ as a site into build/docs/ (`make docs`).

    scripts/build-docs.py MKDOCS     (MKDOCS: the pinned venv's mkdocs, scripts/install-tools.sh)

Copies README.md, every page under docs/ and every file they link to, and the files those link
to in turn, into build/docs-src/ at their paths in the tree (so `docs/guide/x.md` links
`../../bench/RESULTS.md` in the site as on GitHub), then runs `mkdocs build --strict` with
mkdocs.yml. Pages another change writes (tests/docs/check_links.py's EXPECTED) that are not in
this tree yet get a page saying so in build/docs-src/ only, so that the nav builds.
"""
import os
import re
import shutil
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(ROOT, "scripts", "lib"))
sys.path.insert(0, os.path.join(ROOT, "tests", "docs"))
import md_links  # noqa: E402
from check_links import EXPECTED  # noqa: E402

STAGE = os.path.join(ROOT, "build", "docs-src")
BLOCK_START = re.compile(r"^(?:[-*+] |\d+\. |\|)")


def for_python_markdown(text):
    """`text` with a blank line before a list or table that follows a paragraph line.

    GitHub starts a list or a table right under a paragraph; Python-Markdown (MkDocs) needs a
    blank line before it and would run it into the paragraph. The pages stay as GitHub reads
    them; only the copies MkDocs renders get the blank line."""
    out, fence, previous = [], False, ""
    for line in text.split("\n"):
        if md_links.FENCE.match(line):
            fence = not fence
        elif (not fence and BLOCK_START.match(line) and previous.strip()
              and not BLOCK_START.match(previous) and not previous[0].isspace()):
            out.append("")
        out.append(line)
        previous = line
    return "\n".join(out)


def stage_tree():
    """Copies the pages and what they link to into STAGE; returns how many files."""
    todo = list(md_links.pages(ROOT))
    seen = set()
    while todo:
        path = todo.pop()
        if path in seen or not os.path.isfile(path):
            continue
        seen.add(path)
        relative = os.path.relpath(path, ROOT)
        if relative.startswith(".."):
            continue
        os.makedirs(os.path.dirname(os.path.join(STAGE, relative)), exist_ok=True)
        if not path.endswith(".md"):
            shutil.copy2(path, os.path.join(STAGE, relative))
        else:
            with open(path, encoding="utf-8") as f, \
                 open(os.path.join(STAGE, relative), "w", encoding="utf-8") as out:
                out.write(for_python_markdown(f.read()))
            for _, line in md_links.lines_outside_code(path):
                for target in md_links.targets(line):
                    local = md_links.resolve(path, target)
                    if local is not None:
                        todo.append(local[0])
    for relative, what in EXPECTED.items():
        if not os.path.exists(os.path.join(ROOT, relative)):
            with open(os.path.join(STAGE, relative), "w", encoding="utf-8") as f:
                f.write(f"# {os.path.basename(relative)}\n\nNot in this tree yet: {what}.\n")
            print(f"build-docs: {relative} is not in this tree yet; the site says so")
    return len(seen)


def main(argv):
    if len(argv) != 2:
        print("usage: scripts/build-docs.py MKDOCS", file=sys.stderr)
        return 2
    shutil.rmtree(STAGE, ignore_errors=True)
    count = stage_tree()
    print(f"build-docs: {count} files in {os.path.relpath(STAGE, ROOT)}")
    return subprocess.call([argv[1], "build", "--strict", "--clean", "-f",
                            os.path.join(ROOT, "mkdocs.yml")], cwd=ROOT)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
