"""The simulated service of `ludus synth` (issue 36, in progress) on the shop example: each verb,
validation as the document declares it, 404s, paging and filters, and hostile arguments."""

from __future__ import annotations

import json

import pytest

from ludus.envs.synth import EXAMPLES
from ludus.envs.synth.resources import catalog
from ludus.envs.synth.spec import load_spec
from ludus.envs.synth.store import Store

MILK = {"name": "Milk", "category": "dairy", "price": 1.1, "stock": 20}


@pytest.fixture
def shop() -> Store:
    rows = [
        {"id": i, "name": f"P{i}", "category": ["bakery", "dairy"][i % 2], "price": float(i), "stock": i}
        for i in range(1, 8)
    ]
    return Store(catalog(load_spec(EXAMPLES / "shop.yaml")), {"products": rows})


def test_create_read_update_delete_change_only_what_they_say(shop):
    made = shop.call("createProduct", {"body": MILK})
    assert (made.status, made.body) == (201, {**MILK, "id": 8})  # the next id
    assert shop.call("getProduct", {"productId": 8}).body == made.body
    changed = shop.call("updateProduct", {"productId": 8, "body": {"price": 1.3}})
    assert (changed.status, changed.body["price"], changed.body["stock"]) == (200, 1.3, 20)
    before = shop.snapshot()
    assert shop.call("deleteProduct", {"productId": 8}).status == 204
    after = shop.snapshot()
    assert set(before["products"]) - set(after["products"]) == {8} and after["customers"] == before["customers"]
    assert json.loads(shop.call("getProduct", {"productId": 8}).text())["status"] == 404


def test_a_required_field_the_create_body_lacks_takes_its_first_enum_value(shop):
    order = shop.call("createOrder", {"body": {"customer_id": 1, "product_id": 2, "quantity": 2}})
    assert (order.status, order.body["status"]) == (201, "pending")


@pytest.mark.parametrize(
    ("call", "args", "error"),
    [
        ("createProduct", {"body": {**MILK, "price": -1}}, "price: -1 is less than the minimum of 0"),
        ("createProduct", {"body": {**MILK, "category": "cheese"}}, "category: 'cheese' is not one of"),
        ("createProduct", {"body": {**MILK, "id": 3}}, "'id' was unexpected"),  # the service assigns ids
        ("createProduct", {}, "a request body is required"),
        ("createCustomer", {"body": {"name": "Ann", "email": "ann at example"}}, "is not a 'email'"),
        ("updateProduct", {"productId": 1, "body": {}}, "should be non-empty"),
        ("listProducts", {"limit": 500}, "limit: 500 is greater than the maximum of 50"),
        ("getProduct", {"productId": 99}, "no products record with id 99"),
    ],
)
def test_invalid_calls_are_refused_as_the_document_says_and_change_nothing(shop, call, args, error):
    before = shop.snapshot()
    reply = shop.call(call, args)
    assert reply.status == (404 if "no products record" in error else 400)
    assert error in reply.body["error"]
    assert shop.snapshot() == before


def test_lists_filter_by_property_and_page_with_the_total_on_every_page(shop):
    first = shop.call("listProducts", {"category": "dairy", "limit": 2})
    assert [p["id"] for p in first.body["items"]] == [1, 3] and first.body["total"] == 4
    last = shop.call("listProducts", {"category": "dairy", "limit": 2, "offset": 2})
    assert [p["id"] for p in last.body["items"]] == [5, 7] and last.body["total"] == 4
    assert len(shop.call("listProducts", {}).body["items"]) == 10 - 3  # the default page (10) holds all 7


def test_replies_are_copies_the_caller_cannot_change_the_store_through(shop):
    reply = shop.call("getProduct", {"productId": 1})
    reply.body["price"] = 0.0
    assert shop.call("getProduct", {"productId": 1}).body["price"] == 1.0
