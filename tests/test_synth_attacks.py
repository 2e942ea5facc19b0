"""Red team of `ludus synth` and `SynthEnv` (issue 36): a hostile policy (its tool calls and its
replies) and a hostile or broken document (given to `ludus synth`, perhaps from the internet).
Each test asserts the safe behaviour; the last ones guard attacks that were already refused."""

from __future__ import annotations

import ast
import copy
import json
import tomllib
from pathlib import Path
from typing import Any

import pytest

from ludus.cli import main
from ludus.core.env import EnvStateError
from ludus.core.types import Message, Score, Status, Task, ToolCall
from ludus.envs.synth import EXAMPLES
from ludus.envs.synth.env import SynthEnv
from ludus.envs.synth.package import synthesize
from ludus.envs.synth.resources import catalog
from ludus.envs.synth.spec import SpecError, load_spec
from ludus.envs.synth.store import Store
from ludus.envs.synth.tasks import Goal, _same_answer, expected_state, grade, records_for

SHOP = EXAMPLES / "shop.yaml"


class Shop(SynthEnv):
    name = "synth-shop-attacks"
    description = "the Corner Shop example API"
    spec_path = SHOP


def ok(schema: dict[str, Any], status: str = "200") -> dict[str, Any]:
    return {status: {"description": "ok", "content": {"application/json": {"schema": schema}}}}


def body(schema: dict[str, Any]) -> dict[str, Any]:
    return {"required": True, "content": {"application/json": {"schema": schema}}}


PET = {"$ref": "#/components/schemas/Pet"}


def pets(
    props: dict[str, Any] | None = None,
    required: tuple[str, ...] = ("name",),
    verbs: tuple[str, ...] = ("list", "create", "read", "delete"),
    list_params: list[dict[str, Any]] | None = None,
    id_schema: dict[str, Any] | None = None,
    version: str = "3.1.0",
) -> dict[str, Any]:
    """A pet store: ``/pets`` and ``/pets/{petId}`` with the verbs asked for, every body and
    response the one ``Pet`` schema (as many public documents have it)."""
    pet = {
        "type": "object",
        "required": ["id", *required],
        "properties": {
            "id": {"type": "integer", "readOnly": True},
            "name": {"type": "string", "minLength": 1},
            "kind": {"type": "string", "enum": ["cat", "dog", "bird"]},
            **(props or {}),
        },
    }
    collection: dict[str, Any] = {}
    item: dict[str, Any] = {"parameters": [{"name": "petId", "in": "path", "required": True,
                                            "schema": id_schema or {"type": "integer"}}]}  # fmt: skip
    if "list" in verbs:
        collection["get"] = {"operationId": "listPets", "parameters": list_params or [],
                             "responses": ok({"type": "array", "items": PET})}  # fmt: skip
    if "create" in verbs:
        collection["post"] = {"operationId": "createPet", "requestBody": body(PET), "responses": ok(PET, "201")}
    if "read" in verbs:
        item["get"] = {"operationId": "getPet", "responses": ok(PET)}
    if "replace" in verbs:
        item["put"] = {"operationId": "replacePet", "requestBody": body(PET), "responses": ok(PET)}
    if "update" in verbs:
        item["patch"] = {"operationId": "updatePet", "requestBody": body(PET), "responses": ok(PET)}
    if "delete" in verbs:
        item["delete"] = {"operationId": "deletePet", "responses": {"204": {"description": "gone"}}}
    return {
        "openapi": version,
        "info": {"title": "Pets", "version": "1"},
        "paths": {"/pets": collection, "/pets/{petId}": item},
        "components": {"schemas": {"Pet": pet}},
    }


def env_of(tmp_path: Path, document: dict[str, Any]) -> SynthEnv:
    path = tmp_path / f"api-{len(list(tmp_path.iterdir()))}.json"
    path.write_text(json.dumps(document))

    class Pets(SynthEnv):
        name = "synth-pets-attacks"
        description = "a pet store"
        spec_path = path

    return Pets()


def store_of(document: dict[str, Any], records: dict[str, list[dict[str, Any]]] | None = None) -> Store:
    found = catalog(load_spec(document))
    return Store(found, records if records is not None else records_for(found, "attack"))


