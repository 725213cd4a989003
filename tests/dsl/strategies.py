"""Hypothesis strategies for syntax trees of both languages (only trees the parser can produce)."""

from hypothesis import strategies as st

from daic.dsl import ast as A

KEYWORDS = {"True", "False", "import", "let", "scheme", "extends", "as"}
identifiers = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,7}", fullmatch=True).filter(lambda s: s not in KEYWORDS)

numbers = st.one_of(
    st.integers(-(10**6), 10**6).map(lambda v: A.Number(v, str(v))),
    st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False).map(lambda v: A.Number(v, repr(v))),
)
# A `\r` ends a line, as `\n` does, and no escape writes it: no string holds one.
strings = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\r"), max_size=12).map(
    A.String
)
leaves = st.one_of(
    numbers,
    strings,
    st.booleans().map(A.Bool),
    st.lists(identifiers, min_size=1, max_size=3).map(lambda parts: A.Name(tuple(parts))),
)


def _extend(children):
    keywords = st.lists(st.tuples(identifiers, children), max_size=3).map(
        lambda kws: tuple(A.Keyword(k, v) for k, v in kws)
    )
    return st.one_of(
        st.builds(
            A.Call,
            st.lists(identifiers, min_size=1, max_size=2).map(lambda p: A.Name(tuple(p))),
            st.lists(children, max_size=3).map(tuple),
            keywords,
        ),
        st.lists(children, max_size=4).map(lambda items: A.ListExpr(tuple(items))),
        st.builds(A.BinOp, st.sampled_from("+-*/"), children, children),
        # The parser folds a minus sign into a number literal, so Neg wraps only non-numbers.
        children.filter(lambda e: not isinstance(e, A.Number)).map(A.Neg),
    )


expressions = st.recursive(leaves, _extend, max_leaves=12)

params = st.builds(A.Param, identifiers, expressions)


def _layers(depth: int):
    body = st.just(()) if depth == 0 else st.lists(_layers(depth - 1), max_size=3).map(tuple)
    return st.builds(A.Layer, identifiers, st.lists(params, max_size=3).map(tuple), body)


nets = st.lists(_layers(2), max_size=6).map(lambda layers: A.NetFile(tuple(layers)))

statements = st.one_of(
    st.builds(
        A.Import,
        st.one_of(st.lists(identifiers, min_size=1, max_size=3).map(lambda p: A.Name(tuple(p))), strings),
        st.one_of(st.none(), identifiers),
    ),
    st.builds(A.Let, identifiers, expressions),
    st.builds(
        A.Scheme,
        identifiers,
        st.lists(st.builds(A.Field, identifiers, expressions), max_size=4).map(tuple),
        st.one_of(st.none(), st.lists(identifiers, min_size=1, max_size=2).map(lambda p: A.Name(tuple(p)))),
    ),
)
dai_files = st.lists(statements, max_size=5).map(lambda s: A.DaiFile(tuple(s)))
