#!/usr/bin/env python3
"""Checks that every link in README.md and docs/*.md resolves, without leaving the machine.

A relative link must name a file (or folder) inside the source tree; an `#anchor`, in the same file or as
`file.md#anchor`, must be the GitHub slug of a heading in that file (or an explicit `<a id=...>`/`name=`);
an http(s) link is checked for its syntax only. Fenced code blocks and code spans are not Markdown, so links
in them are skipped. Prints `FILE:LINE: link 'X' ... (why)` for each broken link and exits 1 if any.

    check_links.py SOURCE_ROOT        check README.md and docs/**/*.md under SOURCE_ROOT
    check_links.py --self-test        check the checker against a made-up tree with known broken links
"""

import difflib
import os
import re
import sys
import tempfile
import unicodedata
import urllib.parse

FENCE = re.compile(r"^ *(`{3,}|~{3,})")
ATX_HEADING = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
SETEXT_UNDERLINE = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
HTML_ANCHOR = re.compile(r"<a\s[^>]*?\b(?:id|name)\s*=\s*[\"']([^\"']+)[\"']", re.I)
HTML_LINK = re.compile(r"<(?:a|img)\s[^>]*?\b(?:href|src)\s*=\s*[\"']([^\"']*)[\"']", re.I)
AUTOLINK = re.compile(r"<([A-Za-z][A-Za-z0-9+.-]{1,31}:[^<>\s]*)>")
REFERENCE_DEF = re.compile(r"^ {0,3}\[([^\]]+)\]:[ \t]*(<[^>]*>|\S+)", re.M)
# `[text](` or `![alt](`: the text may hold one level of nested brackets and may span lines.
INLINE_OPEN = re.compile(r"!?\[((?:[^\[\]\\]|\\.|\[[^\[\]]*\])*)\]\(")
REFERENCE_USE = re.compile(r"!?\[((?:[^\[\]\\]|\\.)+)\]\[([^\[\]]*)\]")


def blank_code(text):
    """The text with fenced code blocks and code spans replaced by spaces (newlines kept), so that
    offsets and line numbers stay those of the original."""
    return blank_spans(blank_fences(text))


def blank_fences(text):
    """The text with its fenced code blocks replaced by spaces."""
    lines = text.split("\n")
    out = []
    fence = None
    for line in lines:
        m = FENCE.match(line)
        if fence is None and m:
            fence = m.group(1)
            out.append(" " * len(line))
        elif fence is not None:
            if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence) and \
                    line.strip() == m.group(1):
                fence = None
            out.append(" " * len(line))
        else:
            out.append(line)
    return "\n".join(out)


def blank_spans(text):
    """The text with its code spans replaced by spaces: a run of backticks up to the next run of the
    same length, within one paragraph."""
    chars = list(text)
    i = 0
    while i < len(text):
        if text[i] != "`":
            i += 1
            continue
        j = i
        while j < len(text) and text[j] == "`":
            j += 1
        run = j - i
        k = j
        close = -1
        while k < len(text):
            if text.startswith("\n\n", k):
                break
            if text[k] == "`":
                e = k
                while e < len(text) and text[e] == "`":
                    e += 1
                if e - k == run:
                    close = k
                    break
                k = e
            else:
                k += 1
        if close < 0:
            i = j
            continue
        for p in range(i, close + run):
            if chars[p] != "\n":
                chars[p] = " "
        i = close + run
    return "".join(chars)


def heading_text(raw):
    """A heading's text as GitHub renders it: code spans, emphasis and links reduced to their text."""
    t = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", raw)
    t = re.sub(r"<[^>]+>", "", t)
    t = t.replace("`", "")
    t = re.sub(r"(\*{1,3}|_{1,3})(\S(?:.*?\S)?)\1", r"\2", t)
    return t.strip()


def github_slug(text):
    """GitHub's anchor for a heading: lower case, punctuation and symbols dropped (letters, digits,
    marks, `_` and `-` kept), each space a hyphen."""
    out = []
    for ch in text.lower():
        cat = unicodedata.category(ch)
        if ch == " ":
            out.append("-")
        elif ch in "-_" or cat[0] in "LNM":
            out.append(ch)
    return "".join(out)