def play(env: SynthEnv, task: Task, messages: list[Message]) -> tuple[Score, list[str]]:
    """The episode's score and every tool reply."""
    env.reset(task, seed=0)
    replies: list[str] = []
    result = None
    for message in messages:
        result = env.step(message)
        replies += [m.content for m in result.observation.messages if m.role == "tool"]
        if result.done:
            break
    assert result is not None and result.score is not None
    return result.score, replies


def oracle_everywhere(env: SynthEnv, n: int = 30) -> list[tuple[str, Score, list[str]]]:
    """The reference solution of the first ``n`` train tasks: (kind, score, tool replies)."""
    source = env.task_source("train")
    out = []
    for i in range(n):
        task = source.get(i)
        score, replies = play(env, task, env.reference_actions(task))
        out.append((task.info["goal"]["kind"], score, replies))
    return out


def assert_all_solved(results: list[tuple[str, Score, list[str]]]) -> None:
    wrong = [(kind, s.status, s.reason[:160]) for kind, s, _ in results if s.status != Status.CORRECT]
    assert not wrong, wrong
    errors = [r for _, _, replies in results for r in replies if r.startswith("Error")]
    assert not errors, errors[:3]


# ---- a hostile policy ------------------------------------------------------------------------------


def test_a_create_that_writes_a_whole_number_as_a_float_makes_the_same_record():
    """JSON has one number: the service takes ``45.0`` for an integer (jsonschema does), so the
    record is the one asked for; comparing added records as JSON text called it wrong."""
    env = Shop()
    source = env.task_source("train")
    task = next(t for t in (source.get(i) for i in range(80)) if t.info["goal"]["calls"][-1][0] == "createProduct")
    op, args = task.info["goal"]["calls"][-1]
    floats = {**args["body"], "stock": float(args["body"]["stock"])}
    score, replies = play(env, task, [Message("assistant", "", [ToolCall(op, {"body": floats}, id="c")]),
                                      Message("assistant", "Done.")])  # fmt: skip
    assert json.loads(replies[0])["status"] == 201
    assert score.status == Status.CORRECT, score.reason


def test_a_true_is_not_a_one_when_records_are_compared():
    found = catalog(load_spec(pets({"flag": {}})))  # a property of any type
    rows = {"pets": [{"id": 1, "name": "Rex", "flag": 1}]}
    goal = Goal("delete", "", ())
    changed = copy.deepcopy(rows["pets"])
    changed[0]["flag"] = True
    as_tables = {"pets": {1: rows["pets"][0]}}
    score = grade(found, as_tables, {"pets": {1: changed[0]}}, as_tables, goal, "Done.")
    assert score.status == Status.WRONG


def test_a_body_nested_too_deep_or_too_large_or_not_finite_is_refused_and_the_episode_still_graded(tmp_path):
    """A free-form object property (``metadata``) let a body nested 600 deep into the store; the
    copy at grading then raised RecursionError and the episode became an infra error."""
    document = pets({"meta": {"type": "object"}, "weight": {"type": "number"}})
    document["components"]["schemas"]["Pet"]["required"] = ["name"]  # no readOnly id asked of a create (see below)
    env = env_of(tmp_path, document)
    task = env.task_source("train").get(0)
    deep: dict[str, Any] = {}
    node = deep
    for _ in range(600):
        node["a"] = {}
        node = node["a"]
    calls = [
        ToolCall("createPet", {"body": {"name": "Bo", "meta": {"a": {"b": [1, 2]}}, "weight": 4.5}}, id="fine"),
        ToolCall("createPet", {"body": {"name": "Bo", "meta": deep}}, id="deep"),
        ToolCall("createPet", {"body": {"name": "Bo", "meta": {"x": list(range(20_000))}}}, id="wide"),
        ToolCall("createPet", {"body": {"name": "Bo", "weight": float("nan")}}, id="nan"),
        ToolCall("createPet", {"body": {"name": "Bo", "weight": float("inf")}}, id="inf"),
    ]
    score, replies = play(env, task, [Message("assistant", "", calls), Message("assistant", "Done.")])
    assert [r if r.startswith("Error") else json.loads(r)["status"] for r in replies] == [201, 400, 400, 400, 400]
    assert score.status != Status.INFRA_ERROR, score.reason


