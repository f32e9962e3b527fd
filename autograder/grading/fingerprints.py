"""Fingerprints of one code cell: what stays the same when an answer is copied and disguised.

As MOSS takes them (Schleimer, Wilkerson and Aiken, "Winnowing: local algorithms for document
fingerprinting", SIGMOD 2003): the cell becomes a stream of normalised tokens, every K consecutive
tokens (a k-gram) are hashed, and of every WINDOW consecutive hashes the smallest is kept. Two cells
that share a run of at least K + WINDOW - 1 normalised tokens share at least one fingerprint, whatever
else differs; a run shorter than K tokens (`x = 0`) never counts. A k-gram never spans two statements,
and each statement is winnowed on its own, so statements moved around keep all their fingerprints.

Normalised away is what a copier changes for free: comments, docstrings and other bare strings,
blank lines, indentation and line breaks, parentheses and trailing commas (which formatters add and
remove), the text of string literals, and every name the cell binds (its variables, parameters,
functions, classes, loop targets, import aliases such as `np`, and the attributes it assigns), each
of which becomes "V". Names it only uses (`torch`, `einsum`, `len`, a keyword argument) stay: they
are what the answer does, and they tell two short answers that call different functions apart.

The tokens come from one regular expression rather than the tokenize module, which is 3 to 6 times
slower (a class of 1,000 has 40,000 answers) and gives up on a half-written cell; which names a cell
binds comes from the compiler's symbol tables. A k-gram's hash is Python's hash of a tuple of ints,
which, unlike a str's, is not salted per process: a cell has the same fingerprints in every run, so
a rebuilt report flags the same pairs.
"""

from __future__ import annotations

import builtins
import keyword
import re
import symtable
import zlib
from typing import NamedTuple

K = 5                # tokens per k-gram: `y = x.sum(1)` is 6 (`V = V . sum 1`)
WINDOW = 4           # k-grams per winnowing window: a shared run of K + WINDOW - 1 = 8 tokens is always seen
MAX_CHARS = 20_000   # of a cell fingerprinted: an answer is a few hundred; a pasted megabyte must not stall the report
VARIABLE = "V"
STRING = "S"

# Strings first (a prefix such as `r` or `f` is not a name), then names, numbers, operators (the longest first),
# a line break, a backslash continuation, a comment; anything else is a token of one character.
_TOKEN = re.compile(r"""
    (?P<string>(?:[rRbBfFuU]{1,2})?(?:'''[\s\S]*?'''|\"\"\"[\s\S]*?\"\"\"|'(?:\\.|[^'\\\n])*'|"(?:\\.|[^"\\\n])*"))
  | (?P<name>[^\W\d]\w*)
  | (?P<number>\d[\w.]*)
  | (?P<op>\*\*=?|//=?|->|:=|<<=?|>>=?|[-+*/%@&|^<>=!]=|[^\w\s\\\#])
  | (?P<newline>\n)
  | (?P<continuation>\\\n)
  | (?P<comment>\#[^\n]*)
  | (?P<other>\S)
""", re.VERBOSE)
_OPENING, _CLOSING = "([{", ")]}"
_LAYOUT_PARENTHESES = ("(", ")")                # around tuples, conditions, long lines: formatters add and drop them
_COMMA_OPTIONAL_BEFORE = (")", "]", "}", "=")  # `f(a, b,)`, `(x,) = t` -> `x, = t`: formatters add and drop it
_NAMES_KEPT_WITHOUT_A_PARSE = set(keyword.kwlist) | set(dir(builtins))
_ALIAS = re.compile(r"\bas\s+([^\W\d]\w*)")
_ATTRIBUTE_STORE = re.compile(r"\.\s*([^\W\d]\w*)\s*(?:=(?!=)|(?:[-+*/%@&|^]|//|\*\*|<<|>>)=)")
_MAGIC = re.compile(r"^[ \t]*[%!].*$", re.MULTILINE)  # IPython's `%timeit ...`, `!pip ...`: not Python
_TOKEN_IDS: dict[str, int] = {}  # token text -> _token_id, kept for the process: a class repeats the same few hundred


class Token(NamedTuple):
    """One normalised token, and where its text is in the cell (character offsets), to mark it on a page."""

    text: str
    start: int
    end: int
    statement: int  # which statement of the cell it is in: k-grams never span two


