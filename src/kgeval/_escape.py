"""Text from outside (dataset paths, run and relation names, metric labels) made inert in each output format.

Every renderer writes such names through one of these functions, never raw: a ``|`` in a run name shifted
every number of a Markdown table one column to the right, ``<img onerror=...>`` reached Markdown viewers,
``^``/``~`` broke LaTeX, a CSV cell ``=HYPERLINK(...)`` became a spreadsheet formula, and ``$x$`` in a
dataset name was typeset (or failed) as matplotlib mathtext.
"""

from __future__ import annotations

import html
import re

#: characters a CommonMark/GFM renderer gives a meaning to inside a table cell: backslash-escaped (any
#: ASCII punctuation may be; these are the ones that format, link, open HTML, end a cell or start math)
_MARKDOWN_SPECIAL = re.compile(r"([\\`*_\[\]<>|&!~$#])")
#: line breaks and other control characters: a newline ends a table row, ESC starts a terminal sequence
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")

_LATEX = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_", "{": r"\{",
          "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}", "<": r"\textless{}",
          ">": r"\textgreater{}", "|": r"\textbar{}", "—": "--"}
#: a special character, or the first of two that TeX's fonts join into one glyph (``--`` an en dash, ``''`` a
#: closing quote, ``!``` an inverted exclamation mark...): separated by ``{}``
_LATEX_SPECIAL = re.compile("|".join(re.escape(k) for k in _LATEX) + r"|[-'`,!?<>](?=[-'`,<>])")

#: a first character that makes a spreadsheet read the cell as a formula (OWASP's CSV injection list)
CSV_FORMULA_START = ("=", "+", "-", "@", "\t", "\r", "\n")


def plain_text(text) -> str:
    """For a terminal table or a one-line message: control characters (newline, tab, ESC) as ``\\xNN``
    escapes, so a name can neither break a row nor send terminal escape sequences."""
    return _CONTROL.sub(lambda m: repr(m.group())[1:-1] if m.group() not in "\n\r\t" else
                        {"\n": r"\n", "\r": r"\r", "\t": r"\t"}[m.group()], str(text))


def markdown_text(text) -> str:
    r"""For a Markdown table cell, heading or list item (CommonMark/GFM): every character that formats,
    links, opens HTML, ends a cell or starts math is backslash-escaped; line breaks become spaces.

    Examples
    --------
    >>> markdown_text("a|b <img src=x>")
    'a\\|b \\<img src=x\\>'
    """
    return _MARKDOWN_SPECIAL.sub(r"\\\1", _CONTROL.sub(" ", str(text)))


def markdown_code(text) -> str:
    """A fenced code block holding ``text`` verbatim: the fence is longer than any run of backticks in it."""
    text = str(text)
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}\n{text}\n{fence}"


def latex_text(text) -> str:
    r"""For LaTeX text mode: the ten special characters and ``<``, ``>``, ``|`` (wrong glyphs in OT1) as
    commands, ligatures (``--``, ``''``, ...) broken; line breaks become spaces.

    Examples
    --------
    >>> latex_text("a_b^2~50%")
    'a\\_b\\textasciicircum{}2\\textasciitilde{}50\\%'
    """
    return _LATEX_SPECIAL.sub(lambda m: _LATEX.get(m.group(), m.group() + "{}"), _CONTROL.sub(" ", str(text)))


def csv_text(text) -> str:
    """For a CSV text cell: a value a spreadsheet would run as a formula (first character ``=``, ``+``,
    ``-``, ``@``, tab, CR or LF) gets a leading ``'``, as does one that already starts with ``'`` (so that
    :func:`csv_value` reads every cell back exactly). The ``csv`` module does the quoting."""
    text = str(text)
    return "'" + text if text.startswith(CSV_FORMULA_START + ("'",)) else text


def csv_value(cell: str) -> str:
    """The value :func:`csv_text` wrote (its leading ``'`` removed)."""
    return cell[1:] if cell.startswith("'") and cell[1:].startswith(CSV_FORMULA_START + ("'",)) else cell


def html_text(text) -> str:
    """For HTML text and attribute values (quotes escaped too)."""
    return html.escape(str(text), quote=True)


def mathtext_literal(text) -> str:
    r"""For a matplotlib label: ``$`` escaped, so that ``$...$`` in a name is drawn as written, not parsed as
    mathtext (a typeset formula, or a ``ValueError`` for one that does not parse).

    Examples
    --------
    >>> mathtext_literal("$x^2$ data")
    '\\$x^2\\$ data'
    """
    return plain_text(text).replace("$", r"\$")
