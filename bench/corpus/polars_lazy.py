# SPDX-License-Identifier: MIT
# /// script
# requires-python = ">=3.11"
# dependencies = [
#     "polars",
# ]
# ///
"""Web server log analysis with a polars lazy query: slowest endpoints, error rates, traffic per hour."""
import random
from datetime import datetime, timedelta

import polars as pl

random.seed(11)
start = datetime(2024, 3, 1)
endpoints = ["/", "/login", "/api/items", "/api/items/{id}", "/api/search", "/static/app.js", "/health"]
rows = 50_000
logs = pl.DataFrame({
    "ts": [start + timedelta(seconds=random.randint(0, 86_399)) for _ in range(rows)],
    "endpoint": [random.choice(endpoints) for _ in range(rows)],
    "status": [random.choices([200, 201, 304, 404, 500], weights=[80, 5, 8, 5, 2])[0] for _ in range(rows)],
    "ms": [round(random.lognormvariate(3, 0.8), 1) for _ in range(rows)],
})

summary = (
    logs.lazy()
    .with_columns((pl.col("status") >= 500).alias("error"), pl.col("ts").dt.hour().alias("hour"))
    .group_by("endpoint")
    .agg(pl.len().alias("requests"),
         pl.col("ms").median().alias("p50_ms"),
         pl.col("ms").quantile(0.99).alias("p99_ms"),
         (pl.col("error").mean() * 100).round(2).alias("error_pct"))
    .sort("p99_ms", descending=True)
    .collect()
)
per_hour = logs.lazy().group_by(pl.col("ts").dt.hour().alias("hour")).agg(pl.len()).sort("len").collect()

print(summary)
print(f"busiest hour: {per_hour['hour'][-1]}:00 with {per_hour['len'][-1]} requests")
print(f"log summary: {summary.height} endpoints, {logs.height} requests")
