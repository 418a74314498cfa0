# SPDX-License-Identifier: MIT
# /// script
# requires-python = ">=3.11"
# dependencies = [
#     "rich",
# ]
# ///
"""A disk-usage style report of a generated project tree, printed with rich: a tree and a table."""
import random

from rich.console import Console
from rich.table import Table
from rich.tree import Tree

random.seed(4)
console = Console(width=100, color_system=None, force_terminal=False)
layout = {
    "src": ["core", "api", "cli", "util"],
    "tests": ["unit", "integration"],
    "docs": ["guide", "reference"],
    "assets": ["img", "fonts"],
}
sizes = {}
tree = Tree("project/")
for top, subs in layout.items():
    branch = tree.add(f"{top}/")
    for sub in subs:
        files = {f"{sub}_{i}.{random.choice(['py', 'md', 'png', 'json'])}": random.randint(200, 90_000)
                 for i in range(random.randint(2, 6))}
        sizes[f"{top}/{sub}"] = files
        leaf = branch.add(f"{sub}/ ({len(files)} files)")
        for name, size in sorted(files.items(), key=lambda kv: -kv[1])[:2]:
            leaf.add(f"{name} [{size / 1024:.1f} KiB]")
console.print(tree)

table = Table(title="largest directories")
table.add_column("directory")
table.add_column("files", justify="right")
table.add_column("KiB", justify="right")
for d, files in sorted(sizes.items(), key=lambda kv: -sum(kv[1].values()))[:6]:
    table.add_row(d, str(len(files)), f"{sum(files.values()) / 1024:.1f}")
console.print(table)
console.print(f"disk report: {len(sizes)} directories, {sum(len(f) for f in sizes.values())} files")
