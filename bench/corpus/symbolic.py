# SPDX-License-Identifier: MIT
# /// script
# requires-python = ">=3.11"
# dependencies = [
#     "sympy",
# ]
# ///
"""Symbolic algebra homework: simplify, factor, solve, differentiate, integrate, and a series expansion."""
import sympy as sp

x, y, n = sp.symbols("x y n")

expr = (x**3 - 3 * x**2 + 3 * x - 1) / (x**2 - 2 * x + 1)
print("simplified:", sp.simplify(expr))
print("factored:", sp.factor(x**4 - 5 * x**2 + 4))
print("trig identity holds:", sp.simplify(sp.sin(x) ** 2 + sp.cos(x) ** 2 - 1) == 0)
print("roots:", sp.solve(sp.Eq(x**2 - 5 * x + 6, 0), x))
system = sp.solve([sp.Eq(2 * x + 3 * y, 12), sp.Eq(x - y, 1)], [x, y])
print("system:", system)
f = sp.exp(-x) * sp.sin(2 * x)
print("derivative:", sp.simplify(sp.diff(f, x)))
print("definite integral:", sp.integrate(f, (x, 0, sp.oo)))
print("series of log(1+x):", sp.series(sp.log(1 + x), x, 0, 6))
print("sum of squares:", sp.factor(sp.summation(n**2, (n, 1, y))))
M = sp.Matrix([[2, 1], [1, 2]])
print("eigenvalues:", M.eigenvals())
print("symbolic checks done")
