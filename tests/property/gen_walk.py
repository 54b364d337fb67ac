"""Random `.walk` programs for property tests (hypothesis strategies).

* `walk_programs()`: syntactically valid programs that use every construct of the grammar
  (params, types, options with values and per-mode defaults, nodes with every engine and
  `reads`, streams with options, walks with calls, `par`, loops, `yield`, `emit`, `persist`,
  flows with `for`/`match` (on modalities and options)/`if` (comparisons, counts)/`repeat`/
  `fail`, `request.first`, every trigger, subflows), laid out at random: whitespace (spaces,
  tabs, newlines, blank lines) between any two tokens, comments at line ends and on their own
  lines, in any position. The programs need not make sense (names are drawn from small pools),
  only parse.
* `mutated_programs()`: such programs with random edits (tokens deleted, duplicated or swapped,
  random characters inserted), for robustness tests that only ask that nothing crashes.

Programs are built as token lists, because the language ignores whitespace between tokens: the
layout is chosen per gap afterwards, and a comment is just a gap that ends a line.
"""

from __future__ import annotations

import re

from hypothesis import strategies as st

NAMES = ("a", "b", "x", "tok", "img", "h", "llm", "enc", "s1", "ch", "q_")
NODES = ("A", "B", "LLM", "Enc")
DTYPES = ("f32", "bf16", "i64", "u8", "bool")
MODALITIES = ("text", "image", "audio", "video", "action", "tensor")
COMMENT_CHARS = st.text(
    alphabet=st.sampled_from(list("abc xyz{}()#\"'=->.,:;!é")), min_size=0, max_size=12
)

_LITERALS = ('"a"', '"b c"', "0", "4", "true", "false")  # option values in patterns
names = st.sampled_from(NAMES)
nodes = st.sampled_from(NODES)
Tokens = list[str]
_cmp = st.sampled_from(["==", "!=", "<", "<=", ">", ">="])


# ------------------------------------------------------------------ expressions and types
def _exprs(max_leaves: int = 4) -> st.SearchStrategy[Tokens]:
    leaf = st.one_of(
        st.integers(0, 999).map(lambda n: [str(n)]),
        st.sampled_from(["1.5", "2.", "1e3", "0.25"]).map(lambda f: [f]),
        names.map(lambda n: [n]),
        names.map(lambda n: ["option", ".", n]),
    )

    def extend(inner):
        return st.one_of(
            st.tuples(inner, st.sampled_from("+-*/"), inner).map(lambda t: [*t[0], t[1], *t[2]]),
            inner.map(lambda e: ["-", *e]),
            inner.map(lambda e: ["(", *e, ")"]),
        )

    return st.recursive(leaf, extend, max_leaves=max_leaves)


def _strings() -> st.SearchStrategy[Tokens]:
    # units, so every generated token is a valid STRING: plain characters and escapes
    unit = st.sampled_from(["a", "b", " ", ":", ".", "ç", "\t", '\\"', "\\\\", "\\n", "\\q"])
    return st.lists(unit, max_size=6).map(lambda us: ['"' + "".join(us) + '"'])


def _values() -> st.SearchStrategy[Tokens]:
    return st.one_of(_exprs(), _strings(), st.sampled_from([["true"], ["false"]]))


@st.composite
def _type_expr(draw) -> Tokens:
    if draw(st.booleans()):
        return [draw(st.sampled_from(("Tok", "Img", "Chunk")))]
    dims = draw(st.lists(st.one_of(_exprs(2), st.just(["?"])), max_size=3))
    out = [draw(st.sampled_from(DTYPES)), "["]
    for i, d in enumerate(dims):
        out += ([","] if i else []) + d
    return [*out, "]"]


def _concat(parts: list[Tokens]) -> Tokens:
    return [tok for part in parts for tok in part]


def _comma_list(items: list[Tokens]) -> Tokens:
    out: Tokens = []
    for i, it in enumerate(items):
        out += ([","] if i else []) + it
    return out


