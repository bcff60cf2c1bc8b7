#!/usr/bin/env bash
# The documentation's links, checked (make doc-links, in make test): README.md and docs/*.md.
#
# - Every relative Markdown link, [text](target) or [text](target#anchor), and every in-page link (#anchor):
#   the target file or folder exists, and an anchor is the GitHub anchor of a heading in the target (lowercase,
#   spaces to '-', punctuation other than '-' and '_' dropped; a repeated heading gets -1, -2, ...).
# - Every inline-code path that names a file of this repository (`docs/wire.md`, `test/e2e.sh`,
#   `erl/cbench.erl`, `src/options.c`; a path under one of the repository's top folders, without wildcards or
#   placeholders) exists.
# - Every mention of a Markdown file, in code or in plain text (`routes.md`, docs/bench.md, README.md),
#   names a file that exists, beside the mentioning file or from the repository's root.
#
# Text inside fenced code blocks is not read: examples there are not links. Each broken reference is printed
# as FILE:LINE: what is wrong; the exit status is 1 when there is one, 0 otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."

exec python3 - "$@" <<'EOF'
import os
import re
import sys

ROOT = os.getcwd()
FILES = ['README.md'] + sorted(os.path.join('docs', f) for f in os.listdir('docs') if f.endswith('.md'))
# The folders a repository path starts with; another word before a slash (`h2c/h1`, `build/...`, `priv/...`,
# build outputs) is not checked.
TOP = ('docs/', 'test/', 'erl/', 'src/', 'c_src/', 'nif/', 'bench/', 'scripts/', 'mk/', 'include/', '.ci/')

# Files the benchmark harness writes (bench/results/<run>/report.md, figures.md): named in the text as
# outputs, not as documents of the repository.
OUTPUTS = {'report.md', 'figures.md'}

FENCE = re.compile(r'^\s*(```|~~~)')
HEADING = re.compile(r'^(#{1,6})\s+(.*?)\s*#*\s*$')
LINK = re.compile(r'\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^()\s>]*(?:\([^()\s]*\)[^()\s>]*)*)>?(?:\s+"[^"]*")?\s*\)')
CODE = re.compile(r'(`+)(.+?)\1')
MD_MENTION = re.compile(r'(?<![\w./#<>-])((?:\.\./|[\w.-]+/)*[\w.-]+\.md)(?![\w/-])')


def lines_outside_fences(text):
    """(line number, line) for each line that is not inside a fenced code block."""
    inside = None
    for n, line in enumerate(text.split('\n'), 1):
        m = FENCE.match(line)
        if m:
            if inside is None:
                inside = m.group(1)
            elif m.group(1) == inside:
                inside = None
            continue
        if inside is None:
            yield n, line


def anchor(heading):
    """GitHub's anchor for a heading's text."""
    text = re.sub(r'\[([^\]]*)\]\([^)]*\)', r'\1', heading)   # a link in a heading: its text
    text = text.replace('`', '').replace('*', '')
    text = text.lower()
    text = ''.join(c for c in text if c.isalnum() or c in ' -_')
    return text.replace(' ', '-')


ANCHORS = {}


def anchors(path):
    if path not in ANCHORS:
        seen = {}
        found = set()
        with open(path, encoding='utf-8') as f:
            for _, line in lines_outside_fences(f.read()):
                m = HEADING.match(line)
                if not m:
                    continue
                a = anchor(m.group(2))
                k = seen.get(a, 0)
                seen[a] = k + 1
                found.add(a if k == 0 else '%s-%d' % (a, k))
        ANCHORS[path] = found
    return ANCHORS[path]


def resolve(doc, target):
    """The repository path a reference from doc means: beside doc first, then from the root."""
    here = os.path.normpath(os.path.join(os.path.dirname(doc), target))
    if os.path.exists(here):
        return here
    root = os.path.normpath(target)
    if not target.startswith('.') and os.path.exists(root):
        return root
    return None


broken = []


def report(doc, n, what):
    broken.append('%s:%d: %s' % (doc, n, what))


def check_link(doc, n, target):
    if re.match(r'^[a-z][a-z0-9+.-]*:', target, re.I):   # http:, https:, mailto:
        return
    path, _, frag = target.partition('#')
    if path:
        dest = resolve(doc, path)
        if dest is None:
            report(doc, n, "link to '%s': no such file" % target)
            return
    else:
        dest = doc
    if frag:
        if not dest.endswith('.md') or os.path.isdir(dest):
            report(doc, n, "link to '%s': an anchor into a file that is not Markdown" % target)
        elif frag not in anchors(dest):
            report(doc, n, "link to '%s': %s has no heading with the anchor '#%s'" % (target, dest, frag))


def check_code_path(doc, n, code):
    code = code.strip()
    code = re.sub(r':\d+(-\d+)?$', '', code)               # file:line
    if not code.startswith(TOP) or not re.fullmatch(r'[\w./-]+', code) or '..' in code:
        return
    if code.endswith('.md'):
        return                                           # checked as a Markdown mention
    if code.startswith('bench/results/'):
        return                                           # the harness's outputs (links there are checked)
    if not os.path.exists(code):
        report(doc, n, "inline path `%s`: no such file or folder in the repository" % code)


def check_md_mention(doc, n, name):
    if '<' in name or '*' in name or name in OUTPUTS:
        return
    if resolve(doc, name) is None:
        report(doc, n, "mention of '%s': no such Markdown file (beside %s or from the root)" % (name, doc))


for doc in FILES:
    with open(doc, encoding='utf-8') as f:
        text = f.read()
    for n, line in lines_outside_fences(text):
        spans = [m.group(2) for m in CODE.finditer(line)]
        for code in spans:
            check_code_path(doc, n, code)
        for m in LINK.finditer(line):
            check_link(doc, n, m.group(1))
        # Markdown files named anywhere on the line, minus links (their targets are checked above) and URLs.
        rest = LINK.sub('', line)
        rest = re.sub(r'[a-z][a-z0-9+.-]*://\S+', '', rest, flags=re.I)
        for m in MD_MENTION.finditer(rest):
            check_md_mention(doc, n, m.group(1))

for b in broken:
    print(b)
if broken:
    print('doc_links: %d broken reference(s) in README.md and docs/*.md' % len(broken), file=sys.stderr)
    sys.exit(1)
print('doc_links: every link, anchor and named file of README.md and docs/*.md (%d files) exists' % len(FILES))
EOF
