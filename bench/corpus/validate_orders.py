# SPDX-License-Identifier: MIT
# /// script
# requires-python = ">=3.11"
# dependencies = [
#     "pydantic>=2",
# ]
# ///
"""Validate a batch of incoming order records with pydantic models; report what is wrong with the rejects."""
import json
import random
from datetime import date
from enum import Enum

from pydantic import BaseModel, Field, ValidationError, field_validator


class Status(str, Enum):
    new = "new"
    paid = "paid"
    shipped = "shipped"


class Line(BaseModel):
    sku: str = Field(pattern=r"^[A-Z]{3}-\d{4}$")
    quantity: int = Field(gt=0, le=100)
    price: float = Field(ge=0)


class Order(BaseModel):
    id: int
    customer: str = Field(min_length=2)
    placed: date
    status: Status
    lines: list[Line] = Field(min_length=1)

    @field_validator("placed")
    @classmethod
    def not_in_future(cls, v: date) -> date:
        if v > date(2024, 12, 31):
            raise ValueError("order date in the future")
        return v

    @property
    def total(self) -> float:
        return sum(line.quantity * line.price for line in self.lines)


random.seed(9)
raw = []
for i in range(400):
    rec = {"id": i, "customer": random.choice(["Ada", "Grace", "Linus", "X", "Barbara"]),
           "placed": f"2024-{random.randint(1, 12):02d}-{random.randint(1, 28):02d}",
           "status": random.choice(["new", "paid", "shipped", "lost"]),
           "lines": [{"sku": random.choice(["ABC-1234", "XYZ-0042", "bad-sku"]), "quantity": random.randint(0, 5),
                      "price": round(random.uniform(1, 50), 2)} for _ in range(random.randint(0, 3))]}
    raw.append(json.dumps(rec))

good, errors = [], {}
for text in raw:
    try:
        good.append(Order.model_validate_json(text))
    except ValidationError as e:
        for err in e.errors():
            where = ".".join(str(x) for x in err["loc"] if not isinstance(x, int))
            errors[where] = errors.get(where, 0) + 1
print("rejected fields:", dict(sorted(errors.items(), key=lambda kv: -kv[1])))
print(f"revenue of valid orders: {sum(o.total for o in good):,.2f}")
print(f"orders checked: {len(good)} valid, {len(raw) - len(good)} rejected")
