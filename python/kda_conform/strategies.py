# kda_conform.strategies: hypothesis strategies drawing valid KDA problems, shrinking failures to the smallest.
# SPDX-License-Identifier: MIT
"""Property tests of a kernel with hypothesis (imported only here; pip install hypothesis):

    from hypothesis import given
    from kda_conform.strategies import cases

    @given(cases())
    def test_my_kernel(case):
        problem, inputs = case
        kda_conform.assert_kda(problem, inputs, my_kernel(problem, inputs), cls="fp32")

`descriptions()` draws a `kda gen` description (docs/generator.md): modes (family, gate,
beta, L2 convention, head map, state layout), shapes (H, HV = G H, K, V), lengths, packed
sequences (varlen, empty ones included), an initial state, checkpoints and a seed; `cases()`
makes it with kda_conform.gen.  Every choice shrinks towards the simplest (one sequence of one
token, K = V = 1, the log gate, no L2, no h0), so a failure is reported on the smallest
problem hypothesis finds that still fails, with the description that regenerates it.
"""
from __future__ import annotations

from typing import Any, Dict, Tuple

import numpy as np
from hypothesis import strategies as st

from .native import gen
from .problem import Problem

FAMILIES = ("kda", "gdn", "deltanet", "linear")
GATES = ("log", "softplus", "lower_bound")
BETAS = ("prob", "logit", "logit_neg")
L2S = ("off", "fla", "ggml")


@st.composite
def descriptions(draw: Any, max_tokens: int = 48, max_dim: int = 16, max_heads: int = 2,
                 max_seqs: int = 3) -> str:
    """A valid `kda gen` description; the first value of every choice is its simplest."""
    H = draw(st.integers(1, max_heads))
    G = draw(st.integers(1, 2))
    K = draw(st.integers(1, max_dim))
    V = draw(st.integers(1, max_dim))
    lens = draw(st.lists(st.integers(0, max_tokens), min_size=1, max_size=max_seqs))
    if sum(lens) == 0:
        lens[0] = 1
    words = [f"seed={draw(st.integers(0, 2**31))}", f"H={H}", f"HV={G * H}", f"K={K}",
             f"V={V}", "seqlens=" + ",".join(str(n) for n in lens),
             f"family={draw(st.sampled_from(FAMILIES))}",
             f"gate={draw(st.sampled_from(GATES))}", f"beta={draw(st.sampled_from(BETAS))}",
             f"l2={draw(st.sampled_from(L2S))}",
             f"head_map={draw(st.sampled_from(('div', 'mod')))}",
             f"layout={draw(st.sampled_from(('kv', 'vk')))}",
             f"h0={int(draw(st.booleans()))}"]
    T = sum(lens)
    if draw(st.booleans()):
        ck = draw(st.lists(st.integers(0, T - 1), min_size=1, max_size=3, unique=True))
        words.append("checkpoints=" + ",".join(str(c) for c in sorted(ck)))
    return " ".join(words)


@st.composite
def cases(draw: Any, **kw: Any) -> Tuple[Problem, Dict[str, np.ndarray]]:
    """(problem, inputs) of a drawn description (kda_conform.gen); the description is noted
    (hypothesis prints it with a failure), so `kda gen` remakes the very case."""
    from hypothesis import note
    desc = draw(descriptions(**kw))
    note(f"kda gen {desc!r}")
    return gen(desc)
