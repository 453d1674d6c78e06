"""The handout's LaTeX -> MathML step: signs are marked as signs, so a browser does not space them like a
subtraction (the handout once read "LSE = − ∞")."""

from __future__ import annotations

import pytest

from handout.mathml import formula_to_mathml

pytestmark = pytest.mark.kit
PREFIX, BINARY = '<mo form="prefix">&#x02212;</mo>', "<mo>&#x02212;</mo>"


@pytest.mark.parametrize("latex", [r"-\infty", r"\mathrm{LSE} = -\infty", r"x = (-1, 2)", r"e^{-x}", r"m = {-\infty}"])
def test_a_minus_that_starts_a_group_or_follows_an_operator_is_a_sign(latex):
    mathml = formula_to_mathml(latex, False, "test")
    assert PREFIX in mathml and BINARY not in mathml, mathml


@pytest.mark.parametrize("latex", [r"a - b", r"(a) - b", r"m_i - m", r"s_{ij} - m_i"])
def test_a_minus_between_operands_stays_binary(latex):
    mathml = formula_to_mathml(latex, False, "test")
    assert BINARY in mathml and PREFIX not in mathml, mathml