def anchors_of(text):
    """Every anchor a Markdown file defines: its headings' slugs, numbered -1, -2, ... when repeated,
    as GitHub does, and explicit HTML ids."""
    lines = blank_fences(text).split("\n")
    seen = {}
    anchors = set()

    def add(title):
        slug = github_slug(heading_text(title))
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        anchors.add(slug if n == 0 else "%s-%d" % (slug, n))

    for i, line in enumerate(lines):
        m = ATX_HEADING.match(line)
        if m:
            add(m.group(2) or "")
        elif i > 0 and SETEXT_UNDERLINE.match(line) and lines[i - 1].strip() and \
                not ATX_HEADING.match(lines[i - 1]) and not lines[i - 1].lstrip().startswith(("-", "*", "+", ">", "|")):
            add(lines[i - 1].strip())
        for a in HTML_ANCHOR.findall(line):
            anchors.add(a)
    return anchors


def destination(text, start):
    """The destination of the link whose `(` ends at text[start], with its white space kept when it is
    not followed by a title (so that a destination with a space in it is seen); None if the parenthesis
    does not close."""
    depth = 0
    j = start
    in_angle = False
    while j < len(text):
        c = text[j]
        if c == "\\":
            j += 2
            continue
        if text.startswith("\n\n", j):
            return None
        if c == "<" and text[start:j].strip() == "":
            in_angle = True
        elif c == ">" and in_angle:
            in_angle = False
        elif c == "(" and not in_angle:
            depth += 1
        elif c == ")" and not in_angle:
            if depth == 0:
                break
            depth -= 1
        j += 1
    if j >= len(text):
        return None
    inner = text[start:j].strip()
    if inner.startswith("<"):
        end = inner.find(">")
        return inner[1:end] if end >= 0 else inner
    m = re.fullmatch(r"""(\S*)(?:\s+("[^"]*"|'[^']*'|\([^)]*\)))?""", inner, re.S)
    return m.group(1) if m else inner


def paragraphs(text):
    """(offset, text) of each run of lines between blank lines: link text never spans a blank line."""
    out = []
    pos = 0
    for m in re.finditer(r"\n[ \t]*\n", text):
        out.append((pos, text[pos:m.start()]))
        pos = m.end()
    out.append((pos, text[pos:]))
    return out


def links_of(text):
    """(offset, destination) of every inline link and image, reference definition, autolink and HTML
    link or image outside code."""
    code_free = blank_code(text)
    found = []
    for start, para in paragraphs(code_free):
        for m in INLINE_OPEN.finditer(para):
            found.append((start + m.start(), destination(para, m.end())))
    for m in REFERENCE_DEF.finditer(code_free):
        dest = m.group(2)
        found.append((m.start(), dest[1:-1] if dest.startswith("<") else dest))
    for m in AUTOLINK.finditer(code_free):
        found.append((m.start(), m.group(1)))
    for m in HTML_LINK.finditer(code_free):
        found.append((m.start(), m.group(1)))
    return found


def reference_uses(text):
    """(offset, label) of every `[text][label]` and `[label][]` outside code."""
    out = []
    for start, para in paragraphs(blank_code(text)):
        for m in REFERENCE_USE.finditer(para):
            out.append((start + m.start(), m.group(2) or m.group(1)))
    return out


def normalise_label(label):
    return re.sub(r"\s+", " ", label.strip()).lower()


def check_external(dest):
    """Why an absolute URL is malformed, or None. Nothing is fetched."""
    try:
        u = urllib.parse.urlsplit(dest)
    except ValueError as e:
        return "malformed URL: %s" % e
    scheme = u.scheme.lower()
    if scheme in ("http", "https"):
        if not u.netloc or not u.hostname:
            return "no host in the URL"
        if re.search(r"\s", dest):
            return "white space in the URL"
        host = u.hostname
        if not re.fullmatch(r"[A-Za-z0-9.-]+|\[[0-9A-Fa-f:.]+\]", host) or host.startswith(".") or ".." in host:
            return "malformed host '%s'" % host
        try:
            u.port
        except ValueError:
            return "malformed port"
        return None
    if scheme == "mailto":
        return None if re.fullmatch(r"[^@\s]+@[^@\s]+", u.path) else "malformed mail address"
    return "scheme '%s:' is neither http(s) nor mailto, so a reader cannot follow it" % scheme