# ------------------------------------------------------------------ declarations
@st.composite
def _node(draw) -> Tokens:
    engine = draw(
        st.one_of(
            st.just(["stateless"]),
            st.just(["kv_cache"]),
            st.lists(
                st.tuples(names, st.lists(names, max_size=2)).map(
                    lambda t: [t[0], "=", "[", *_comma_list([[n] for n in t[1]]), "]"]
                ),
                min_size=1,
                max_size=2,
            ).map(lambda args: ["kv_cache", "(", *_comma_list(args), ")"]),
            nodes.map(lambda n: ["like", n]),
        )
    )
    items = draw(
        st.lists(
            st.one_of(
                _strings().map(lambda s: ["impl", *s]),
                st.tuples(st.sampled_from(["in", "out"]), names, _type_expr()).map(
                    lambda t: [t[0], t[1], ":", *t[2]]
                ),
                names.map(lambda n: ["label", n]),
                st.tuples(names, _values()).map(lambda t: ["config", t[0], "=", *t[1]]),
                st.lists(names, min_size=1, max_size=2).map(
                    lambda ns: ["reads", *_comma_list([["option", ".", n] for n in ns])]
                ),
            ),
            max_size=4,
        )
    )
    return ["node", draw(nodes), ":", *engine, "{", *_concat(items), "}"]


@st.composite
def _stream(draw) -> Tokens:
    out = ["stream", draw(names), ":", draw(nodes), ".", draw(names), "->"]
    out += [draw(nodes), ".", draw(names)]
    for _ in range(draw(st.integers(0, 3))):
        kind = draw(st.sampled_from(["chunk", "final", "after_done"]))
        if kind == "chunk":
            args = draw(
                st.lists(
                    st.tuples(st.one_of(st.none(), names), _exprs(2)).map(
                        lambda t: ([t[0], "="] if t[0] else []) + t[1]
                    ),
                    max_size=2,
                )
            )
            out += ["chunk", draw(names), "(", *_comma_list(args), ")"]
        else:
            out += [kind, draw(names)]
    return out


def _binding() -> st.SearchStrategy[Tokens]:
    return st.tuples(names, st.one_of(st.none(), names)).map(
        lambda t: [t[0]] + (["=", t[1]] if t[1] else [])
    )


@st.composite
def _call(draw) -> Tokens:
    out = [draw(nodes), "(", *_comma_list(draw(st.lists(_binding(), max_size=3))), ")"]
    outs = draw(st.lists(_binding(), max_size=2))
    return out + (["->", *_comma_list(outs)] if outs else [])


def _stmts(depth: int) -> st.SearchStrategy[Tokens]:
    simple = st.one_of(
        _call(),
        st.tuples(names, st.sampled_from(MODALITIES)).map(lambda t: ["emit", t[0], "as", t[1]]),
        st.lists(names, min_size=1, max_size=3).map(
            lambda ns: ["persist", *_comma_list([[n] for n in ns])]
        ),
    )
    if depth <= 0:
        return simple
    return st.one_of(simple, simple, _par(depth - 1), _loop(depth - 1))


def _block(depth: int, max_size: int = 3) -> st.SearchStrategy[Tokens]:
    return st.lists(_stmts(depth), max_size=max_size).map(lambda ss: ["{", *_concat(ss), "}"])


@st.composite
def _par(draw, depth: int) -> Tokens:
    branches = draw(st.lists(st.one_of(_stmts(depth), _block(depth)), max_size=3))
    return ["par", "{", *_concat(branches), "}"]


@st.composite
def _loop(draw, depth: int) -> Tokens:
    out = ["loop", draw(names), "max", *draw(_exprs(2))]
    for _ in range(draw(st.integers(0, 3))):
        mod = draw(st.sampled_from(["until", "eager", "nospeculate"]))
        out += ["until", draw(names)] if mod == "until" else [mod]
    out += draw(_block(depth))
    for _ in range(draw(st.integers(0, 2))):
        ys = draw(st.lists(names, min_size=1, max_size=2))
        out += ["yield", draw(st.sampled_from(["last", "all"])), *_comma_list([[n] for n in ys])]
    return out


