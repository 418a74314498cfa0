# SPDX-License-Identifier: MIT
# /// script
# requires-python = ">=3.11"
# dependencies = [
#     "numpy",
#     "scipy",
# ]
# ///
"""Fit a damped oscillation to noisy measurements, then integrate the fitted model and find its first root."""
import numpy as np
from scipy import integrate, optimize


def model(t, amplitude, decay, omega, phase):
    return amplitude * np.exp(-decay * t) * np.cos(omega * t + phase)


rng = np.random.default_rng(7)
t = np.linspace(0, 10, 400)
truth = (2.5, 0.35, 3.1, 0.4)
y = model(t, *truth) + rng.normal(0, 0.05, t.size)

params, cov = optimize.curve_fit(model, t, y, p0=(2, 0.5, 3, 0))
errors = np.sqrt(np.diag(cov))
for name, value, err, want in zip(("amplitude", "decay", "omega", "phase"), params, errors, truth):
    print(f"{name:>9} = {value:.4f} ± {err:.4f} (true {want})")

area, _ = integrate.quad(lambda x: model(x, *params) ** 2, 0, 10)
root = optimize.brentq(lambda x: model(x, *params), 0.01, 0.6)
res = optimize.minimize(lambda p: np.sum((model(t, *p) - y) ** 2), x0=(1, 1, 2.9, 0), method="Nelder-Mead",
                        options={"maxiter": 4000, "xatol": 1e-8, "fatol": 1e-10})
print(f"energy over [0, 10]: {area:.4f}; first zero at t = {root:.4f}")
print(f"Nelder-Mead agrees with curve_fit: {np.allclose(res.x, params, atol=1e-2)}")
print("fit converged:", bool(np.all(np.abs(params - truth) < 5 * errors + 1e-3)))
