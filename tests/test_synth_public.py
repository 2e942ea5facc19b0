"""`ludus synth` on public OpenAPI documents nobody here wrote (tests/data/openapi_public/, whose
README.md names each file's package, version, path and license): each document either makes an
environment — the outcome recorded below, the oracle solving a few of its tasks and doing nothing
earning nothing — or is refused with a ValueError saying why, never another exception and never
a hang. Then an "unseen" document (a FastAPI app's), and the fixes the public documents asked of
the simulation, each checked on its own. (No ``from __future__ import annotations``: the FastAPI
app's models are classes within a test, whose annotations pydantic must see evaluated.)"""

import random
import re
import uuid
from pathlib import Path
from typing import Any

import pytest

from ludus.certify.redteam import redteam_env
from ludus.core.types import Message, Status
from ludus.envs.synth import EXAMPLES
from ludus.envs.synth.data import DataError, foreign_keys, matching, seed_records, value
from ludus.envs.synth.env import SynthEnv
from ludus.envs.synth.package import synthesize
from ludus.envs.synth.resources import catalog
from ludus.envs.synth.spec import SpecError, load_spec
from ludus.envs.synth.store import Store, invalid, record_id
from ludus.envs.synth.tasks import CHANGES, MAX_ANSWER, answer_text, make_goal

PUBLIC = Path(__file__).parent / "data" / "openapi_public"


def built(tools: int, resources: list[str], kinds: list[str]) -> tuple[str, Any]:
    return "built", (tools, resources, kinds)


def refused(message: str) -> tuple[str, Any]:
    return "refused", message


