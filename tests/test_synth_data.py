"""Seeded records of `ludus synth`'s simulated services (issue 36, in progress)."""

from __future__ import annotations

import random

import pytest

from ludus.envs.synth import EXAMPLES
from ludus.envs.synth.data import DataError, seed_records
from ludus.envs.synth.resources import catalog
from ludus.envs.synth.spec import load_spec
from ludus.envs.synth.store import Store, invalid

SHOP = catalog(load_spec(EXAMPLES / "shop.yaml"))


def test_records_fit_their_schemas_refer_to_each_other_and_keep_keys_unique():
    records = seed_records(SHOP, random.Random(3), per_resource=20)
    for resource in SHOP.resources:
        rows = records[resource.name]
        assert len(rows) == 20 and all(invalid(row, resource.schema) is None for row in rows)
        assert len({row["id"] for row in rows}) == 20
        for key in {"name", "email"} & set(resource.properties):
            assert len({row[key] for row in rows}) == 20  # a task may look a record up by it
    ids = {name: {row["id"] for row in records[name]} for name in ("customers", "products")}
    assert all(o["customer_id"] in ids["customers"] and o["product_id"] in ids["products"] for o in records["orders"])
    people = records["customers"]
    assert all(p["email"].startswith(p["name"].split()[0].lower() + ".") for p in people)  # one person per record
    assert seed_records(SHOP, random.Random(3), per_resource=20) == records  # seeded
    Store(SHOP, records)  # the service takes them


def test_a_resource_whose_records_cannot_fit_is_reported_not_filled():
    spec = {
        "openapi": "3.1.0",
        "info": {"title": "T", "version": "1"},
        "paths": {
            "/codes": {
                "get": {
                    "responses": {
                        "200": {
                            "description": "ok",
                            "content": {
                                "application/json": {
                                    "schema": {
                                        "type": "array",
                                        "items": {
                                            "type": "object",
                                            "required": ["id", "code"],
                                            "properties": {
                                                "id": {"type": "integer"},
                                                "code": {
                                                    "type": "string",
                                                    "pattern": "^[0-9]{12}$",
                                                    "maxLength": 4,
                                                },  # no text fits
                                            },
                                        },
                                    }
                                }
                            },  # fmt: skip
                        }
                    }
                }
            }
        },
    }
    with pytest.raises(DataError, match="codes records"):
        seed_records(catalog(load_spec(spec)), random.Random(0))
