# SPDX-License-Identifier: MIT
# /// script
# requires-python = ">=3.11"
# dependencies = [
#     "optuna",
# ]
# ///
"""Hyperparameter search with optuna on a noisy test function (Rosenbrock plus a categorical choice)."""
import math

import optuna

optuna.logging.set_verbosity(optuna.logging.WARNING)


def objective(trial: optuna.Trial) -> float:
    x = trial.suggest_float("x", -2.0, 2.0)
    y = trial.suggest_float("y", -1.0, 3.0)
    scale = trial.suggest_float("scale", 1e-3, 1.0, log=True)
    kind = trial.suggest_categorical("penalty", ["none", "l1", "l2"])
    value = (1 - x) ** 2 + 100 * (y - x * x) ** 2
    if kind == "l1":
        value += scale * (abs(x) + abs(y))
    elif kind == "l2":
        value += scale * math.hypot(x, y)
    return value


study = optuna.create_study(direction="minimize", sampler=optuna.samplers.TPESampler(seed=5))
study.optimize(objective, n_trials=40)

best = study.best_trial
print(f"best value {best.value:.4f} at trial {best.number}")
for k, v in best.params.items():
    print(f"  {k} = {v:.4f}" if isinstance(v, float) else f"  {k} = {v}")
pruned = [t for t in study.trials if t.state == optuna.trial.TrialState.PRUNED]
print(f"study finished: {len(study.trials)} trials, {len(pruned)} pruned")