# Every top-level document, and what `ludus synth` makes of it: the number of operations it
# simulates as tools, its resources and the kinds of task they allow, or why it is refused.
OUTCOMES = {
    "osv-petstore-3.0.yaml": built(3, ["pets"], ["lookup"]),
    "osv-petstore-3.1.yaml": built(3, ["pets"], ["lookup"]),
    "osv-petstore-3.2.yaml": refused("'openapi' must be a 3.0.x or 3.1.x version string, got '3.2.0'"),
    "osv-petstore-2.0.yaml": refused("this is a Swagger 2.0 document: only OpenAPI 3.0 and 3.1 are read; convert it"),
    "osv-missing-description.yaml": refused("no resource can be simulated (GET /: an operation on the root"),
    "osv-property-recursive.yaml": refused("no resource can be simulated (it declares no operations)"),
    "osv-read-only-write-only.yaml": refused("(POST /users: no schema of a users record in any response"),
    "osv-empty.yaml": refused("'info.title' is missing"),
    "osv-petstore-separate/spec/openapi.yaml": built(3, ["pets"], ["lookup"]),
    "osv-parent-reference/openapi.yaml": refused("(GET /pets: no schema of a pets record in any response"),
    "oc-petstore.yaml": refused(
        "(GET /pets: parameter 'coordinates' has no schema (only 'content'): not read; "
        "POST /pets: the required header parameter 'api-key'"
    ),  # fmt: skip
    "oc-links-3.1.yaml": refused("(GET /linked/noParam: no schema of a noParam record"),
    "oc-webhook-example-3.1.yaml": refused("no resource can be simulated (it declares no operations)"),
    "oc-parent-reference/openapi.yaml": built(1, ["books"], ["lookup"]),
    "prance-petstore-2.0.json": refused("this is a Swagger 2.0 document"),
    "prance-issue-51/openapi-main.yaml": refused("(POST /something/: no schema of a something record"),
    "prance-issue-78/openapi.json": refused(
        "(POST /endpoint: $ref 'tests/specs/issue_78/_schemas.json#/$defs/Body' in the document names no file there"
    ),  # fmt: skip
    "prance-nested-recursive/nested_recursive_reference_in_file.spec.yaml": refused(
        "(GET /hosts: no schema of a hosts"
    ),
    "prance-root-file-reference/root_file_reference_from_file.spec.yaml": refused("(GET /hosts: no schema of a hosts"),
    "st-petstore-3.0.yaml": built(9, ["pet", "order", "user"], ["create", "update", "delete", "lookup"]),
    "st-simple-openapi.yaml": refused("(GET /users: no schema of a users record"),
    "st-relative-files/main.yaml": built(1, ["user_account"], ["lookup"]),
    "drf-basic.yml": built(6, ["albums"], ["update", "delete", "lookup"]),
    "drf-basic-3.1.yml": built(6, ["albums"], ["update", "delete", "lookup"]),
    "drf-fields.yml": built(4, ["allfields", "aux"], ["lookup"]),
    "drf-validators.yml": built(2, ["x", "y"], ["create"]),
    "drf-recursion.yml": built(1, ["nodes"], ["lookup"]),
    "drf-django-filters.yml": built(2, ["products"], ["count", "lookup"]),
    "drf-i18n.yml": built(3, ["x"], ["create", "lookup"]),
    "drf-rest-auth-token.yml": built(
        7, ["login", "logout", "change", "reset", "registration", "refresh", "verify"], ["create"]
    ),  # fmt: skip
    "drf-nested-routers.yml": refused("(GET /root/{parent_pk}/child/: a path under a record"),
    "drf-extend-schema.yml": refused("(POST /doesitall/manual/: $ref '#/components/schemas/Gamma' points to nothing"),
    "drf-rest-polymorphic.yml": refused("(GET /persons/: no schema of a persons record"),
    "dcg-body-and-parameters.yaml": built(6, ["pets", "users"], ["create", "lookup"]),
    "dcg-oneof.yaml": built(3, ["pets"], ["lookup"]),
    "dcg-unevaluated-properties.yaml": built(1, ["resources"], ["create"]),
    "dcg-schema-location-alias.yaml": refused("uses a YAML alias (*owner) at line 25: aliases are not read"),
    "dcg-bad-openapi.yaml": refused("is neither JSON nor YAML at line 5, column 1"),
    "dcg-list.json": refused("an OpenAPI document is a mapping at its top level, got list"),
}
FILES = {  # the documents that refer to other files, and the files they bring in (one is refused: outside)
    "osv-petstore-separate/spec/openapi.yaml": ["schemas/Pet.yaml", "schemas/Pets.yaml"],
    "osv-parent-reference/openapi.yaml": ["common.yaml", "recursive.yaml", "recursive2.yaml", "spec/components.yaml"],
    "oc-parent-reference/openapi.yaml": ["paths/books.yaml", "schemas/book.yaml"],
    "prance-issue-51/openapi-main.yaml": ["openapi-part.yaml"],
    "prance-nested-recursive/nested_recursive_reference_in_file.spec.yaml": [
        "nested_recursive_reference_in_file_schemas.spec.yaml"
    ],
    "prance-root-file-reference/root_file_reference_from_file.spec.yaml": [
        "root_file_reference_from_file_schemas.spec.yaml"
    ],
    "st-relative-files/main.yaml": [
        "components/parameters.yaml",
        "components/responses.yaml",
        "components/schemas.yaml",
        "paths/user-account.yaml",
    ],  # fmt: skip
}


def env_class(document: Path, name: str) -> type[SynthEnv]:
    return type("Public", (SynthEnv,), {"name": name, "description": "a public API", "spec_path": document})


def play_oracle(env: SynthEnv, task) -> Any:
    env.reset(task, seed=0)
    result = None
    for message in env.reference_actions(task):
        result = env.step(message)
        if result.done:
            break
    return result.score


def test_every_file_is_named_in_the_readme_and_every_document_has_its_outcome():
    readme = (PUBLIC / "README.md").read_text()
    files = sorted(p.relative_to(PUBLIC).as_posix() for p in PUBLIC.rglob("*") if p.is_file() and p.name != "README.md")
    assert len(OUTCOMES) >= 20 and set(OUTCOMES) <= set(files)
    for name in files:
        assert f"| `{name}` |" in readme, name
    helpers = {f"{d.rsplit('/', 1)[0]}/{f}" for d, fs in FILES.items() for f in fs if "/" in d}
    unread = {"osv-petstore-separate/common/schemas/Error.yaml",  # outside the document's folder: refused
              "prance-issue-78/_schemas.json"}  # named by a path from prance's working folder: no file there  # fmt: skip
    assert set(files) - set(OUTCOMES) - helpers == unread


