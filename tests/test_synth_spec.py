"""Reading OpenAPI documents for `ludus synth` (issue 36, in progress): what is kept, what is
skipped with its reason, and documents that are refused with a clear message."""

from __future__ import annotations

import json

import pytest
import yaml

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


# ---- references into other files ---------------------------------------------------------------------


def write(folder, name: str, document) -> None:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document) if name.endswith(".json") else yaml.safe_dump(document, sort_keys=False))


def listing(schema: dict) -> dict:
    return {"get": {"operationId": "listPets", "responses": ok({"type": "array", "items": schema})}}


def pets_in_files(folder) -> None:
    """A pet store spread over four files: a path item in a subfolder, schemas in JSON and YAML
    that refer to each other (a cycle: a pet's owner lists pets) and back to the document."""
    pid = [{"name": "petId", "in": "path", "required": True, "schema": {"type": "integer"}}]
    write(folder, "api.yaml", {
        **doc({"/pets": {**listing({"$ref": "schemas/pet.json#/Pet"}),
                         "post": {"operationId": "createPet", "responses": ok({"$ref": "schemas/pet.json#/Pet"}),
                                  "requestBody": {"required": True, "content": {"application/json": {
                                      "schema": {"$ref": "#/components/schemas/NewPet"}}}}}},
               "/pets/{petId}": {"$ref": "paths/pet.yaml"}},
              {"NewPet": {"$ref": "schemas/pet.json#/NewPet"}, "Kind": {"type": "string", "enum": ["cat", "dog"]}}),
    })  # fmt: skip
    write(folder, "paths/pet.yaml", {
        "parameters": pid,
        "get": {"operationId": "getPet", "responses": ok({"$ref": "../schemas/pet.json#/Pet"})},
        "delete": {"operationId": "deletePet", "responses": {"204": {"description": "gone"}}},
    })  # fmt: skip
    write(folder, "schemas/pet.json", {
        "NewPet": {"type": "object", "required": ["name"], "properties": {
            "name": {"type": "string"}, "kind": {"$ref": "../api.yaml#/components/schemas/Kind"}}},
        "Pet": {"allOf": [{"$ref": "#/NewPet"}, {"type": "object", "required": ["id"], "properties": {
            "id": {"type": "integer", "readOnly": True}, "owner": {"$ref": "owner.yaml#/Owner"}}}]},
    })  # fmt: skip
    write(folder, "schemas/owner.yaml", {
        "Owner": {"type": "object", "properties": {"name": {"type": "string"},
                                                   "pets": {"type": "array", "items": {"$ref": "pet.json#/Pet"}}}},
    })  # fmt: skip


def test_references_into_other_files_of_the_folder_are_followed_from_each_files_own_folder(tmp_path):
    pets_in_files(tmp_path)
    spec = load_spec(tmp_path / "api.yaml")
    assert sorted(spec.files) == ["paths/pet.yaml", "schemas/owner.yaml", "schemas/pet.json"]
    assert [op.name for op in spec.operations] == ["listPets", "createPet", "getPet", "deletePet"]
    assert spec.skipped == [] and "$ref" not in json.dumps([op.responses for op in spec.operations])
    create = spec.operation("createPet")
    assert create.body["properties"]["kind"]["enum"] == ["cat", "dog"]  # a file's reference back to the document
    pet = spec.operation("getPet").responses["200"]
    assert pet["allOf"][0]["required"] == ["name"]  # "#/NewPet" within pet.json is pet.json's own
    notes = " ".join(n.why for n in spec.notes)  # the cycle between two files is cut as a local one is
    assert "the recursive schema schemas/pet.json#/Pet is cut" in notes
    from ludus.envs.synth.resources import catalog

    assert [(r.name, sorted(r.operations)) for r in catalog(spec).resources] == [
        ("pets", ["create", "delete", "list", "read"])
    ]


