# SPDX-License-Identifier: MIT
# /// script
# requires-python = ">=3.11"
# dependencies = [
#     "tabulate",
#     "humanize",
#     "python-dateutil",
# ]
# ///
"""Summarize a release history: parse dates, relative ages, sizes, a plain-text table."""
from datetime import datetime, timedelta

import humanize
from dateutil import parser, rrule
from dateutil.relativedelta import relativedelta
from tabulate import tabulate

now = datetime(2024, 11, 1, 12, 0)
releases = [
    ("1.0.0", "2022-01-15T10:00:00", 1_830_000),
    ("1.1.0", "March 3 2022 4pm", 1_910_500),
    ("1.2.0", "2022-09-30", 2_405_000),
    ("2.0.0", "Tue, 14 Feb 2023 09:30:00", 5_120_000),
    ("2.1.0", "2023/08/21 18:45", 5_300_100),
    ("2.2.0", "2024-06-02 08:00", 6_001_234),
]
rows = []
prev = None
for version, when, size in releases:
    d = parser.parse(when)
    gap = relativedelta(d, prev) if prev else None
    rows.append([version, d.strftime("%Y-%m-%d"), humanize.naturaltime(now - d, when=now),
                 humanize.naturalsize(size), f"{gap.years}y {gap.months}m" if gap else "-"])
    prev = d
print(tabulate(rows, headers=["version", "date", "age", "size", "since previous"], tablefmt="github"))
next_ones = list(rrule.rrule(rrule.MONTHLY, interval=4, count=3, dtstart=now + timedelta(days=30)))
print("planned:", ", ".join(d.strftime("%b %Y") for d in next_ones))
print(f"release notes: {len(rows)} releases, {humanize.intcomma(sum(r[2] for r in releases))} bytes shipped")
