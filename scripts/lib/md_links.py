"""Links of Markdown pages, as GitHub and the docs site (mkdocs.yml) read them.

Used by tests/docs/check_links.py (every link must resolve) and scripts/build-docs.py (the site
gets every file the pages link to). A link is `[text](target)`, `![alt](path)` or a
`[name]: target` definition, outside fenced code blocks and code spans.
"""
import os
import re
import unicodedata

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


def pages(root):
    yield os.path.join(root, "README.md")
    for folder, dirs, files in os.walk(os.path.join(root, "docs")):
        dirs.sort()
        for name in sorted(files):
            if name.endswith(".md"):
                yield os.path.join(folder, name)


def resolve(source, target):
    """(path, anchor) of a local link `target` in the page `source`; None for a URL."""
    if SCHEME.match(target):
        return None
    path, _, anchor = target.partition("#")
    resolved = os.path.normpath(os.path.join(os.path.dirname(source), path)) if path else source
    return resolved, anchor