def bound_names(source: str) -> set[str]:
    """The names a cell binds, renaming any of which leaves the answer as it was; raises SyntaxError (or ValueError,
    RecursionError) for a cell Python cannot compile.

    From the compiler's symbol tables (symtable: 8 times faster than walking an ast): every name assigned, or a
    parameter, in any scope; an imported name only under an alias the cell chose (`as np`; `import torch` binds
    a name the module fixed); and the attributes the cell assigns (`self.hidden = ...`), which are no symbols.
    """
    aliases = set(_ALIAS.findall(source))
    names = set(_ATTRIBUTE_STORE.findall(source))
    tables = [symtable.symtable(source, "<cell>", "exec")]
    while tables:
        table = tables.pop()
        tables.extend(table.get_children())
        for symbol in table.get_symbols():
            if symbol.is_assigned() or symbol.is_parameter() or (symbol.is_imported() and symbol.get_name() in aliases):
                names.add(symbol.get_name())
    return names


def _statements(source: str) -> list[list[tuple[str, str, int, int]]]:
    """The cell's tokens, (kind, text, start, end), cut into statements at a line break outside brackets and at
    `;`, less every statement that is only strings (docstrings, strings used as comments)."""
    statements: list[list[tuple[str, str, int, int]]] = []
    current: list[tuple[str, str, int, int]] = []
    depth = 0
    for match in _TOKEN.finditer(source):
        kind, text = match.lastgroup, match.group()
        if kind == "comment" or kind == "continuation" or (kind == "newline" and depth):
            continue
        if kind == "newline" or text == ";":
            if current and any(t[0] != "string" for t in current):
                statements.append(current)
            current = []
            continue
        if text in _OPENING:
            depth += 1
        elif text in _CLOSING and depth:
            depth -= 1
        current.append((kind, text, match.start(), match.end()))
    if current and any(t[0] != "string" for t in current):
        statements.append(current)
    return statements


def _renamed(source: str) -> set[str] | None:
    """The names to rename: those bound_names finds; None for a cell Python cannot compile."""
    try:
        return bound_names(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):  # ValueError: null bytes; RecursionError: nesting
        return None


def normalised_tokens(source: str) -> list[Token]:
    """The cell as the stream of tokens its fingerprints are taken from (see the module's docstring).

    In a cell Python cannot compile (a half-written answer), every name but a keyword, a builtin or an
    attribute (`np.sum`) is renamed.
    """
    source = _MAGIC.sub(lambda m: " " * len(m.group()), source[:MAX_CHARS])  # same length: offsets stay right
    bound = _renamed(source)
    tokens = []
    for number, statement in enumerate(_statements(source)):
        texts = [t[1] for t in statement] + [""]
        for i, (kind, text, start, end) in enumerate(statement):
            if text in _LAYOUT_PARENTHESES or (text == "," and texts[i + 1] in _COMMA_OPTIONAL_BEFORE):
                continue
            if kind == "string":
                text = STRING
            elif kind == "name" and (text in bound if bound is not None else (
                    text not in _NAMES_KEPT_WITHOUT_A_PARSE and texts[i - 1] != ".")):
                text = VARIABLE
            tokens.append(Token(text, start, end, number))
    return tokens


def _token_id(text: str) -> int:
    """A token's number, the same in every process (crc32, not str's salted hash)."""
    found = _TOKEN_IDS.get(text)
    if found is None:
        found = _TOKEN_IDS[text] = zlib.crc32(text.encode("utf-8", "surrogatepass"))
    return found


def kgrams(tokens: list[Token]) -> list[list[tuple[int, int]]]:
    """Per statement, (position of its first token, hash) of every run of K consecutive tokens within it: a statement
    shorter than K tokens has none."""
    ids = [_token_id(t.text) for t in tokens]
    found, first = [], 0
    for last in range(1, len(tokens) + 1):  # tokens[first:last] is one statement when the next differs or ends
        if last < len(tokens) and tokens[last].statement == tokens[first].statement:
            continue
        if last - first >= K:
            found.append([(i, hash(tuple(ids[i:i + K]))) for i in range(first, last - K + 1)])
        first = last
    return found


def winnow(hashes: list[int]) -> set[int]:
    """The smallest of every WINDOW consecutive hashes (all of them where there are no more than WINDOW)."""
    if len(hashes) <= WINDOW:
        return set(hashes)
    return {min(hashes[i:i + WINDOW]) for i in range(len(hashes) - WINDOW + 1)}


def fingerprints(statements: list[list[tuple[int, int]]]) -> set[int]:
    """A cell's fingerprints, from its kgrams(): each statement winnowed on its own, so that statements moved
    around keep every fingerprint."""
    return set().union(*(winnow([h for _, h in statement]) for statement in statements))