def test_references_that_leave_the_folder_or_name_no_readable_file_are_refused_with_the_reason(tmp_path, monkeypatch):
    import ludus.envs.synth.spec as spec_module

    folder = tmp_path / "api"
    write(tmp_path, "secret.yaml", {"Pet": {"type": "object", "properties": {"id": {"type": "integer"}}}})
    write(folder, "big.yaml", {"Pet": {"type": "object", "description": "x" * 5000}})
    (folder / "broken.yaml").write_text("Pet: {type: object\n")
    (folder / "link.yaml").symlink_to(tmp_path / "secret.yaml")
    refs = {
        "absolute": str(tmp_path / "secret.yaml") + "#/Pet",
        "http": "http://example.com/pet.yaml#/Pet",
        "https": "https://example.com/pet.yaml#/Pet",
        "file": "file:///etc/passwd",
        "parent": "../secret.yaml#/Pet",
        "sneaky": "sub/../../secret.yaml#/Pet",
        "symlink": "link.yaml#/Pet",
        "missing": "nowhere.yaml#/Pet",
        "big": "big.yaml#/Pet",
        "broken": "broken.yaml#/Pet",
        "anchor": "big.yaml#Pet",
    }
    write(folder, "api.yaml", doc({f"/{name}": listing({"$ref": ref}) for name, ref in refs.items()}))
    monkeypatch.setattr(spec_module, "MAX_DOCUMENT_BYTES", (folder / "api.yaml").stat().st_size + 3000)
    spec = load_spec(folder / "api.yaml")
    assert spec.operations == [] and spec.files == ()
    why = {s.where: s.why for s in spec.skipped}
    expected = {
        "absolute": "absolute path", "http": "URL", "https": "URL", "file": "URL", "parent": "out of the document's folder",
        "sneaky": "out of the document's folder", "symlink": "out of the document's folder", "missing": "no file there",
        "big": "past the limit", "broken": "cannot be read", "anchor": "no JSON pointer",
    }  # fmt: skip
    for name, reason in expected.items():
        assert reason in why[f"GET /{name}"] and refs[name][:20] in why[f"GET /{name}"], (name, why[f"GET /{name}"])


def test_a_document_given_as_text_or_a_mapping_reads_no_other_file(tmp_path):
    write(tmp_path, "pet.yaml", {"Pet": {"type": "object"}})
    document = doc({"/pets": listing({"$ref": "pet.yaml#/Pet"})})
    for source in (document, json.dumps(document, indent=1)):
        spec = load_spec(source)
        assert spec.operations == [] and "another document" in spec.skipped[0].why


def test_references_multiplying_across_files_are_budgeted_like_local_ones(tmp_path):
    from ludus.envs.synth.spec import MAX_OPERATION_NODES

    for i in range(20):  # each file's schema names the next one's twice: 2**20 nodes once inlined
        nxt = {"$ref": f"s{i + 1}.yaml#/S"} if i < 19 else {"type": "string"}
        write(tmp_path, f"s{i}.yaml", {"S": {"type": "object", "properties": {"a": nxt, "b": dict(nxt)}}})
    write(tmp_path, "api.yaml", doc({"/things": listing({"$ref": "s0.yaml#/S"})}))
    spec = load_spec(tmp_path / "api.yaml")
    assert len(spec.files) == 20 and spec.operations == []
    assert f"more than {MAX_OPERATION_NODES} nodes" in spec.skipped[0].why


def test_a_document_may_not_hold_the_keys_bundling_writes(tmp_path):
    write(tmp_path, "pet.yaml", {"Pet": {"type": "object"}})
    write(tmp_path, "api.yaml", {**doc({"/pets": listing({"$ref": "pet.yaml#/Pet"})}), "x-ludus-files": {}})
    with pytest.raises(SpecError, match="x-ludus-files"):
        load_spec(tmp_path / "api.yaml")


def test_the_package_carries_the_bundled_document_and_works_without_the_other_files(tmp_path):
    import shutil

    from ludus.envs.synth.env import SynthEnv
    from ludus.envs.synth.package import synthesize

    source = tmp_path / "source"
    pets_in_files(source)
    write(source, "paths/pet.yaml", {**yaml.safe_load((source / "paths/pet.yaml").read_text()),
                                     "patch": {"operationId": "renamePet", "requestBody": {"content": {
                                         "application/json": {"schema": {"$ref": "../schemas/pet.json#/NewPet"}}}},
                                               "responses": {"404": {"$ref": "../../outside.yaml#/NotFound"},
                                                             **ok({"$ref": "../schemas/pet.json#/Pet"})}}})  # fmt: skip
    made = synthesize(source / "api.yaml", tmp_path / "pkg", name="pets-in-files")
    shutil.rmtree(source)  # the package needs nothing of the folder it was made from
    document = tmp_path / "pkg" / "ludus_synth_pets_in_files" / "api.json"
    text = document.read_text()
    assert '"$ref": "schemas/' not in text and '"$ref": "../' not in text  # every reference local
    notes = [n.why for n in made.catalog.notes]
    assert any("response 404 is left out" in n and "out of the document's folder" in n for n in notes)

    class Pets(SynthEnv):
        name = "pets-in-files"
        description = "pets"
        spec_path = document

    env = Pets()
    assert [r.name for r in env.catalog.resources] == [r.name for r in made.catalog.resources]
    for task in (env.task_source("train").get(i) for i in range(4)):
        env.reset(task, seed=0)
        for message in env.reference_actions(task):
            result = env.step(message)
            if result.done:
                break
        assert result.score.value == 1.0, (task.prompt, result.score)