def test_a_query_filter_called_name_reaches_the_service(tmp_path):
    """The tool function took the operation as a keyword ``name``: a filter by name (the most
    common one) failed with 'got multiple values for argument'."""
    by_name = [{"name": "name", "in": "query", "schema": {"type": "string"}}]
    env = env_of(tmp_path, pets(list_params=by_name))
    source = env.task_source("train")
    calls = [call for i in range(20) for call in source.get(i).info["goal"]["calls"]]
    assert ["listPets", "name"] in [[op, *args] for op, args in calls]  # the oracle filters by name
    assert_all_solved(oracle_everywhere(env, 20))


def test_a_deleted_records_id_is_never_given_again_so_delete_and_make_anew_is_no_update():
    found = catalog(load_spec(SHOP))
    records = records_for(found, "ids")
    goal = Goal("update", "", (("updateProduct", {"productId": 8, "body": {"price": 1.5}}),))
    expected = expected_state(found, records, goal)
    store = Store(found, records)
    initial = store.snapshot()
    old = {k: v for k, v in store.call("getProduct", {"productId": 8}).body.items() if k != "id"}
    assert store.call("deleteProduct", {"productId": 8}).status == 204
    made = store.call("createProduct", {"body": {**old, "price": 1.5}})
    assert made.status == 201 and made.body["id"] == 9  # 8 was given once
    score = grade(found, initial, store.snapshot(), expected, goal, "Done.")
    assert score.status == Status.WRONG and "removed" in score.reason


def test_a_body_cannot_move_a_record_to_another_id():
    document = pets(verbs=("list", "create", "read", "replace", "update", "delete"))
    document["components"]["schemas"]["Pet"]["properties"]["id"] = {"type": "integer"}  # not marked readOnly
    store = store_of(document)
    for op in ("replacePet", "updatePet"):
        reply = store.call(op, {"petId": 1, "body": {"id": 77, "name": "Zed"}})
        assert (reply.status, reply.body["id"]) == (200, 1)
        assert store.call("getPet", {"petId": 1}).body["name"] == "Zed"
        assert store.call("getPet", {"petId": 77}).status == 404


def test_a_required_read_only_id_is_asked_of_responses_only(tmp_path):
    """The petstore shape: one ``Pet`` schema, ``id`` readOnly and required. A create without
    the id was refused, and the oracle's PUT (which leaves readOnly fields out) crashed reset."""
    document = pets(verbs=("list", "create", "read", "replace", "delete"))
    made = store_of(document).call("createPet", {"body": {"name": "Rex", "kind": "dog"}})
    assert made.status == 201 and made.body["id"] == 9
    env = env_of(tmp_path, document)
    assert_all_solved(oracle_everywhere(env))
    prompts = [env.task_source("train").get(i).prompt for i in range(30)]
    assert not [p for p in prompts if "id: " in p]  # a task never asks for a value the service assigns


def test_a_task_never_asks_to_change_what_the_service_keeps(tmp_path):
    """A readOnly field in the update body: the service keeps its value, so the oracle's change
    changed nothing and 'Done.' without a call earned the reward."""
    document = pets({"born": {"type": "string", "format": "date", "readOnly": True}}, verbs=("list", "update"))
    patch = {"name": {"type": "string"}, "kind": {"enum": ["cat", "dog"]}, "born": {"type": "string", "readOnly": True}}
    document["paths"]["/pets/{petId}"]["patch"]["requestBody"] = body({"type": "object", "properties": patch})
    env = env_of(tmp_path, document)
    source = env.task_source("train")
    updates = [t for t in (source.get(i) for i in range(30)) if t.info["goal"]["kind"] == "update"]
    assert updates and not [t.prompt for t in updates if "born" in t.prompt]
    for task in updates:
        assert play(env, task, [Message("assistant", "Done.")])[0].status == Status.WRONG


def test_a_goal_the_service_refuses_is_not_drawn(tmp_path):
    """PATCH with the whole ``Pet`` schema (``name`` required): the oracle's one-field PATCH is
    refused, which raised AssertionError in reset."""
    env = env_of(tmp_path, pets(verbs=("list", "update", "delete")))
    assert_all_solved(oracle_everywhere(env, 20))


