#!/usr/bin/env python3
"""kcm_gen.py: the tables and polynomial coefficients of kda_cuda_math.h's table-driven e^z and
log1p (the kernels' functions), printed as C.  Needs mpmath (pip install mpmath).  SPDX-License-Identifier: MIT

e^z: 2^(j/32) for j < 32, rounded to double and scaled by 2^64 (see kcm_exp_neg1); e^r on
|r| <= ln2/64 as 1 + r h(r), h of degree 4 fitted by least squares at Chebyshev nodes (within a
small factor of minimax).  log1p: for x_j = 1 + j/31, c_j = RN(1 / x_j) and L_j = RN(-log c_j)
(of that double); log1p(r) on r in [-1/(62 x_1), 1/62] (widened 1 %) as r + r^2 h(r), h of
degree 6.  Each fit's worst relative error over the interval (the coefficients as rounded to
double, in exact arithmetic) is printed as a comment: the rounding errors of the evaluation come
on top (conformance/tests/check_cuda.c measures the whole against MPFR).
"""
from mpmath import mp, mpf, exp, log, log1p, cos, pi, matrix, lu_solve

mp.prec = 200


def fit(g, a, b, deg, n=120):
    """sum c_k r^k ~ g(r) on [a, b]: least squares at n Chebyshev nodes, rounded to double."""
    nodes = [(a + b) / 2 + (b - a) / 2 * cos(pi * (2 * i + 1) / (2 * n)) for i in range(n)]
    A, y = matrix(n, deg + 1), matrix(n, 1)
    for i, r in enumerate(nodes):
        for k in range(deg + 1):
            A[i, k] = r**k
        y[i] = g(r)
    c = lu_solve(A.T * A, A.T * y)
    return [float(c[k]) for k in range(deg + 1)]


def horner(c, r):
    q = mpf(c[-1])
    for k in range(len(c) - 2, -1, -1):
        q = q * r + c[k]
    return q


def worst(f, approx, lo, hi, n=4000):
    pts = [lo + (hi - lo) * i / n for i in range(n + 1)]
    return max(abs(approx(r) - f(r)) / abs(f(r)) for r in pts if r != 0)


def main():
    A = log(2) / 64 * mpf("1.01")
    ce = fit(lambda r: (exp(r) - 1) / r if r else mpf(1), -A, A, 4)
    ce[0] = 1.0
    we = worst(exp, lambda r: 1 + r * horner(ce, r), -A, A)
    print("/* e^r = 1 + r (1 + r (a2 + r (a3 + r (a4 + r a5)))): worst 2^%.1f */" % float(log(we, 2)))
    print("#define KCM_EXP_POLY " + ", ".join(x.hex() for x in ce[:0:-1]))
    print("#define KCM_EXP_TAB \\")
    print(",\\\n".join("  " + float(mpf(2) ** (mpf(j) / 32)).hex()[:-3] + "p+64" for j in range(32)))
    hi = mpf(1) / 62 * mpf("1.01")
    lo = -hi / (1 + mpf(1) / 31)
    cl = fit(lambda r: (log1p(r) - r) / r**2 if r else mpf(-0.5), lo, hi, 6)
    wl = worst(log1p, lambda r: r + r * r * horner(cl, r), lo, hi)
    print("/* log1p(r) = r + r^2 (b0 + r (b1 + ... + r b6)): worst 2^%.1f */" % float(log(wl, 2)))
    print("#define KCM_LOG_POLY " + ", ".join(x.hex() for x in cl[::-1]))
    print("#define KCM_LOG_TAB \\")
    rows = []
    for j in range(32):
        c = float(1 / (1 + mpf(j) / 31))
        rows.append("  {%s, %s}" % (c.hex(), float(-log(mpf(c))).hex()))
    print(",\\\n".join(rows))


if __name__ == "__main__":
    main()