@st.composite
def _walk(draw) -> Tokens:
    params = draw(
        st.lists(
            st.tuples(names, st.booleans(), st.one_of(st.none(), _type_expr())).map(
                lambda t: [t[0]] + (["?"] if t[1] else []) + ([":", *t[2]] if t[2] else [])
            ),
            max_size=3,
        )
    )
    return ["walk", draw(names), "(", *_comma_list(params), ")", *draw(_block(2, 4))]


# ------------------------------------------------------------------ flows
def _conds() -> st.SearchStrategy[Tokens]:
    leaf = st.one_of(
        st.tuples(st.sampled_from(["wants", "has"]), st.sampled_from(MODALITIES)).map(
            lambda t: ["request", ".", t[0], "(", t[1], ")"]
        ),
        names.map(lambda n: ["option", ".", n]),
        st.tuples(names, _cmp, _values()).map(lambda t: ["option", ".", t[0], t[1], *t[2]]),
        st.tuples(st.sampled_from(MODALITIES), _cmp, st.integers(0, 3)).map(
            lambda t: ["request", ".", "count", "(", t[0], ")", t[1], str(t[2])]
        ),
        nodes.map(lambda n: ["placed", "(", n, ")"]),
        st.sampled_from([["true"], ["false"]]),
    )

    def extend(inner):
        return st.one_of(
            st.tuples(inner, st.sampled_from(["and", "or"]), inner).map(
                lambda t: [*t[0], t[1], *t[2]]
            ),
            inner.map(lambda c: ["not", *c]),
            inner.map(lambda c: ["(", *c, ")"]),
        )

    return st.recursive(leaf, extend, max_leaves=4)


@st.composite
def _walk_call(draw) -> Tokens:
    arg = st.tuples(
        names,
        st.one_of(
            st.none(),
            names.map(lambda n: [n]),
            st.tuples(names, names).map(lambda t: [t[0], ".", t[1]]),
            names.map(lambda n: ["option", ".", n]),
            st.sampled_from(MODALITIES).map(lambda m: ["request", ".", "first", "(", m, ")"]),
        ),
    ).map(lambda t: [t[0]] + (["=", *t[1]] if t[1] else []))
    return [draw(names), "(", *_comma_list(draw(st.lists(arg, max_size=3))), ")"]


def _fstmts(depth: int) -> st.SearchStrategy[Tokens]:
    simple = st.one_of(_walk_call(), _strings().map(lambda s: ["fail", *s]))
    if depth <= 0:
        return simple
    return st.one_of(
        simple, simple, _for(depth - 1), _match(depth - 1), _if(depth - 1), _repeat(depth - 1)
    )


def _fblock(depth: int) -> st.SearchStrategy[Tokens]:
    return st.lists(_fstmts(depth), max_size=3).map(lambda ss: ["{", *_concat(ss), "}"])


@st.composite
def _for(draw, depth: int) -> Tokens:
    return ["for", draw(names), "in", "request", ".", "inputs", *draw(_fblock(depth))]


@st.composite
def _match(draw, depth: int) -> Tokens:
    on_option = draw(st.booleans())
    out = [
        "match",
        *(["option", ".", draw(names)] if on_option else [draw(names), ".", "modality"]),
    ]
    out.append("{")
    for _ in range(draw(st.integers(0, 3))):
        choices = [*_LITERALS, "_"] if on_option else [*MODALITIES, "_"]
        pats = draw(st.lists(st.sampled_from(choices), min_size=1, max_size=2))
        # an arm's body is a walk call, `fail`, `if`, `repeat` or a block (not `for`/`match`)
        simple = st.one_of(_walk_call(), _strings().map(lambda s: ["fail", *s]))
        body = draw(st.one_of(simple, _if(depth), _repeat(depth), _fblock(depth)))
        out += [*_pattern(pats), "=>", *body]
    return [*out, "}"]


def _pattern(pats: list[str]) -> Tokens:
    out: Tokens = []
    for i, p in enumerate(pats):
        out += (["|"] if i else []) + [p]
    return out


@st.composite
def _if(draw, depth: int) -> Tokens:
    out = ["if", *draw(_conds()), *draw(_fblock(depth))]
    kind = draw(st.sampled_from(["none", "else", "elif"]))
    if kind == "else":
        out += ["else", *draw(_fblock(depth))]
    elif kind == "elif" and depth > 0:
        out += ["else", *draw(_if(depth - 1))]
    return out


