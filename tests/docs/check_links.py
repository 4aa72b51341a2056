#!/usr/bin/env python3
"""Checks every relative link, #anchor and image path of README.md and docs/**/*.md.

    tests/docs/check_links.py [ROOT]     (ROOT: the checkout, default: this file's ../..)

Links with a scheme (https:, mailto:) are left alone; every other one must name a file or
folder of the tree, and an #anchor must be a heading of the Markdown file it names (GitHub's
slugs, which mkdocs.yml gives the site too) or an `id=`/`name=` of an HTML tag in it
(scripts/lib/md_links.py reads them). Prints one line per broken link, `FILE:LINE: ...`, and
exits 1 if there is any.
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "scripts", "lib"))
import md_links  # noqa: E402

# Pages another change writes; until it has written them, links to them are reported as
# expected and not failed (their anchors are checked once they exist).
EXPECTED = {}  # flags.md and environment.md are written (generated, launcher/cmd/reference_main.cc)


def check_link(root, source, target):
    """None when the local link resolves, else why not."""
    resolved, anchor = md_links.resolve(source, target)
    relative = os.path.relpath(resolved, root)
    if relative.startswith(".."):
        return f"{target}: leaves the tree"
    if not os.path.exists(resolved):
        if relative in EXPECTED:
            print(f"note: {os.path.relpath(source, root)} links {relative} ({EXPECTED[relative]}),"
                  " not in this tree yet")
            return None
        return f"{target}: no such file {relative}"
    if anchor:
        if not resolved.endswith(".md"):
            return f"{target}: an anchor into {relative}, which is not Markdown"
        if anchor not in md_links.anchors(resolved):
            return f"{target}: no heading or id '{anchor}' in {relative}"
    return None


def main(argv):
    root = os.path.abspath(argv[1] if len(argv) > 1 else
                           os.path.join(os.path.dirname(__file__), "..", ".."))
    broken = checked = 0
    for page in md_links.pages(root):
        for number, line in md_links.lines_outside_code(page):
            for target in md_links.targets(line):
                if md_links.resolve(page, target) is None:
                    continue
                checked += 1
                why = check_link(root, page, target)
                if why:
                    broken += 1
                    print(f"{os.path.relpath(page, root)}:{number}: broken link {why}")
    print(f"check_links: {checked} links checked, {broken} broken")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
