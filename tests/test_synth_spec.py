"""Reading OpenAPI documents for `ludus synth` (issue 36, in progress): what is kept, what is
skipped with its reason, and documents that are refused with a clear message."""

from __future__ import annotations

import json

import pytest

from ludus.envs.synth import EXAMPLES
from ludus.envs.synth.spec import MAX_ENUM, MAX_REF_DEPTH, SpecError, load_spec

SHOP = EXAMPLES / "shop.yaml"


def doc(paths: dict, schemas: dict | None = None, version: str = "3.1.0") -> dict:
    out = {"openapi": version, "info": {"title": "T", "version": "1"}, "paths": paths}
    if schemas:
        out["components"] = {"schemas": schemas}
    return out


def ok(schema: dict | None = None) -> dict:
    content = {"content": {"application/json": {"schema": schema}}} if schema else {}
    return {"200": {"description": "ok", **content}}


def test_the_shop_example_reads_whole_with_every_reference_inlined():
    spec = load_spec(SHOP)
    assert (spec.title, spec.openapi, spec.skipped) == ("Corner Shop", "3.1.0", [])
    names = [op.name for op in spec.operations]
    assert names[:5] == ["listProducts", "createProduct", "getProduct", "deleteProduct", "updateProduct"]
    get = spec.operation("getProduct")
    assert (get.label, [(p.name, p.location, p.required) for p in get.params]) == (
        "GET /products/{productId}",
        [("productId", "path", True)],  # declared on the path item, shared by its operations
    )
    assert get.statuses == ("200", "404")
    create = spec.operation("createProduct")
    assert create.body_required and create.body["required"] == ["name", "category", "price", "stock"]
    assert create.body["properties"]["category"]["enum"][0] == "fruit"  # a $ref inside a property
    product = create.responses["201"]
    assert product["allOf"][1]["properties"]["id"]["readOnly"] is True
    assert "$ref" not in json.dumps(spec.operations[0].responses)


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ({"swagger": "2.0", "info": {"title": "x"}, "paths": {}}, "Swagger 2.0"),
        ({"openapi": "2.9.0", "info": {"title": "x"}}, "3.0.x or 3.1.x"),
        ({"openapi": 3.0, "info": {"title": "x"}}, "version string"),
        ({"openapi": "3.0.3", "paths": {}}, "info.title"),
        ({"openapi": "3.0.3", "info": {"title": "x"}, "paths": []}, "'paths' must be a mapping"),
        ("openapi: 3.0.3\ninfo: {title: x\npaths: {}\n", "line"),
        ("- just\n- a list\n", "mapping at its top level"),
    ],
)
def test_documents_that_are_not_openapi_3_are_refused_with_what_to_do(document, message):
    with pytest.raises(SpecError, match=message):
        load_spec(document)


def test_yaml_aliases_are_refused_before_they_expand():
    bomb = "a: &a [x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a]\nc: [*b, *b, *b, *b, *b]\n"
    with pytest.raises(SpecError, match="aliases"):
        load_spec("openapi: 3.1.0\n" + bomb)


def test_files_that_are_missing_or_not_text_are_refused(tmp_path):
    with pytest.raises(SpecError, match="no such file"):
        load_spec(tmp_path / "missing.yaml")
    binary = tmp_path / "latin1.yaml"
    binary.write_bytes("openapi: 3.1.0\ninfo: {title: caf\xe9}\n".encode("latin-1"))
    with pytest.raises(SpecError, match="not UTF-8"):
        load_spec(binary)


def test_what_cannot_be_simulated_is_skipped_with_its_reason_never_silently():
    spec = load_spec(
        doc(
            {
                "/files": {
                    "post": {
                        "requestBody": {"required": True, "content": {"multipart/form-data": {"schema": {}}}},
                        "responses": ok(),
                    }
                },
                "/secure": {
                    "get": {
                        "parameters": [{"name": "X-Key", "in": "header", "required": True, "schema": {}}],
                        "responses": ok(),
                    },  # fmt: skip
                },
                "/remote": {"get": {"responses": {"200": {"$ref": "other.yaml#/responses/ok"}}}},
                "/items/{id}": {"get": {"responses": ok()}},  # {id} never declared
                "/ping": {"head": {"responses": ok()}, "get": {"responses": ok()}},
            }
        )
    )
    assert [op.label for op in spec.operations] == ["GET /ping"]
    why = {s.where: s.why for s in spec.skipped}
    assert "not JSON" in why["POST /files"]
    assert "header parameter 'X-Key'" in why["GET /secure"]
    assert "another document" in why["GET /remote"]
    assert "do not match" in why["GET /items/{id}"]
    assert "HEAD" in why["HEAD /ping"]


