"""The path algebra of flow analyses (`wgc.ir.paths`): DNF connectives, contradictions,
implication, conditions, match arms and leaving a `for`."""

from __future__ import annotations

from tests.narrow import present
from wgc.diagnostics.diagnostic import Span
from wgc.ir import flow as F
from wgc.ir.paths import FALSE, TRUE, Algebra

S = Span("x.walk", 1, 1, 1, 2)
ALG = Algebra({"mode": ("a", "b")}, ["flag"], {("placed", "X"): False})


def has(m: str, truth: bool = True):
    return ALG.lit(("has", m), truth)


def test_contradictions_and_known_atoms_drop_terms() -> None:
    assert ALG.and_(has("text"), has("text", False)) == FALSE
    assert ALG.and_(ALG.lit(("eq", "mode", "a")), ALG.lit(("eq", "mode", "b"))) == FALSE
    assert ALG.lit(("eq", "mode", "z")) == FALSE  # not one of its values
    assert ALG.lit(("placed", "X")) == FALSE and ALG.lit(("placed", "X"), False) == TRUE
    none_of = ALG.and_(ALG.lit(("eq", "mode", "a"), False), ALG.lit(("eq", "mode", "b"), False))
    assert none_of == FALSE  # every listed value excluded


def test_or_resolves_and_absorbs() -> None:
    assert ALG.or_(has("text"), has("text", False)) == TRUE
    both = ALG.and_(has("text"), has("audio"))
    assert ALG.or_(has("text"), present(both)) == has("text")


def test_implication_uses_what_literals_entail() -> None:
    a = ALG.lit(("eq", "mode", "a"))
    assert ALG.implies(a, ALG.lit(("eq", "mode", "b"), False))
    seg = ALG.and_(ALG.lit(("mod", "seg", "text")), TRUE)
    assert ALG.implies(present(seg), has("text"))
    assert not ALG.implies(TRUE, has("text"))
    assert ALG.implies(FALSE, has("text"))  # no path: nothing to prove


def test_conditions_comparisons_and_counts() -> None:
    cond = F.Not(F.RequestPred("has", "audio", S), S)
    assert ALG.cond(cond) == has("audio", False)
    assert ALG.cond(F.CountCmp("audio", ">=", 1, S)) == has("audio")
    assert ALG.cond(F.CountCmp("audio", "==", 0, S)) == has("audio", False)
    one = ALG.cond(F.CountCmp("audio", "==", 1, S))
    assert one is not None and ALG.implies(one, has("audio"))
    assert ALG.cond(F.OptionCmp("flag", "==", False, S)) == ALG.lit(("opt", "flag"), False)
    assert ALG.cond(F.OptionCmp("mode", "!=", "a", S)) == ALG.lit(("eq", "mode", "a"), False)


def test_match_arms_take_what_earlier_arms_left() -> None:
    arms, none = ALG.modality_arms("seg", [("text",), ("text", "image"), ("_",)])
    assert ALG.implies(arms[1], ALG.lit(("mod", "seg", "image")))
    assert not ALG.implies(arms[1], ALG.lit(("mod", "seg", "text")))
    assert none == FALSE
    option_arms, rest = ALG.option_arms("mode", [(("a",), False), (("b",), False)])
    assert option_arms == [ALG.lit(("eq", "mode", "a")), ALG.lit(("eq", "mode", "b"))]
    assert rest == FALSE  # every value of `mode` has an arm


def test_leaving_a_for_keeps_what_every_iteration_shares() -> None:
    text_arm = ALG.and_(ALG.lit(("mod", "seg", "text")), has("text"))
    assert text_arm is not None
    after = ALG.for_exit(TRUE, text_arm, "seg")  # only text segments get through the body
    assert ALG.implies(after, has("audio", False)) and ALG.implies(after, has("text"))
    guard = ALG.for_guard(text_arm, "seg")
    assert guard == has("text")
