#!/usr/bin/env python3
"""Checks every relative link, #anchor and image path of README.md and docs/**/*.md.

    tests/docs/check_links.py [ROOT]     (ROOT: the checkout, default: this file's ../..)

A link is `[text](target)`, `![alt](path)` or a `[name]: target` definition, outside fenced code
blocks and code spans. Links with a scheme (https:, mailto:) are left alone; every other one must
name a file or folder of the tree, and an #anchor must be a heading of the Markdown file it
names (GitHub's slugs, which mkdocs.yml gives the site too) or an `id=`/`name=` of an HTML tag
in it. Prints one line per broken link, `FILE:LINE: ...`, and exits 1 if there is any.
"""
import os
import re
import sys
import unicodedata

# Pages another build step writes; until it has written them, links to them are reported as
# expected and not failed (their anchors are checked once they exist).
EXPECTED = {
    "docs/reference/flags.md": "the reference generated from the flag table",
    "docs/reference/environment.md": "the table of every environment variable ddprun reads",
}

FENCE = re.compile(r"^\s*(```|~~~)")
CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1")
INLINE = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
DEFINITION = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
HTML_ID = re.compile(r"<[a-zA-Z][^>]*\s(?:id|name)=\"([^\"]+)\"")
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def slug(heading):
    """GitHub's anchor of a heading (pymdownx.slugs.slugify(case='lower') gives the same)."""
    text = re.sub(r"</?[^>]*>", "", unicodedata.normalize("NFC", heading)).strip().lower()
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link in a heading: its text
    text = text.replace("`", "")
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def lines_outside_code(path):
    """(line number, text) of each line outside fenced code, code spans blanked."""
    in_fence = None
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            m = FENCE.match(line)
            if m:
                if in_fence is None:
                    in_fence = m.group(1)
                elif m.group(1) == in_fence:
                    in_fence = None
                continue
            if in_fence is None:
                yield number, line.rstrip("\n")


def anchors(path, cache={}):
    if path not in cache:
        found, seen = set(), {}
        for _, line in lines_outside_code(path):
            m = HEADING.match(line)
            if m:
                base = slug(m.group(2))
                n = seen.get(base, 0)
                seen[base] = n + 1
                found.add(base if n == 0 else f"{base}-{n}")
            found.update(HTML_ID.findall(line))
        cache[path] = found
    return cache[path]


def targets(line):
    text = CODE_SPAN.sub(lambda m: " " * len(m.group(0)), line)
    yield from INLINE.findall(text)
    m = DEFINITION.match(text)
    if m:
        yield m.group(1)


def check_link(root, source, target):
    """None when the link resolves, else why not."""
    path, _, anchor = target.partition("#")
    if path:
        resolved = os.path.normpath(os.path.join(os.path.dirname(source), path))
    else:
        resolved = source
    relative = os.path.relpath(resolved, root)
    if relative.startswith(".."):
        return f"{target}: leaves the tree"
    if not os.path.exists(resolved):
        if relative in EXPECTED:
            print(f"note: {os.path.relpath(source, root)} links {relative} ({EXPECTED[relative]}), "
                  "not in this tree yet")
            return None
        return f"{target}: no such file {relative}"
    if anchor:
        if not resolved.endswith(".md"):
            return f"{target}: an anchor into {relative}, which is not Markdown"
        if anchor not in anchors(resolved):
            return f"{target}: no heading or id '{anchor}' in {relative}"
    return None


def pages(root):
    yield os.path.join(root, "README.md")
    for folder, dirs, files in os.walk(os.path.join(root, "docs")):
        dirs.sort()
        for name in sorted(files):
            if name.endswith(".md"):
                yield os.path.join(folder, name)


def main(argv):
    root = os.path.abspath(argv[1] if len(argv) > 1 else
                           os.path.join(os.path.dirname(__file__), "..", ".."))
    broken = checked = 0
    for page in pages(root):
        for number, line in lines_outside_code(page):
            for target in targets(line):
                if SCHEME.match(target):
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