class Checker:
    def __init__(self, root):
        self.root = os.path.realpath(root)
        self.anchor_cache = {}
        self.problems = []
        self.links = 0

    def anchors(self, path):
        if path not in self.anchor_cache:
            with open(path, encoding="utf-8") as f:
                self.anchor_cache[path] = anchors_of(f.read())
        return self.anchor_cache[path]

    def report(self, rel, line, link, why):
        self.problems.append("%s:%d: link '%s' does not resolve (%s)" % (rel, line, link, why))

    def check_anchor(self, rel, line, link, target, target_rel, fragment):
        anchors = self.anchors(target)
        want = urllib.parse.unquote(fragment)
        if want in anchors:
            return
        why = "no heading in %s has the anchor '#%s'" % (target_rel, want)
        if want.lower() in anchors:
            why += "; anchors are lower case: '#%s'" % want.lower()
        else:
            close = difflib.get_close_matches(want, sorted(anchors), n=1, cutoff=0.6)
            if close:
                why += "; did you mean '#%s'?" % close[0]
        self.report(rel, line, link, why)

    def check_file(self, path):
        rel = os.path.relpath(path, self.root)
        with open(path, encoding="utf-8") as f:
            text = f.read()
        line_of = lambda offset: text.count("\n", 0, offset) + 1
        definitions = {normalise_label(m.group(1)) for m in REFERENCE_DEF.finditer(blank_code(text))}
        for offset, label in reference_uses(text):
            self.links += 1
            if normalise_label(label) not in definitions:
                self.report(rel, line_of(offset), "[%s]" % label, "no reference definition '[%s]: ...'" % label)
        for offset, dest in links_of(text):
            self.links += 1
            line = line_of(offset)
            if dest is None:
                self.report(rel, line, text[offset:offset + 40].split("\n")[0], "its parenthesis never closes")
                continue
            if dest == "":
                self.report(rel, line, dest, "empty destination")
                continue
            if re.search(r"\s", dest):
                self.report(rel, line, dest, "white space in the destination; write it as %20")
                continue
            if re.match(r"[A-Za-z][A-Za-z0-9+.-]*:", dest) and not re.match(r"[A-Za-z]:[\\/]", dest):
                why = check_external(dest)
                if why:
                    self.report(rel, line, dest, why)
                continue
            if dest.startswith("//"):
                self.report(rel, line, dest, "a protocol-relative URL; write https://")
                continue
            path_part, _, fragment = dest.partition("#")
            path_part = path_part.split("?", 1)[0]
            if path_part == "":
                target, target_rel = path, rel
            else:
                if path_part.startswith("/"):
                    self.report(rel, line, dest, "an absolute path; links must be relative to the file")
                    continue
                target = os.path.normpath(os.path.join(os.path.dirname(path), urllib.parse.unquote(path_part)))
                real = os.path.realpath(target)
                if real != self.root and not real.startswith(self.root + os.sep):
                    self.report(rel, line, dest, "it leaves the source tree")
                    continue
                target_rel = os.path.relpath(target, self.root)
                if not os.path.exists(target):
                    self.report(rel, line, dest, "no file %s" % target_rel)
                    continue
            if fragment and target.endswith(".md") and os.path.isfile(target):
                self.check_anchor(rel, line, dest, target, target_rel, fragment)

    def files(self):
        readme = os.path.join(self.root, "README.md")
        out = [readme] if os.path.isfile(readme) else []
        docs = os.path.join(self.root, "docs")
        for dirpath, dirnames, filenames in os.walk(docs):
            dirnames.sort()
            out += [os.path.join(dirpath, n) for n in sorted(filenames) if n.endswith(".md")]
        return out

    def run(self):
        files = self.files()
        if not files:
            self.problems.append("%s: no README.md and no docs/*.md to check" % self.root)
        for path in files:
            self.check_file(path)
        return files