def test_a_string_path_parameter_finds_records_whose_ids_are_numbers(tmp_path):
    """Every id is text in a URL; many documents declare ``{petId}`` a string while the record's
    id is an integer. The oracle's delete was refused, which crashed reset."""
    document = pets(verbs=("list", "read", "delete"), id_schema={"type": "string"})
    assert store_of(document).call("getPet", {"petId": "3"}).body["id"] == 3
    assert_all_solved(oracle_everywhere(env_of(tmp_path, document)))


def test_list_values_are_made_asked_for_and_answered_as_json(tmp_path):
    """An array property made the task source raise (a set of lists) and the oracle's own
    answer for a list (Python's repr) wrong."""
    tags = {"tags": {"type": "array", "items": {"type": "string"}, "minItems": 1}}
    env = env_of(tmp_path, pets(tags, verbs=("list", "create", "read")))
    results = oracle_everywhere(env, 40)
    assert_all_solved(results)
    assert _same_answer('["Amber tea",  "Keen pear"]', ["Amber tea", "Keen pear"])
    assert _same_answer("null", None) and not _same_answer("None", None)
    assert not _same_answer('["Keen pear", "Amber tea"]', ["Amber tea", "Keen pear"])


def test_answers_are_compared_under_the_same_normalisation_on_both_sides():
    """NFKC was applied to the answer only: a value holding 'µ' (micro sign) or '²' could not be
    answered right, whatever the model wrote."""
    assert _same_answer("µg", "µg") and _same_answer("m²", "m²") and _same_answer("Ⅳ", "Ⅳ")
    assert not _same_answer("Lisbоn", "Lisbon")  # a Cyrillic о is another letter


def test_a_long_enum_is_checked_by_the_service_but_not_put_in_the_tools(tmp_path):
    colours = {"colour": {"type": "string", "enum": [f"shade-{i}" for i in range(5000)]}}
    env = env_of(tmp_path, pets(colours))
    task = env.task_source("train").get(0)
    env.reset(task, seed=0)
    assert "shade-4999" not in json.dumps([t.parameters for t in env.tools()])
    refused = env.store.call("createPet", {"body": {"name": "Bo", "colour": "plaid"}})
    assert refused.status == 400 and "is not one of" in refused.body["error"]


def test_records_that_fit_only_some_draws_never_break_the_task_source(tmp_path):
    """``multipleOf``: seed 0 (checked by `ludus synth`) fitted, task 20's draw did not and
    raised DataError out of the task source in the middle of training."""
    document = pets({"age": {"type": "integer", "minimum": 0, "maximum": 100, "multipleOf": 10}}, ("name", "age"))
    env = env_of(tmp_path, document)
    source = env.task_source("train")
    tasks = [source.get(i) for i in range(40)]
    ages = {r["age"] for t in tasks[:5] for r in records_for(env.catalog, t.info["data_seed"])["pets"]}
    assert all(a % 10 == 0 for a in ages)


def test_a_page_far_past_the_end_is_empty_not_the_first():
    store = Store(catalog(load_spec(SHOP)), {})
    for i in range(3):
        store.call("createProduct", {"body": {"name": f"P{i}", "category": "dairy", "price": 1.0, "stock": 1}})
    page = store.call("listProducts", {"offset": 10**18})
    assert (page.status, page.body["items"], page.body["total"]) == (200, [], 3)


# ---- a hostile or broken document ------------------------------------------------------------------


def small(title: str) -> dict[str, Any]:
    document = pets(verbs=("list", "create", "read", "delete"))
    document["info"]["title"] = title
    return document


