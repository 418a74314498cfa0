# SPDX-License-Identifier: MIT
# /// script
# requires-python = ">=3.11"
# dependencies = [
#     "pandas",
# ]
# ///
"""Monthly sales report: revenue by region and product, best sellers, month-over-month growth."""
import numpy as np
import pandas as pd

rng = np.random.default_rng(20240601)
n = 20_000
orders = pd.DataFrame({
    "date": pd.Timestamp("2024-01-01") + pd.to_timedelta(rng.integers(0, 366, n), unit="D"),
    "region": rng.choice(["North", "South", "East", "West"], n, p=[0.3, 0.2, 0.25, 0.25]),
    "product": rng.choice(["widget", "gadget", "gizmo", "doohickey", "sprocket"], n),
    "units": rng.integers(1, 20, n),
    "unit_price": rng.choice([4.99, 9.99, 14.5, 24.0, 99.0], n),
})
orders["revenue"] = orders["units"] * orders["unit_price"]
orders["month"] = orders["date"].dt.to_period("M")

pivot = orders.pivot_table(index="month", columns="region", values="revenue", aggfunc="sum", fill_value=0)
growth = pivot.sum(axis=1).pct_change().dropna()
best = (orders.groupby(["region", "product"])["revenue"].sum()
        .sort_values(ascending=False).groupby(level=0).head(1))

print(pivot.round(0).tail(3).to_string())
print()
print("best seller per region:")
for (region, product), revenue in best.items():
    print(f"  {region:<6} {product:<10} {revenue:>12,.2f}")
print(f"largest monthly growth: {growth.idxmax()} ({growth.max():+.1%})")
print(f"sales report: {len(pivot)} months, {pivot.shape[1]} regions, {len(orders)} orders")