def test_operations_without_ids_or_with_clashing_ones_get_unique_tool_names():
    spec = load_spec(
        doc(
            {
                "/pets/{petId}": {
                    "parameters": [{"name": "petId", "in": "path", "required": True, "schema": {"type": "string"}}],
                    "get": {"responses": ok()},
                    "delete": {"operationId": "remove pet!", "responses": ok()},
                },
                "/pets": {"get": {"operationId": "remove pet!", "responses": ok()}},
            }
        )
    )
    assert [op.name for op in spec.operations] == ["get_pets_petId", "remove_pet", "remove_pet_2"]


def test_a_recursive_schema_is_cut_and_noted_and_a_huge_enum_is_noted():
    node = {"type": "object", "properties": {"name": {"type": "string"}, "children": {"type": "array", "items": {"$ref": "#/components/schemas/Node"}}}}  # fmt: skip
    big = {"type": "string", "enum": [f"v{i}" for i in range(MAX_ENUM + 1)]}
    spec = load_spec(
        doc(
            {
                "/tree": {
                    "get": {
                        "parameters": [{"name": "kind", "in": "query", "schema": big}],
                        "responses": ok({"$ref": "#/components/schemas/Node"}),
                    }
                }
            },  # fmt: skip
            {"Node": node},
        )
    )
    schema = spec.operations[0].responses["200"]
    depth = 0
    while "properties" in schema:
        schema, depth = schema["properties"]["children"]["items"], depth + 1
    assert depth == MAX_REF_DEPTH and schema == {"type": "object"}
    notes = " ".join(n.why for n in spec.notes)
    assert "recursive schema #/components/schemas/Node is cut" in notes and f"enum of {MAX_ENUM + 1}" in notes
    assert len(spec.operations[0].params[0].schema["enum"]) == MAX_ENUM + 1  # still checked


def test_a_reference_loop_with_nothing_in_between_is_skipped_not_a_hang():
    spec = load_spec(
        {
            **doc({"/a": {"$ref": "#/components/pathItems/A"}}),
            "components": {
                "pathItems": {"A": {"$ref": "#/components/pathItems/B"}, "B": {"$ref": "#/components/pathItems/A"}}
            },
        }
    )
    assert spec.operations == [] and "refers to itself" in spec.skipped[0].why


def test_openapi_30_nullable_becomes_a_type_list():
    spec = load_spec(doc({"/x": {"get": {"responses": ok({"type": "string", "nullable": True})}}}, version="3.0.3"))
    assert spec.operations[0].responses["200"] == {"type": ["string", "null"]}


# ---- resources ---------------------------------------------------------------------------------------


def test_the_shops_resources_and_their_verbs_filters_and_paging():
    from ludus.envs.synth.resources import catalog

    found = catalog(load_spec(SHOP))
    products = found.resource("products")
    assert (products.item, products.id_param, products.id_field) == ("/products/{productId}", "productId", "id")
    assert sorted(products.operations) == ["create", "delete", "list", "read", "update"]
    assert (products.filters, products.paging, products.envelope, products.total) == (
        {"category": "category"}, ("limit", "offset"), "items", "total"
    )  # fmt: skip
    assert products.writable() == ["name", "category", "price", "stock"]  # allOf merged, the readOnly id left out
    assert found.resource("orders").filters == {"customer_id": "customer_id", "status": "status"}
    assert [(n.where, "in_stock" in n.why) for n in found.notes] == [("GET /products", True)]


def test_operations_the_simulation_cannot_honour_are_reported():
    from ludus.envs.synth.resources import catalog

    record = {"type": "object", "properties": {"id": {"type": "integer"}, "name": {"type": "string"}}}
    pid = [{"name": "id", "in": "path", "required": True, "schema": {"type": "integer"}}]
    found = catalog(
        load_spec(
            doc(
                {
                    "/pets": {"get": {"responses": ok({"type": "array", "items": record})}},
                    "/pets/{id}": {"parameters": pid, "get": {"responses": ok(record)}},
                    "/pets/{id}/adopt": {"parameters": pid, "post": {"responses": ok(record)}},
                    "/owners/{id}/pets": {
                        "parameters": pid,
                        "get": {"responses": ok({"type": "array", "items": record})},
                    },
                    "/blobs": {"get": {"responses": ok({"type": "string"})}},
                    "/": {"get": {"responses": ok(record)}},
                }
            )
        )
    )
    assert [r.name for r in found.resources] == ["pets"]
    why = {s.where: s.why for s in found.skipped}
    assert "a path under a record" in why["POST /pets/{id}/adopt"]
    assert "a path under a record" in why["GET /owners/{id}/pets"]
    assert "no schema of a blobs record" in why["GET /blobs"]
    assert "root" in why["GET /"]