@st.composite
def _repeat(draw, depth: int) -> Tokens:
    return ["repeat", *draw(_exprs(2)), *draw(_fblock(depth))]


@st.composite
def _flow(draw) -> Tokens:
    out = ["flow", draw(names)]
    trig = draw(st.sampled_from(["none", "when", "on"]))
    if trig == "when":
        out += ["when", *draw(_conds())]
    elif trig == "on":
        out += ["on", draw(names)]
    if draw(st.integers(0, 5)) == 0:
        return [*out, "=", '"mod.flows:main"']
    return out + draw(_fblock(2))


@st.composite
def _subflow(draw) -> Tokens:
    params = _comma_list([[n] for n in draw(st.lists(names, max_size=2))])
    return ["subflow", draw(names), "(", *params, ")", *draw(_fblock(1))]


@st.composite
def _option(draw) -> Tokens:
    out = ["option", draw(names), ":", draw(st.sampled_from(["bool", "int", "float", "str"]))]
    if draw(st.booleans()):
        out += ["in", "[", *_comma_list(draw(st.lists(_values(), min_size=1, max_size=3))), "]"]
    if not draw(st.integers(0, 3)):
        arms = [
            [
                *_pattern(
                    draw(st.lists(st.sampled_from([*_LITERALS, "_"]), min_size=1, max_size=2))
                ),
                "=>",
                *draw(_values()),
            ]
            for _ in range(draw(st.integers(0, 2)))
        ]
        return [*out, "=", "match", "option", ".", draw(names), "{", *_comma_list(arms), "}"]
    return [*out, "=", *draw(_values())]


# ------------------------------------------------------------------ whole programs
def _decls() -> st.SearchStrategy[Tokens]:
    return st.one_of(
        names.map(lambda n: ["model", n]),
        st.tuples(names, _values()).map(lambda t: ["param", t[0], "=", *t[1]]),
        st.tuples(names, _type_expr()).map(lambda t: ["type", t[0], "=", *t[1]]),
        _option(),
        _node(),
        _stream(),
        _walk(),
        _flow(),
        _subflow(),
    )


@st.composite
def _comment(draw) -> str:
    return "#" + draw(COMMENT_CHARS).rstrip()


@st.composite
def _gap(draw, decl_boundary: bool) -> str:
    """Whitespace (maybe with comments) between two tokens."""
    kind = draw(st.integers(0, 19))
    if kind < (6 if decl_boundary else 14):
        return draw(st.sampled_from([" ", " ", " ", "  ", "\t"]))
    if kind < 17:
        return draw(st.sampled_from(["\n", "\n\n", "\n   ", "\n\n\n  ", " \n\t"]))
    if kind == 17:  # a trailing comment
        return draw(st.sampled_from([" ", "   "])) + draw(_comment()) + "\n"
    lines = draw(st.lists(_comment(), min_size=1, max_size=3))
    indent = draw(st.sampled_from(["", "  ", "    "]))
    blank = draw(st.sampled_from(["", "\n"]))
    return "\n" + blank + "".join(indent + c + "\n" + blank for c in lines) + indent


@st.composite
def walk_programs(draw) -> str:
    """A syntactically valid `.walk` program with random layout and comments."""
    decls = draw(st.lists(_decls(), max_size=6))
    parts: list[str] = []
    if draw(st.booleans()):
        parts.append(draw(_gap(True)).lstrip(" \t"))
    for decl in decls:
        for i, tok in enumerate(decl):
            if parts and (i or parts[-1].strip()):
                parts.append(draw(_gap(i == 0)))
            parts.append(tok)
    if draw(st.booleans()):
        parts.append(draw(_gap(True)))
    text = "".join(parts)
    return text + "\n" if draw(st.booleans()) else text


# ------------------------------------------------------------------ mutations
_TOKEN = re.compile(r'\s+|#[^\n]*|"(?:[^"\\\n]|\\.)*"|[A-Za-z_]\w*|\d+(?:\.\d*)?|->|=>|.', re.S)