@pytest.mark.parametrize(
    "title",
    [
        'Pets"""\nimport os; os.system("echo pwned")\n"""',  # out of the docstring: code run on import
        'Pets"\n[tool.setuptools.cmdclass]\nbuild_py = "evil:Build"\n[x]\ny = "',  # out of a TOML string
        'The "Best" Pets',  # an ordinary title with quotes made the pyproject unreadable
        "C:\\Pets \\N",  # a backslash escape: a docstring that does not compile
    ],
    ids=["docstring-code", "toml-table", "quotes", "backslashes"],
)
def test_a_title_cannot_put_code_or_settings_into_the_package(tmp_path, title):
    spec = tmp_path / "api.json"
    spec.write_text(json.dumps(small(title)))
    made = synthesize(spec, tmp_path / "out", name="pets")
    source = (made.folder / made.module / "__init__.py").read_text(encoding="utf-8")
    tree = ast.parse(source)
    assert [type(n).__name__ for n in tree.body] == ["Expr", "ImportFrom", "ImportFrom", "ClassDef"]
    assert isinstance(tree.body[0].value, ast.Constant) and "Pets" in tree.body[0].value.value
    assert all(isinstance(n, ast.Assign) for n in tree.body[3].body)
    pyproject = tomllib.loads((made.folder / "pyproject.toml").read_text(encoding="utf-8"))
    assert set(pyproject) == {"build-system", "project", "tool"}
    assert set(pyproject["tool"]["setuptools"]) == {"packages", "package-data"}
    assert set(pyproject["project"]) == {"name", "version", "description", "dependencies", "entry-points"}
    assert "Pets" in pyproject["project"]["description"]
    assert pyproject["build-system"]["requires"] == ["setuptools>=61"]


def test_the_report_printed_and_written_holds_no_terminal_control_characters(tmp_path, capsys):
    spec = tmp_path / "api.json"
    document = small("Pets\x1b]0;owned\x07\x1b[2J")
    document["paths"]["/pets\x1b[31m/{id}/x"] = {"get": {"responses": ok({"type": "string"})}}
    spec.write_text(json.dumps(document))
    assert main(["synth", str(spec), "-o", str(tmp_path / "out"), "--name", "pets"]) == 0
    written = (tmp_path / "out" / "SYNTH.md").read_text(encoding="utf-8")
    printed = capsys.readouterr()
    refused = tmp_path / "refused.json"
    refused.write_text(
        json.dumps({**document, "paths": {"/x\x1b[2J/{id}/y": document["paths"]["/pets\x1b[31m/{id}/x"]}})
    )
    assert main(["synth", str(refused), "-o", str(tmp_path / "no"), "--name", "pets"]) == 2  # its error quotes the path
    refusal = capsys.readouterr()
    for text in (written, printed.out, printed.err, refusal.out, refusal.err):
        assert "\x1b" not in text and "\x07" not in text
    assert "Pets" in written and "no resource can be simulated" in refusal.err


def test_force_never_removes_a_folder_holding_more_than_a_package_synth_wrote(tmp_path):
    project = tmp_path / "project"
    (project / "src").mkdir(parents=True)
    (project / "pyproject.toml").write_text('[project]\nname = "mine"\n')
    (project / "SYNTH.md").write_text("my notes on synthesis")
    (project / "src" / "code.py").write_text("precious = True\n")
    assert main(["synth", str(SHOP), "-o", str(project), "--force"]) == 2
    assert (project / "src" / "code.py").read_text() == "precious = True\n"
    made = tmp_path / "made"
    assert main(["synth", str(SHOP), "-o", str(made)]) == 0
    (made / ".git").mkdir()  # the user made it theirs
    assert main(["synth", str(SHOP), "-o", str(made), "--force"]) == 2 and (made / ".git").is_dir()


def test_force_with_the_document_inside_the_package_it_replaces(tmp_path):
    out = tmp_path / "pkg"
    assert main(["synth", str(SHOP), "-o", str(out)]) == 0
    inside = out / "ludus_synth_corner_shop" / "api.yaml"
    assert main(["synth", str(inside), "-o", str(out), "--force"]) == 0
    assert inside.read_bytes() == SHOP.read_bytes()


def test_an_output_path_that_is_a_file_is_refused(tmp_path):
    (tmp_path / "taken").write_text("x")
    assert main(["synth", str(SHOP), "-o", str(tmp_path / "taken")]) == 2


def test_a_long_title_starting_with_a_digit_still_names_the_environment(tmp_path):
    spec = tmp_path / "api.json"
    spec.write_text(json.dumps(small("2024 " + "Pets and their owners and their vets " * 2)))
    made = synthesize(spec, tmp_path / "out")
    assert made.env_name.startswith("api-2024-") and len(made.env_name) <= 41