@pytest.mark.parametrize("name", list(OUTCOMES))
def test_a_public_document_makes_the_recorded_environment_or_is_refused_saying_why(name, tmp_path):
    outcome, expected = OUTCOMES[name]
    out = tmp_path / "pkg"
    if outcome == "refused":
        with pytest.raises(ValueError) as caught:  # SpecError or DataError: never another exception
            synthesize(PUBLIC / name, out, name="public")
        assert type(caught.value) in (SpecError, DataError) and expected in str(caught.value)
        assert not out.exists()
        return
    made = synthesize(PUBLIC / name, out, name="public")
    tools = sum(len(r.operations) for r in made.catalog.resources)
    assert (tools, [r.name for r in made.catalog.resources], made.kinds) == expected
    document = next((out / made.module).glob("api.*"))  # the package's own document (bundled when in parts)
    env = env_class(document, f"public-{re.sub(r'[^a-z0-9]+', '-', name.lower())}")()
    source = env.task_source("train")
    for index in range(3):
        task = source.get(index)
        score = play_oracle(env, task)
        assert (score.status, score.value) == (Status.CORRECT, 1.0), (task.prompt, score)
        env.reset(task, seed=0)
        nothing = env.step(Message("assistant", ""))
        assert nothing.done and nothing.score.value == 0.0, (task.prompt, nothing.score)


@pytest.mark.parametrize("name", list(FILES))
def test_the_other_files_a_document_names_are_read(name):
    assert sorted(load_spec(PUBLIC / name).files) == FILES[name]


BUILT = [name for name, (outcome, _) in OUTCOMES.items() if outcome != "refused"]
SLOW = {"drf-fields.yml", "drf-validators.yml"}  # 13 and 22 s each under load; they passed when tried


@pytest.mark.parametrize("name", [name for name in BUILT if name not in SLOW])
def test_public_environments_pass_the_red_team_without_installing(name):
    # before Env.answers_in_tools, 8 of them failed the leak line: a tool reply showing a lookup's answer
    report = redteam_env(
        env_class(PUBLIC / name, f"public-{re.sub(r'[^a-z0-9]+', '-', name.lower())}"), name=name, tasks=5
    )
    assert all(r.ok for r in report.results), [r for r in report.results if not r.ok]