# ---- what public documents asked of the reading (tests/test_synth_public.py runs the documents) -------


def test_an_empty_title_a_null_paths_and_yaml_dates_are_read_as_openapi_means_them():
    spec = load_spec("openapi: 3.0.3\ninfo: {title: '', version: 0.0.0}\npaths:\n")  # drf-spectacular's defaults
    assert (spec.title, spec.operations, spec.skipped) == ("Untitled", [], [])
    assert [(n.where, "empty" in n.why) for n in spec.notes] == [("info.title", True)]
    dated = load_spec(
        "openapi: 3.1.0\ninfo: {title: T, version: 2024-05-01}\npaths:\n  /x:\n    get:\n      responses:\n"
        "        '200': {description: ok, content: {application/json: {schema: {type: string, default: 2024-05-01,"
        " enum: [2024-05-01, 2024-05-01T10:00:00Z]}}}}\n"
    )
    assert dated.version == "2024-05-01"  # text, not a datetime.date no JSON reply could hold
    assert dated.operations[0].responses["200"] == {
        "type": "string", "default": "2024-05-01", "enum": ["2024-05-01", "2024-05-01T10:00:00Z"]
    }  # fmt: skip


def test_an_error_response_whose_schema_cannot_be_read_is_noted_and_the_operation_kept():
    responses = {**ok({"type": "object"}), "404": {"$ref": "#/components/responses/Missing"},
                 "default": {"description": "e", "content": {"application/json": {"schema": {"$ref": "#/nowhere"}}}}}  # fmt: skip
    spec = load_spec(doc({"/pets": {"get": {"responses": responses}}}))
    assert [op.label for op in spec.operations] == ["GET /pets"] and spec.skipped == []
    assert spec.operations[0].responses == {"200": {"type": "object"}, "404": None, "default": None}
    assert sum("is left out" in n.why for n in spec.notes) == 2
    broken = load_spec(doc({"/pets": {"get": {"responses": {"200": {"$ref": "#/components/responses/Missing"}}}}}))
    assert broken.operations == [] and "points to nothing" in broken.skipped[0].why  # a success response is needed


def test_a_yaml_alias_is_refused_with_what_to_do():
    with pytest.raises(SpecError, match=r"uses a YAML alias \(\*owner\) at line 3: .*write the aliased part out"):
        load_spec("openapi: 3.1.0\nowner: &owner {type: string}\nother: *owner\n")


def test_a_path_under_another_collection_is_no_table_of_its_own():
    from ludus.envs.synth.resources import catalog

    record = {"type": "object", "properties": {"id": {"type": "integer"}, "status": {"type": "string"}}}
    found = catalog(
        load_spec(
            doc(
                {
                    "/pet": {
                        "post": {
                            "requestBody": {"content": {"application/json": {"schema": record}}},
                            "responses": ok(record),
                        }
                    },  # fmt: skip
                    "/pet/findByStatus": {"get": {"responses": ok({"type": "array", "items": record})}},
                    "/store/orders": {"get": {"responses": ok({"type": "array", "items": record})}},  # no /store
                }
            )
        )
    )
    assert [r.collection for r in found.resources] == ["/pet", "/store/orders"]
    assert "a path under the collection /pet" in {s.where: s.why for s in found.skipped}["GET /pet/findByStatus"]


def test_records_without_an_id_and_without_a_record_path_are_numbered_by_the_simulation():
    from ludus.envs.synth.resources import catalog

    record = {"type": "object", "additionalProperties": False, "required": ["name"],
              "properties": {"name": {"type": "string"}}}  # fmt: skip
    found = catalog(load_spec(doc({"/tags": {"get": {"responses": ok({"type": "array", "items": record})}}})))
    tags = found.resource("tags")
    assert tags.id_field == "id" and tags.properties["id"] == {"type": "integer", "readOnly": True}
    assert "the simulation numbers them" in found.notes[0].why


def test_all_of_around_a_reference_folds_its_enum_and_default_into_one_schema():
    from ludus.envs.synth.resources import merged

    wrapped = {"allOf": [{"type": "string", "enum": ["a", "b"]}], "default": "b", "description": "3.0's $ref + default"}
    assert merged(wrapped) == {
        "type": "string",
        "enum": ["a", "b"],
        "default": "b",
        "description": "3.0's $ref + default",
    }
    record = merged({"allOf": [{"type": "object", "required": ["x"], "properties": {"x": {"type": "string"}}},
                               {"required": ["id"], "properties": {"id": {"type": "integer"}}}]})  # fmt: skip
    assert (record["type"], record["required"], list(record["properties"])) == ("object", ["x", "id"], ["x", "id"])
    assert merged({"allOf": [{"enum": [1, 2]}]}) == {"type": None, "enum": [1, 2]}  # no type made up