def self_test():
    """The checker against a tree whose broken links are known: it must report exactly those, and a
    tree with only good links must pass."""
    good = {
        "README.md": "# Title\n\n[doc](docs/a.md), [section](docs/a.md#the-b-section-x), [here](#title)\n"
                     "![pic](docs/images/p.png) [web](https://example.org/x?y=1#z) <https://example.org>\n"
                     "[ref][r] and [r][]\n\n[r]: docs/a.md#a-page\n"
                     "```\n[in a fence](missing.md)\n```\n`[in code](missing.md)` and ``a ` [x](missing.md)``\n",
        "docs/a.md": "# A page\n\n## The `b` section: x!\n\nSetext heading\n--------------\n\n## A page\n\n"
                     "[up](../README.md#title) [img](images/p.png) [setext](#setext-heading) [dup](#a-page-1)\n"
                     "[multi\nline](#a-page) <a id=\"custom\"></a> [custom](#custom) [folder](images/)\n",
        "docs/images/p.png": "",
    }
    bad_readme = good["README.md"] + (
        "[gone](docs/missing.md)\n"            # 12
        "[anchor](docs/a.md#no-such)\n"        # 13
        "[case](#Title)\n"                     # 14
        "[web](https://exa mple.org/)\n"       # 15
        "[nohost](https:///x)\n"               # 16
        "[out](../outside.md)\n"               # 17
        "[abs](/etc/passwd)\n"                 # 18
        "[what][nowhere]\n"                    # 19
        "[ftp](ftp://example.org/f)\n"         # 20
        "![img](docs/images/q.png)\n"          # 21
        "[a bracket never closed\n\n"
        "[late](docs/late.md)\n")              # 24: the line of its own paragraph
    expected = {
        "README.md:12: link 'docs/missing.md'",
        "README.md:13: link 'docs/a.md#no-such'",
        "README.md:14: link '#Title'",
        "README.md:15: link 'https://exa mple.org/'",
        "README.md:16: link 'https:///x'",
        "README.md:17: link '../outside.md'",
        "README.md:18: link '/etc/passwd'",
        "README.md:19: link '[nowhere]'",
        "README.md:20: link 'ftp://example.org/f'",
        "README.md:21: link 'docs/images/q.png'",
        "README.md:24: link 'docs/late.md'",
    }
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, body in good.items():
            p = os.path.join(tmp, name)
            os.makedirs(os.path.dirname(p), exist_ok=True)
            with open(p, "w", encoding="utf-8") as f:
                f.write(body)
        c = Checker(tmp)
        c.run()
        if c.problems:
            failures.append("the good tree was refused:\n  " + "\n  ".join(c.problems))
        with open(os.path.join(tmp, "README.md"), "w", encoding="utf-8") as f:
            f.write(bad_readme)
        c = Checker(tmp)
        c.run()
        got = {p.split(" does not resolve")[0] for p in c.problems}
        if got != expected:
            failures.append("broken links: expected\n  %s\ngot\n  %s" % (
                "\n  ".join(sorted(expected)), "\n  ".join(sorted(c.problems))))
    for name, want in (("The workbench: `meshbench`", "the-workbench-meshbench"),
                       ("Training on one device: `meshbench-agent`", "training-on-one-device-meshbench-agent"),
                       ("The model, exactly", "the-model-exactly"), ("`model`", "model"),
                       ("How the numbers are computed", "how-the-numbers-are-computed"),
                       ("Set up and run (Debian 12, as root or as a user with sudo)",
                        "set-up-and-run-debian-12-as-root-or-as-a-user-with-sudo"),
                       ("Loss and **optimiser** × 2", "loss-and-optimiser--2")):
        got = github_slug(heading_text(name))
        if got != want:
            failures.append("slug of %r: expected %r, got %r" % (name, want, got))
    for f in failures:
        print("self-test: " + f)
    print("self-test: %s" % ("failed" if failures else "passed"))
    return 1 if failures else 0


def main(argv):
    if len(argv) == 2 and argv[1] == "--self-test":
        return self_test()
    if len(argv) != 2 or argv[1].startswith("-"):
        print("usage: check_links.py SOURCE_ROOT | --self-test", file=sys.stderr)
        return 2
    if not os.path.isdir(argv[1]):
        print("check_links.py: %s is not a folder" % argv[1], file=sys.stderr)
        return 2
    c = Checker(argv[1])
    files = c.run()
    for p in c.problems:
        print(p)
    print("%d links in %d files checked, %d broken" % (c.links, len(files), len(c.problems)))
    return 1 if c.problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