def test_an_unseen_fastapi_app_is_simulated_and_passes_the_red_team(tmp_path):
    import json
    from enum import StrEnum

    from fastapi import FastAPI, Query
    from pydantic import BaseModel, Field

    app = FastAPI(title="Library Loans", version="0.3.0")

    class Genre(StrEnum):
        fiction = "fiction"
        history = "history"
        science = "science"

    class BookIn(BaseModel):
        title: str = Field(min_length=1, max_length=120)
        author: str
        genre: Genre
        year: int = Field(ge=1450, le=2030)
        available: bool = True
        isbn: str | None = Field(default=None, pattern=r"^97[89]-\d{10}$")

    class Book(BookIn):
        id: int

    class BookPatch(BaseModel):
        author: str | None = None
        genre: Genre | None = None
        year: int | None = Field(default=None, ge=1450, le=2030)
        available: bool | None = None

    class MemberIn(BaseModel):
        name: str
        email: str

    class Member(MemberIn):
        id: int

    class LoanIn(BaseModel):
        book_id: int
        member_id: int
        weeks: int = Field(default=2, ge=1, le=8)

    class Loan(LoanIn):
        id: int

    @app.get("/books", response_model=list[Book])
    def list_books(genre: Genre | None = None, available: bool | None = None, limit: int = Query(20, le=50),
                   offset: int = 0) -> list[Book]:  # fmt: skip
        return []

    @app.post("/books", response_model=Book, status_code=201)
    def create_book(book: BookIn) -> Book: ...

    @app.get("/books/{book_id}", response_model=Book)
    def get_book(book_id: int) -> Book: ...

    @app.patch("/books/{book_id}", response_model=Book)
    def update_book(book_id: int, patch: BookPatch) -> Book: ...

    @app.delete("/books/{book_id}", status_code=204)
    def delete_book(book_id: int) -> None: ...

    @app.get("/members", response_model=list[Member])
    def list_members() -> list[Member]: ...

    @app.post("/members", response_model=Member, status_code=201)
    def create_member(member: MemberIn) -> Member: ...

    @app.get("/loans", response_model=list[Loan])
    def list_loans(member_id: int | None = None) -> list[Loan]: ...

    @app.post("/loans", response_model=Loan, status_code=201)
    def create_loan(loan: LoanIn) -> Loan: ...

    @app.post("/loans/{loan_id}/return", response_model=Loan)
    def return_loan(loan_id: int) -> Loan: ...

    spec = tmp_path / "openapi.json"
    spec.write_text(json.dumps(app.openapi()))
    made = synthesize(spec, tmp_path / "pkg")
    assert made.env_name == "library-loans" and made.kinds == ["create", "update", "delete", "count", "lookup"]
    assert [(r.name, sorted(r.operations)) for r in made.catalog.resources] == [
        ("books", ["create", "delete", "list", "read", "update"]), ("members", ["create", "list"]),
        ("loans", ["create", "list"]),
    ]  # fmt: skip
    assert [s.where for s in made.catalog.skipped] == ["POST /loans/{loan_id}/return"]
    books = made.catalog.resource("books")
    assert (books.filters, books.paging) == ({"genre": "genre", "available": "available"}, ("limit", "offset"))
    loans = made.catalog.resource("loans")
    assert {k: v.name for k, v in foreign_keys(loans, made.catalog).items()} == {"book_id": "books", "member_id": "members"}  # fmt: skip
    document = tmp_path / "pkg" / made.module / "api.json"
    report = redteam_env(env_class(document, "library-loans"), name="library-loans", tasks=6)
    assert all(r.ok for r in report.results), [r for r in report.results if not r.ok]


# ---- what the public documents asked of the simulation ----------------------------------------------


@pytest.mark.parametrize(
    "pattern",
    [r"^[\w.@+-]+$", r"^-?\d{0,2}(?:\.\d{0,2})?$", r"^[a-zA-z0-9]{10}\-[a-z]", r"^97[89]-\d{10}$",
     r"^(?:[A-Z]{2}|EU)-\d{3}$", r"^(a|b)\1c?$", r"[^,]+,[^,]+"],
)  # fmt: skip
def test_text_is_made_to_fit_a_pattern_natural_words_first(pattern):
    rng = random.Random(0)
    for _ in range(20):
        text = value({"type": "string", "pattern": pattern}, "username", rng)
        assert re.search(pattern, text), (pattern, text)
        made = matching(pattern, rng)
        assert made is not None and re.search(pattern, made), (pattern, made)
    assert "_" in value({"type": "string", "pattern": r"^[\w.@+-]+$"}, "username", random.Random(1))  # "Tart_bun"


def test_ids_fit_their_schema_a_uuid_a_short_code_or_a_number():
    pets = {"openapi": "3.1.0", "info": {"title": "T", "version": "1"}, "paths": {}}
    schemas = {"uuid": {"type": "string", "format": "uuid"}, "short": {"type": "string", "maxLength": 2},
               "text": {"type": "string"}, "number": {"type": "number"}}  # fmt: skip
    for kind, id_schema in schemas.items():
        record = {"type": "object", "properties": {"id": id_schema, "name": {"type": "string"}}}
        document = {**pets, "paths": {"/pets": {"get": {"responses": {"200": {"description": "ok", "content": {
            "application/json": {"schema": {"type": "array", "items": record}}}}}},
            "post": {"requestBody": {"content": {"application/json": {"schema": record}}},
                     "responses": {"201": {"description": "ok", "content": {"application/json": {"schema": record}}}}}}}}  # fmt: skip
        found = catalog(load_spec(document))
        pet = found.resource("pets")
        ids = [record_id(pet, n) for n in range(1, 10)]
        assert len(set(ids)) == 9 and all(invalid(i, id_schema) is None for i in ids), (kind, ids)
        store = Store(found, seed_records(found, random.Random(0)))
        made = store.call(pet.operations["create"].name, {"body": {"name": "Rex"}}).body["id"]
        assert invalid(made, id_schema) is None and made not in ids[:8]
    assert record_id(pet, 3) == 3
    assert str(uuid.UUID(record_id(catalog(load_spec(_with_id(schemas["uuid"]))).resource("pets"), 1)))