def edit_tokens(draw, toks: list[str], most: int, junk: st.SearchStrategy[str]) -> str:
    """``toks`` joined after 1 to ``most`` random edits: delete, duplicate or swap a token, or
    insert one drawn from ``junk``."""
    for _ in range(draw(st.integers(1, most))):
        edit = draw(st.sampled_from(["delete", "duplicate", "swap", "insert"]))
        i = draw(st.integers(0, max(len(toks) - 1, 0)))
        if edit == "insert" or not toks:
            toks.insert(i, draw(junk))
        elif edit == "delete":
            del toks[i]
        elif edit == "duplicate":
            toks.insert(i, toks[i])
        else:
            j = draw(st.integers(0, len(toks) - 1))
            toks[i], toks[j] = toks[j], toks[i]
    return "".join(toks)


_JUNK = st.text(
    alphabet=st.sampled_from(list("{}()[]=,.:;?|#\"'\\-> \nx1é")), min_size=1, max_size=3
)


@st.composite
def mutated_programs(draw) -> str:
    """A program from `walk_programs()` with 1-4 random edits: likely, but not surely, invalid."""
    return edit_tokens(draw, _TOKEN.findall(draw(walk_programs())), 4, _JUNK)


# ------------------------------------------------------------------ token soup
KEYWORDS = (
    "model", "param", "type", "option", "node", "stateless", "kv_cache", "like", "impl", "in",
    "out", "label", "config", "stream", "chunk", "final", "after_done", "walk", "par", "loop",
    "max", "until", "eager", "nospeculate", "yield", "last", "all", "emit", "as", "persist",
    "flow", "when", "on", "for", "match", "if", "else", "repeat", "fail", "request", "placed",
    "and", "or", "not", "true", "false", "modality", "inputs", "wants", "has",
)  # fmt: skip
PUNCTUATION = ("{", "}", "(", ")", "[", "]", "=", ",", ".", ":", "?", "|", "->", "=>", "+", "-",
               "*", "/")  # fmt: skip


def _soup_token() -> st.SearchStrategy[str]:
    return st.one_of(
        st.sampled_from(KEYWORDS),
        st.sampled_from(PUNCTUATION),
        names,
        nodes,
        st.sampled_from(DTYPES + MODALITIES),
        st.integers(0, 10**30).map(str),
        st.sampled_from(["1.5", "2.", "1e3", "1e-9", "0.0", "99999999999999999999.0"]),
        _strings().map(lambda s: s[0]),
    )


# openings of declarations and statements, so the soup often gets past the first few tokens
FRAGMENTS = (
    "model m", "param p =", "type T = f32[", "option o : bool =", "node A : stateless {",
    "node B : kv_cache ( k = [ a ] ) {", "node LLM : like A {", "in x : f32 [ ? , 3 ]",
    "out y : Tok", "config c = 1", "impl \"m:C\"", "stream s : A . x -> B . y",
    "chunk fixed ( n = 4 )", "walk w ( a , b ? : Tok ) {", "A ( x = a ) -> y", "par { {",
    "loop i max 8 until d {", "} yield last h", "emit x as text", "persist h",
    "flow f when request . wants ( text ) {", "flow g on s {", "for x in request . inputs {",
    "match x . modality { text =>", "image | audio => w ( )", "if option . o {", "} else {",
    "repeat 3 {", "fail \"no\"", "}", "} }",
)  # fmt: skip
SEPARATORS = (" ", " ", " ", "\n", "\n  ", "\t", "", "  # c\n", "\n\n")


@st.composite
def token_soup(draw) -> str:
    """Grammar-shaped junk: keywords, punctuation, names and literals in random order, mixed
    with openings of valid declarations and statements (so the parser gets past the first token
    and the IR builder sees half-formed declarations), separated by random whitespace and
    comments. Cheap to draw: one choice per token, so the robustness tests can run many."""
    pieces = draw(
        st.lists(
            st.tuples(
                st.one_of(_soup_token(), _soup_token(), st.sampled_from(FRAGMENTS)),
                st.sampled_from(SEPARATORS),
            ),
            max_size=40,
        )
    )
    return "".join(tok + sep for tok, sep in pieces)
