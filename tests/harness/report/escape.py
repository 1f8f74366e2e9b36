"""Run-chosen text made safe for where the grader puts it (issue 72: what a run leaves is
hostile input): one line of plain text, Markdown, a CSV cell, a matplotlib label.

A run chooses much of what the reports say: its exception text, its file names (call sites),
what it logged, the names a student gave themselves. Each function here takes such text and
returns text that reads the same but cannot change the structure it lands in: no new line
(a forged row, line or heading), no Markdown link, image or HTML, no spreadsheet formula, no
mathtext (whose parse errors make `savefig` raise). Every report escapes run-derived text
here, and only here.
"""

from __future__ import annotations

import re
import unicodedata

ELLIPSIS = "..."
# Line and paragraph separators and control characters (tabs, escapes, NUL, C1) read as a
# space; format characters (bidi overrides, zero-width joiners) as nothing: neither
# reorders nor hides what surrounds them; lone surrogates (json.loads keeps "\ud800")
# as U+FFFD, which UTF-8 can write.
_SPACE, _GONE, _REPLACED = ("Cc", "Zl", "Zp"), ("Cf",), ("Cs",)


def _char(ch: str) -> str:
    cat = unicodedata.category(ch)
    return " " if cat in _SPACE else "" if cat in _GONE else "\ufffd" if cat in _REPLACED \
        else ch


def _cut(text: str, limit: int | None) -> str:
    if limit is None or len(text) <= limit:
        return text
    return text[:max(limit - len(ELLIPSIS), 0)] + ELLIPSIS


def one_line(text: str, limit: int = 300) -> str:
    """The first non-blank line of `text`, with no control or format character, at most
    `limit` characters ("..." where cut)."""
    for line in str(text).splitlines():
        clean = "".join(map(_char, line)).strip()
        if clean:
            return _cut(clean, limit)
    return ""


def flat(text: str, limit: int | None = None) -> str:
    """All of `text` on one line (each line break a space), with no control or format
    character, at most `limit` characters."""
    return _cut("".join(map(_char, str(text))).strip(), limit)


# Backslash-escaped wherever they stand: code spans, emphasis, links and images, raw HTML and
# autolinks, table cells, strikethrough, entities, GitHub's math, and the backslash itself.
_MARKDOWN_ALWAYS = frozenset("\\`*[]<>|~$&@")
# What opens a block at the start of a line: a heading, a list item, a setext underline.
_MARKDOWN_LEAD = re.compile(r"[#+=-]|\d{1,9}(?=[.)])")
_AUTOLINK = re.compile(r"://|(?i:www)\.")  # GitHub's bare links: scheme:// and www.


def markdown(text: str, limit: int | None = None) -> str:
    """`text` on one line as literal Markdown: it renders as the same characters (every
    escape is a backslash before ASCII punctuation, which CommonMark drops) and never as a
    link, an image, HTML, code, emphasis, a table cell's end or a new block."""
    s = flat(text, limit)
    out: list[str] = []
    for i, ch in enumerate(s):
        if ch in _MARKDOWN_ALWAYS:
            out.append("\\" + ch)
        elif ch == "_" and not (0 < i < len(s) - 1 and s[i - 1].isalnum()
                                and s[i + 1].isalnum()):
            out.append("\\_")  # within a word (no_deadlock) it opens no emphasis
        elif ch in ":/." and _breaks_autolink(s, i):
            out.append("\\" + ch)
        else:
            out.append(ch)
    escaped = "".join(out)
    lead = _MARKDOWN_LEAD.match(escaped)
    if lead:  # "#", "-", "1." first: the page's own text, not a heading or a list
        end = lead.end()
        escaped = ("\\" + escaped if not escaped[0].isdigit()
                   else escaped[:end] + "\\" + escaped[end:])
    return escaped


def _breaks_autolink(s: str, i: int) -> bool:
    """Whether s[i] belongs to a "://" or the dot of a "www." (escaped: no bare link)."""
    return any(m.start() <= i < m.end() for m in _AUTOLINK.finditer(s, max(i - 3, 0), i + 4))


def markdown_lines(text: str, limit: int | None = None) -> str:
    """Each line of `text` as `markdown` escapes it, the lines kept (a paragraph of them)."""
    return "\n".join(markdown(line, limit) for line in str(text).splitlines())


# A spreadsheet reads a cell that starts with one of these as a formula (or, tab and
# carriage return, as the start of one after trimming): OWASP's CSV injection list.
_FORMULA = ("=", "+", "-", "@", "\t", "\r")


def csv_cell(text: str, limit: int | None = None) -> str:
    """`text` as one CSV cell: on one line, and read by a spreadsheet as text, never a
    formula (a leading = + - @ is kept behind an apostrophe, as spreadsheets show it)."""
    s = flat(text, limit)
    return "'" + s if s.startswith(_FORMULA) else s


def mathtext_safe(text: str, limit: int | None = 200, lines: bool = False) -> str:
    """`text` for a matplotlib title, label, legend or annotation: every "$" escaped, so
    that matplotlib draws it as typed and never parses mathtext (a parse error makes
    `savefig` raise); on one line, or (`lines`) line by line, each at most `limit`."""
    parts = [_cut("".join(map(_char, ln)).rstrip(), limit)  # indents kept: aligned rows
             for ln in str(text).splitlines()] if lines else [flat(text, limit)]
    return "\n".join(p.replace("$", r"\$") for p in parts)