@pytest.mark.parametrize(
    "text",
    [
        "openapi: 3.1.0\ninfo: {title: x}\nx: " + "[" * 5000 + "]" * 5000 + "\n",
        '{"openapi": "3.1.0", "info": {"title": "x"}, "x": ' + "[" * 100_000 + "]" * 100_000 + "}",
    ],
    ids=["yaml", "json"],
)
def test_a_document_nested_too_deep_is_a_spec_error_not_a_recursion_error(text):
    with pytest.raises(SpecError, match="nests"):
        load_spec(text)


def test_a_long_chain_of_references_is_skipped_with_its_reason():
    document = pets()
    schemas = document["components"]["schemas"]
    for i in range(400):
        schemas[f"S{i}"] = {"type": "object", "properties": {"a": {"$ref": f"#/components/schemas/S{i + 1}"}}}
    schemas["S400"] = {"type": "string"}
    schemas["Pet"]["properties"]["chain"] = {"$ref": "#/components/schemas/S0"}
    spec = load_spec(document)
    assert [op.name for op in spec.operations] == ["deletePet"]  # the one operation without a Pet
    assert len(spec.skipped) == 3 and all("nest more than" in s.why for s in spec.skipped)


def test_references_that_multiply_are_cut_not_expanded():
    """Eight references to the next schema, five deep: 8**5 copies once inlined (40 deep would
    never finish), the billion laughs of $ref."""
    document = pets()
    schemas = document["components"]["schemas"]
    for i in range(5):
        schemas[f"S{i}"] = {"type": "object",
                            "properties": {f"p{k}": {"$ref": f"#/components/schemas/S{i + 1}"} for k in range(8)}}  # fmt: skip
    schemas["S5"] = {"type": "string"}
    schemas["Pet"]["properties"]["tree"] = {"$ref": "#/components/schemas/S0"}
    spec = load_spec(document)
    assert [op.name for op in spec.operations] == ["deletePet"]  # the one operation without a Pet
    assert len(spec.skipped) == 3 and all("expand to more than" in s.why for s in spec.skipped)


def test_openapi_30_boolean_exclusive_bounds_mean_what_30_says():
    """3.0's ``exclusiveMinimum: true`` was handed to a 2020-12 validator, where ``True`` is 1:
    a weight of 0.5 above a minimum of 0 was refused."""
    weight = {"weight": {"type": "number", "minimum": 0, "exclusiveMinimum": True, "maximum": 1}}
    store = store_of(pets(weight, version="3.0.3"), {})
    assert store.call("createPet", {"body": {"name": "a", "weight": 0.5}}).status == 201
    assert store.call("createPet", {"body": {"name": "a", "weight": 0}}).status == 400


def test_a_pattern_that_backtracks_exponentially_is_not_run():
    """``^(a+)+$`` on forty a's and a '!' never ends in Python's re: a policy could hang the
    worker with one create."""
    code = {"code": {"type": "string", "pattern": "^(a+)+$"}, "sku": {"type": "string", "pattern": "^[A-Z]{3}$"}}
    spec = load_spec(pets(code))
    assert any("'^(a+)+$' is not checked" in n.why for n in spec.notes)  # first: today's code would hang below
    assert "(a+)+" not in json.dumps([[op.body, op.responses] for op in spec.operations])
    store = Store(catalog(spec), {})
    assert store.call("createPet", {"body": {"name": "a", "code": "a" * 40 + "!"}}).status == 201
    assert store.call("createPet", {"body": {"name": "a", "sku": "abc"}}).status == 400  # a safe pattern still is
    assert "at most" in store.call("createPet", {"body": {"name": "a", "sku": "A" * 5000}}).body["error"]


def test_references_under_every_schema_keyword_are_inlined():
    """``if``/``then``, ``dependentSchemas``…: a $ref under a keyword the reader did not know was
    left to jsonschema, which cannot resolve ``#/components/…`` in an inlined schema and raised
    out of the service (and out of `ludus synth`) instead of answering."""
    adult = {"type": "object", "required": ["name"], "properties": {"age": {"minimum": 18}}}
    props = {"age": {"type": "integer"}, "licence": {"type": "string"}}
    document = pets(props)
    document["components"]["schemas"]["Adult"] = adult
    document["components"]["schemas"]["Pet"]["dependentSchemas"] = {"licence": {"$ref": "#/components/schemas/Adult"}}
    document["components"]["schemas"]["Pet"]["if"] = {"$ref": "#/components/schemas/Adult"}
    assert "$ref" not in json.dumps([op.body for op in load_spec(document).operations])
    store = store_of(document, {})
    assert store.call("createPet", {"body": {"name": "Bo", "age": 20, "licence": "L-1"}}).status == 201
    assert "minimum" in store.call("createPet", {"body": {"name": "Bo", "age": 9, "licence": "L-2"}}).body["error"]