def _with_id(id_schema: dict) -> dict:
    record = {"type": "object", "properties": {"id": id_schema}}
    ok = {"200": {"description": "ok", "content": {"application/json": {"schema": {"type": "array", "items": record}}}}}
    return {"openapi": "3.1.0", "info": {"title": "T", "version": "1"}, "paths": {"/pets": {"get": {"responses": ok}}}}


def test_values_honour_item_and_entry_counts_uniqueness_formats_and_all_of():
    rng = random.Random(0)
    many = value({"type": "array", "minItems": 100, "items": {"type": "integer"}}, "list", rng)
    assert len(many) >= 100  # drf-spectacular's min_length=100 (the old draw allowed at most 3)
    entries = value({"type": "object", "minProperties": 2, "additionalProperties": {"type": "integer"}}, "map", rng)
    assert len(entries) >= 2 and all(isinstance(v, int) for v in entries.values())
    labels = {"type": "array", "uniqueItems": True, "minItems": 3, "maxItems": 4, "items": {"enum": list("abcd")}}
    for _ in range(20):
        drawn = value(labels, "labels", rng)
        assert len(drawn) == len(set(drawn)) >= 3
    assert re.fullmatch(r"PT\d+M", value({"type": "string", "format": "duration"}, "reminder", rng))
    wrapped = {"allOf": [{"type": "string", "enum": ["A", "B"]}], "default": "B"}  # 3.0's $ref beside a default
    assert {value(wrapped, "category", rng) for _ in range(20)} <= {"A", "B"}


def test_a_persons_part_in_a_record_refers_to_the_one_resource_of_people():
    found = catalog(load_spec(EXAMPLES / "ticketing.yaml"))
    keys = {k: v.name for k, v in foreign_keys(found.resource("tickets"), found).items()}
    assert keys == {"queue_id": "queues", "reporter_id": "users", "assignee_id": "users"}
    records = seed_records(found, random.Random(0))
    users = {u["id"] for u in records["users"]}
    assert all(t["reporter_id"] in users for t in records["tickets"])


def reports(document: Path | dict, draws: int = 200) -> list[Any]:
    found = catalog(load_spec(document))
    records = seed_records(found, random.Random(0))
    rng = random.Random(0)
    goals = [g for g in (make_goal(found, records, rng) for _ in range(draws)) if g is not None]
    return [g for g in goals if g.kind not in CHANGES]


def test_a_lookup_never_asks_for_a_value_too_long_or_empty_to_answer():
    trees = reports(PUBLIC / "drf-recursion.yml")  # a tree of nodes: a child list can be huge
    assert trees and all(len(answer_text(g.answer)) <= MAX_ANSWER for g in trees)
    record = {"type": "object", "required": ["id", "name", "note"],
              "properties": {"id": {"type": "integer"}, "name": {"type": "string"}, "note": {"type": "string",
                                                                                         "maxLength": 0}}}  # fmt: skip
    ok = {"200": {"description": "ok", "content": {"application/json": {"schema": {"type": "array", "items": record}}}}}
    blank = reports({"openapi": "3.1.0", "info": {"title": "T", "version": "1"}, "paths": {"/notes": {"get": {
        "responses": ok}}}})  # fmt: skip
    assert blank == []  # the only value to report is "", which <answer></answer> cannot say