@pytest.mark.parametrize(
    ("props", "exit_code"),
    [
        ({"kind": {"type": "string", "enum": {"a": 1}}}, 2),
        ({"tags": {"type": "array", "minItems": "2", "items": {"type": "string"}}}, 2),
        ({"kind": {"type": 5}}, 2),
        ({"age": {"type": "integer", "maximum": 1e999}}, 2),
        ({"code": {"type": "string", "minLength": 10**9}}, 2),  # a 1 GB string per draw before
        ({"tags": {"type": "array", "minItems": 10**7, "maxItems": 10**7, "items": {"type": "string"}}}, 2),
        ({"code": {"type": "string", "pattern": "("}}, 0),  # not a regular expression: left out, noted
    ],
    ids=[
        "enum-mapping",
        "minItems-text",
        "type-number",
        "infinite-maximum",
        "huge-minLength",
        "huge-minItems",
        "bad-regex",
    ],
)
def test_schemas_of_the_wrong_shape_are_refused_with_a_message_not_a_traceback(tmp_path, capsys, props, exit_code):
    spec = tmp_path / "api.json"
    spec.write_text(json.dumps(pets(props, ("name", *props))))
    assert main(["synth", str(spec), "-o", str(tmp_path / "out"), "--name", "pets"]) == exit_code
    if exit_code:
        assert "error:" in capsys.readouterr().err and not (tmp_path / "out").exists()
    else:
        assert "is not checked: not a regular expression" in (tmp_path / "out" / "SYNTH.md").read_text()


# ---- guards: attacks that were refused already ------------------------------------------------------


@pytest.mark.parametrize(
    "reply",
    [
        "<answer>{n}</answer> <answer>{other}</answer>",  # two answers
        "<answer>{n} or {other}</answer>",  # hedged
        "<answer>three</answer>",
        "<аnswer>{other}</аnswer>",  # Cyrillic tags: no answer tag
    ],
    ids=["two-answers", "hedged", "in-words", "cyrillic-tags"],
)
def test_hedged_or_disguised_count_answers_earn_nothing(reply):
    env = Shop()
    source = env.task_source("train")
    task = next(t for t in (source.get(i) for i in range(60)) if t.info["goal"]["kind"] == "count")
    n = task.info["goal"]["answer"]
    text = reply.format(n=n, other=n + 1)
    assert play(env, task, [Message("assistant", text)])[0].value == 0.0


def test_a_report_answered_by_changing_the_state_and_tools_after_the_end_earn_nothing():
    env = Shop()
    source = env.task_source("train")
    task = next(t for t in (source.get(i) for i in range(60)) if t.info["goal"]["kind"] == "count")
    env.reset(task, seed=0)
    victim = next(iter(env.initial["products"]))
    env.step(Message("assistant", "", [ToolCall("deleteProduct", {"productId": victim}, id="d")]))
    result = env.step(Message("assistant", f"<answer>{task.info['goal']['answer']}</answer>"))
    assert result.done and result.score.status == Status.WRONG
    with pytest.raises(EnvStateError):
        env.step(Message("assistant", "", [ToolCall("deleteProduct", {"productId": victim}, id="again")]))


def test_a_number_answer_is_compared_exactly_not_as_a_float():
    """Found in session 26's MCP red team (the comparison is shared): floats made 2**53 + 1 equal 2**53."""
    from ludus.envs.synth.tasks import _same_answer

    assert _same_answer("9007199254740993", 9007199254740993) and not _same_answer("9007199254740993", 2**53)
    assert all(_same_answer(text, 3) for text in ("3", "3.0", "+3", "3e0", "03", "３"))
    assert not any(_same_answer(text, 3) for text in ("three", "3 or 4", "1_000", "nan", "3e99999"))
    assert _same_answer("0.1", 0.1) and _same_answer("4.50", 4.5) and not _same_answer("nan", float("nan"))
