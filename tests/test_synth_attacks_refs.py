"""Red team of `ludus synth`'s references into other files (issue 36): a document folder from the
internet whose `$ref`s try to read what lies outside it (and so carry it into the package the user
then shares), to hang or crash the reading, or to make a package that cannot be read back. Each
test asserts the safe behaviour; every file it makes is in tmp_path."""

from __future__ import annotations

import json
import os
import socket
import stat
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
import yaml

import ludus.envs.synth.spec as spec_module
from ludus.envs.synth.package import synthesize
from ludus.envs.synth.spec import BUNDLED, MAX_NESTING, MAX_REF_DEPTH, MAX_REFUSED, REFUSED, load_spec

MARKER = "MARKER-OUTSIDE-7f3a"  # in every file a reference must not bring into the package


def doc(paths: dict[str, Any], schemas: dict[str, Any] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"openapi": "3.1.0", "info": {"title": "T", "version": "1"}, "paths": paths}
    if schemas:
        out["components"] = {"schemas": schemas}
    return out


def ok(schema: dict[str, Any]) -> dict[str, Any]:
    return {"200": {"description": "ok", "content": {"application/json": {"schema": schema}}}}


def listing(schema: dict[str, Any], name: str) -> dict[str, Any]:
    return {"get": {"operationId": name, "responses": ok({"type": "array", "items": schema})}}


def write(folder: Path, name: str, document: Any) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        json.dumps(document)
        if name.endswith(".json")
        else yaml.safe_dump(json.loads(json.dumps(document)), sort_keys=False)
    )
    return path


def secret(folder: Path, name: str) -> Path:
    """A file a reference must not read: a schema (it would parse) holding the marker."""
    return write(folder, name, {"Pet": {"type": "object", "description": MARKER}})


def reasons(folder: Path, refs: dict[str, str]) -> tuple[Any, dict[str, str]]:
    """The document in ``folder`` with one operation per reference; what became of each."""
    write(folder, "api.yaml", doc({f"/{name}": listing({"$ref": ref}, name) for name, ref in refs.items()}))
    spec = load_spec(folder / "api.yaml")
    kept = {op.name for op in spec.operations}
    why = {s.where.removeprefix("GET /"): s.why for s in spec.skipped}
    return spec, {name: "kept" if name in kept else why[name] for name in refs}


def test_a_path_out_of_the_folder_is_refused_however_it_is_spelled(tmp_path):
    folder = tmp_path / "api"
    folder.mkdir()
    secret(tmp_path, "secret.yaml")
    (folder / "up").symlink_to(tmp_path, target_is_directory=True)  # a subfolder that is a link out
    (folder / "link.yaml").symlink_to(tmp_path / "secret.yaml")
    refs = {
        "parent": "../secret.yaml#/Pet",
        "encoded_slash": "..%2Fsecret.yaml#/Pet",
        "encoded_dots": "%2e%2e/secret.yaml#/Pet",
        "all_encoded": "%2E%2E%2Fsecret.yaml#/Pet",
        "backslash": "..\\secret.yaml#/Pet",  # on POSIX a name in the folder, and a hidden one
        "encoded_backslash": "..%5Csecret.yaml#/Pet",
        "double_slash": f"/{tmp_path}/secret.yaml#/Pet",
        "encoded_absolute": "%2F" + str(tmp_path / "secret.yaml").lstrip("/").replace("/", "%2F"),
        "windows_drive": "C:\\Users\\me\\secret.yaml#/Pet",
        "unc": "\\\\server\\share\\secret.yaml",
        "tilde": "~/secret.yaml#/Pet",
        "unicode_dots": "\u2024\u2024/secret.yaml#/Pet",  # one-dot leaders: a name, not '..'
        "fullwidth_slash": "..\uff0fsecret.yaml#/Pet",
        "nul": "secret.yaml%00.yaml#/Pet",
        "raw_nul": "a\x00b.yaml#/Pet",
        "long_name": "a" * 300 + ".yaml#/Pet",  # one name past the file system's 255: was an OSError
        "deep_path": "x/" * 3000 + "secret.yaml#/Pet",  # was an OSError too (the whole path too long)
        "linked_folder": "up/secret.yaml#/Pet",
        "linked_file": "link.yaml#/Pet",
        "through_link_back": "up/api/link.yaml#/Pet",
        "file_url": f"file://{tmp_path}/secret.yaml",
        "data_url": "data:application/json,%7B%7D",
        "https": "https://example.com/secret.yaml#/Pet",
    }
    spec, why = reasons(folder, refs)
    assert spec.files == () and spec.operations == []
    assert MARKER not in spec.bundled().decode()
    expected = {"parent": "out of the document's folder", "encoded_slash": "out of", "encoded_dots": "out of",
                "all_encoded": "out of", "backslash": "hidden", "encoded_backslash": "hidden",
                "double_slash": "absolute path", "encoded_absolute": "absolute path", "windows_drive": "URL",
                "unc": "absolute path", "tilde": "no file there", "unicode_dots": "no file there",
                "fullwidth_slash": "hidden", "nul": "can be opened", "raw_nul": "can be opened",
                "long_name": "can be opened", "deep_path": "folders deep", "linked_folder": "out of",
                "linked_file": "out of", "through_link_back": "out of", "file_url": "URL", "data_url": "URL",
                "https": "URL"}  # fmt: skip
    for name, reason in expected.items():
        assert reason in why[name], (name, why[name])


def test_only_regular_json_and_yaml_files_that_are_not_hidden_are_read(tmp_path):
    """Any text is YAML (a plain scalar), so a key, a .env or a note would parse: a file must be
    named .json/.yaml/.yml, not hidden, and hold a mapping or a list. A FIFO or a socket is not
    opened for reading (a FIFO would block), a device or /proc behind a link is out of the folder."""
    folder = tmp_path / "api"
    folder.mkdir()
    (folder / "id_rsa").write_text(
        f"-----BEGIN OPENSSH PRIVATE KEY-----\n{MARKER}\n-----END OPENSSH PRIVATE KEY-----\n"
    )
    (folder / "notes.txt").write_text(f"Pet: {MARKER}\n")
    (folder / ".env").write_text(f"TOKEN={MARKER}\n")
    secret(folder, ".config/gh/hosts.yml")
    secret(folder, ".hidden.yaml")
    (folder / "plain.yaml").write_text(f"just a note {MARKER}\n")  # YAML: one string
    (folder / "folder.yaml").mkdir()
    os.mkfifo(folder / "fifo.yaml")
    server = socket.socket(socket.AF_UNIX)
    try:
        server.bind(str(folder / "sock.yaml"))
    except OSError:  # a path too long for a socket: the rest still holds
        (folder / "sock.yaml").mkdir()
    (folder / "zero.yaml").symlink_to("/dev/zero")
    try:  # a device in the folder (an archive unpacked as root can make one): never opened
        os.mknod(folder / "null.yaml", 0o600 | stat.S_IFCHR, os.makedev(1, 3))
    except (OSError, AttributeError):
        (folder / "null.yaml").mkdir()
    (folder / "environ.yaml").symlink_to("/proc/self/environ")
    refs = {"key": "id_rsa", "text": "notes.txt", "env": ".env", "hosts": ".config/gh/hosts.yml#/Pet",
            "hidden": ".hidden.yaml#/Pet", "plain": "plain.yaml", "folder": "folder.yaml", "fifo": "fifo.yaml",
            "sock": "sock.yaml", "zero": "zero.yaml", "environ": "environ.yaml", "null": "null.yaml",
            "proc": "/proc/self/environ",
            "stdin": "/dev/stdin"}  # fmt: skip
    started = time.monotonic()
    try:
        spec, why = reasons(folder, refs)
    finally:
        server.close()
    assert time.monotonic() - started < 30  # the FIFO was not read (nobody writes to it: it would block)
    assert spec.files == () and spec.operations == [] and MARKER not in spec.bundled().decode()
    expected = {"key": "does not end in .json, .yaml, .yml", "text": "does not end in", "env": "hidden",
                "hosts": "hidden", "hidden": "hidden", "plain": "holds no mapping or list (a str)",
                "folder": "no file there", "fifo": "no regular file", "sock": "no regular file", "zero": "out of",
                "environ": "out of", "proc": "absolute path", "stdin": "absolute path"}  # fmt: skip
    expected["null"] = "no file there" if (folder / "null.yaml").is_dir() else "no regular file"
    if (folder / "sock.yaml").is_dir():
        expected["sock"] = "no file there"
    for name, reason in expected.items():
        assert reason in why[name], (name, why[name])


def test_a_package_carries_no_byte_of_a_file_outside_the_folder_nor_where_the_folder_is(tmp_path):
    source = tmp_path / "download"
    secret(tmp_path, "secret.yaml")
    secret(source, ".ssh/config.yaml")
    (source / "up").mkdir(parents=True)
    (source / "up" / "home").symlink_to(tmp_path, target_is_directory=True)
    (source / "broken.yaml").write_text("Pet: {type: object\n")  # its refusal used to quote the absolute path
    pet_schema = {"type": "object", "required": ["id", "name"],
                  "properties": {"id": {"type": "integer", "readOnly": True}, "name": {"type": "string"}}}  # fmt: skip
    write(source, "schemas/pet.yaml", {"Pet": pet_schema, "Owner": {"$ref": "../../secret.yaml#/Pet"},
                                       "Kin": {"$ref": "../up/home/secret.yaml#/Pet"}})  # fmt: skip
    pet = {"$ref": "schemas/pet.yaml#/Pet"}
    write(source, "api.yaml", doc(
        {"/pets": {"get": {"operationId": "listPets", "responses": ok({"type": "array", "items": pet})},
                   "post": {"operationId": "createPet", "responses": ok(pet), "requestBody": {
                       "required": True, "content": {"application/json": {"schema": pet}}}}}},
        {"Ssh": {"$ref": ".ssh/config.yaml#/Pet"}, "Broken": {"$ref": "broken.yaml#/Pet"},
         "Abs": {"$ref": "/etc/ludus-absent/secret.yaml#/Pet"}, "Up": {"$ref": "../secret.yaml"}}))  # fmt: skip
    made = synthesize(source / "api.yaml", tmp_path / "pkg", name="pets")
    written = [p for p in (tmp_path / "pkg").rglob("*") if p.is_file()]
    assert len(written) == 4  # api.json, __init__.py, pyproject.toml, SYNTH.md
    for path in written:
        data = path.read_bytes()
        assert MARKER.encode() not in data and str(tmp_path).encode() not in data, path
    document = json.loads((tmp_path / "pkg" / "ludus_synth_pets" / "api.json").read_text())
    assert list(document[BUNDLED]) == ["schemas/pet.yaml"]
    assert any("broken.yaml is neither JSON nor YAML" in r for r in document[REFUSED])
    report = (tmp_path / "pkg" / "SYNTH.md").read_text()
    assert "- schemas/pet.yaml: read from the document's folder: bundled whole" in report  # the user sees it
    assert [n.where for n in made.catalog.notes if "bundled whole" in n.why] == ["schemas/pet.yaml"]


def test_references_within_examples_defaults_and_enums_are_data_never_followed(tmp_path):
    write(tmp_path, "data.yaml", {"P": {"type": "object", "description": MARKER}})
    write(tmp_path, "p.yaml", {"P": {"type": "object"}, "R": {"description": "r"}, "Ex": {"value": 1}})
    write(tmp_path, "names.yaml", {"default": {"$ref": "p.yaml#/P"}})  # a file's top: names (of schemas, say)
    literal = {"$ref": "data.yaml#/P"}
    schema = {"type": "object", "example": literal, "default": literal, "enum": [literal], "const": literal,
              "examples": [literal], "description": "$ref: data.yaml#/P",
              "properties": {"default": {"$ref": "p.yaml#/P"}, "example": {"$ref": "p.yaml#/P"},
                             "enum": {"$ref": "p.yaml#/P"}, "other": {"$ref": "names.yaml#/default"}}}  # fmt: skip
    media = {"schema": {"type": "array", "items": schema}, "example": literal,
             "examples": {"one": {"value": literal}, "two": {"$ref": "p.yaml#/Ex"}}}  # fmt: skip
    write(tmp_path, "api.yaml", doc({"/things": {"get": {"operationId": "listThings", "responses": {
        "200": {"description": "ok", "content": {"application/json": media}},
        "default": {"$ref": "p.yaml#/R"}}}}}))  # fmt: skip
    spec = load_spec(tmp_path / "api.yaml")
    assert sorted(spec.files) == ["names.yaml", "p.yaml"] and spec.skipped == []  # data.yaml is never read
    media = spec.document["paths"]["/things"]["get"]["responses"]["200"]["content"]["application/json"]
    items = media["schema"]["items"]
    for key in ("example", "default", "const"):
        assert items[key] == literal, key  # the data as written
    assert items["enum"] == [literal] and items["examples"] == [literal]
    assert media["example"] == literal and media["examples"]["one"]["value"] == literal
    assert media["examples"]["two"]["$ref"] == f"#/{BUNDLED}/p.yaml/Ex"  # an Example Object's $ref is one
    assert {p["$ref"] for p in items["properties"].values()} == {
        f"#/{BUNDLED}/p.yaml/P",
        f"#/{BUNDLED}/names.yaml/default",
    }
    assert spec.document[BUNDLED]["names.yaml"]["default"]["$ref"] == f"#/{BUNDLED}/p.yaml/P"  # names, not keywords
    assert spec.document["paths"]["/things"]["get"]["responses"]["default"]["$ref"] == f"#/{BUNDLED}/p.yaml/R"


def test_many_refused_references_and_long_paths_cost_little_time_and_space(tmp_path, monkeypatch):
    properties = {f"p{i}": {"$ref": f"missing{i}.yaml#/S"} for i in range(3 * MAX_REFUSED)}
    properties["long"] = {"$ref": "x/" * 300_000 + "a.yaml"}  # resolving it folder by folder took seconds
    write(tmp_path, "api.json", doc({"/things": listing({"type": "object", "properties": properties}, "things")}))
    started = time.monotonic()
    spec = load_spec(tmp_path / "api.json")
    assert time.monotonic() - started < 20
    refused = spec.document[REFUSED]
    assert len(refused) == MAX_REFUSED + 1 and f"more than {MAX_REFUSED} references were refused" in refused[-1]
    assert sum("names no file there" in r for r in refused) == MAX_REFUSED - 1
    monkeypatch.setattr(spec_module, "MAX_REF_NAMES", 3)  # each spelling of a file is resolved on disk: so many
    write(tmp_path, "s.yaml", {"S": {"type": "object"}})
    refs = {"a": "s.yaml#/S", "b": "./s.yaml#/S", "c": ".//s.yaml#/S", "d": "././s.yaml#/S", "e": "s.yaml#/S"}
    spec, why = reasons(tmp_path, refs)
    assert why["a"] == why["e"] == "kept"  # the same spelling: resolved once
    refused = [name for name, reason in why.items() if reason != "kept"]
    assert len(refused) == 1 and "one of more than 3 file names" in why[refused[0]]


def test_cycles_between_files_end_and_each_file_is_read_once(tmp_path):
    write(tmp_path, "a.yaml", {"X": {"$ref": "b.yaml#/X"}})
    write(tmp_path, "b.yaml", {"X": {"$ref": "sub/../a.yaml#/X"}})
    write(tmp_path, "self.yaml", {"X": {"type": "object", "properties": {"me": {"$ref": "./self.yaml#/X"}}}})
    write(tmp_path, "back.yaml", {"X": {"$ref": "api.yaml#/paths/~1back/get/responses/200/content/"
                                               "application~1json/schema/items"}})  # fmt: skip
    (tmp_path / "sub").mkdir()
    spec, why = reasons(tmp_path, {"cycle": "a.yaml#/X", "self": "self.yaml#/X", "back": "back.yaml#/X"})
    assert sorted(spec.files) == ["a.yaml", "b.yaml", "back.yaml", "self.yaml"]
    assert why == {"cycle": "kept", "self": "kept", "back": "kept"}  # cut as a recursive schema within one file is
    cut = {n.where: n.why for n in spec.notes if "recursive schema" in n.why}
    after = f"is cut after {MAX_REF_DEPTH} levels (deeper: any object)"
    assert cut == {
        f"GET /{name} response 200": f"the recursive schema {ref} {after}"
        for name, ref in (("cycle", "a.yaml#/X"), ("self", "self.yaml#/X"), ("back", "back.yaml#/X"))
    }


def test_a_referenced_file_nesting_deep_is_refused_so_the_package_reads_back(tmp_path):
    """The files are bundled two levels down: one nesting up to the limit would make a bundled
    document the package cannot read back."""

    def nested(depth: int) -> dict[str, Any]:
        top: dict[str, Any] = {"type": "object"}
        for _ in range(depth - 2):
            top = {"a": top}
        return {"X": top}

    assert spec_module._nesting(nested(MAX_NESTING)) == MAX_NESTING
    write(tmp_path, "deep.json", nested(MAX_NESTING))
    write(tmp_path, "fits.json", nested(MAX_NESTING - 2))
    spec, why = reasons(tmp_path, {"deep": "deep.json#/X", "fits": "fits.json#/X"})
    assert f"nesting more than {MAX_NESTING - 2} deep" in why["deep"] and spec.files == ("fits.json",)
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "api.json").write_bytes(spec.bundled())
    assert load_spec(tmp_path / "out" / "api.json").title == "T"  # read back whole


def test_any_value_a_referenced_file_holds_bundles_and_reads_back(tmp_path):
    """A lone surrogate (JSON's \\ud800) and a YAML !!binary key used to crash writing the package."""
    (tmp_path / "s.json").write_text('{"X": {"type": "object", "description": "\\ud800"}}')
    (tmp_path / "b.yaml").write_text("X:\n  type: object\n  ? !!binary aGVsbG8=\n  : 1\n  x-set: !!set {a}\n")
    spec, why = reasons(tmp_path, {"surrogate": "s.json#/X", "binary": "b.yaml#/X"})
    assert sorted(spec.files) == ["b.yaml", "s.json"]
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "api.json").write_bytes(spec.bundled())
    again = load_spec(tmp_path / "out" / "api.json")
    assert again.document[BUNDLED]["s.json"]["X"]["description"] == "\ud800"
    assert again.document[BUNDLED]["b.yaml"]["X"]["aGVsbG8="] == 1


def test_json_pointers_escaped_percent_encoded_into_arrays_or_to_nothing(tmp_path):
    write(tmp_path, "p.json", {"a/b": {"type": "object"}, "t~n": {"type": "object"}, "sp ace": {"type": "object"},
                               "{id}": {"type": "object"},
                               "arr": [{"type": "object"}, {"type": "integer"}]})  # fmt: skip
    refs = {"slash": "p.json#/a~1b", "tilde": "p.json#/t~0n", "space": "p.json#/sp%20ace", "braces": "p.json#/%7Bid%7D",
            "index": "p.json#/arr/0", "past": "p.json#/arr/5", "negative": "p.json#/arr/-1",
            "superscript": "p.json#/arr/\u00b2", "arabic": "p.json#/arr/\u0661", "missing": "p.json#/nope",
            "anchor": "p.json#Pet"}  # fmt: skip
    spec, why = reasons(tmp_path, refs)  # "²".isdigit() but int("²") fails: it was a ValueError
    for name in ("slash", "tilde", "space", "braces", "index"):
        assert why[name] == "kept", (name, why[name])
    for name in ("past", "negative", "superscript", "arabic", "missing"):
        assert "points to nothing" in why[name], (name, why[name])
    assert "no JSON pointer" in why["anchor"]


def test_a_ref_that_is_no_string_or_sits_in_text_is_no_reference(tmp_path):
    secret(tmp_path, "sub/s.yaml")
    write(tmp_path, "sub/pet.yaml", {"Pet": {"type": "object"}})
    refs = {"number": 5, "list": ["sub/s.yaml#/Pet"], "null": None, "text": None, "real": "sub/pet.yaml#/Pet"}
    schemas = {name: {"$ref": ref} for name, ref in refs.items() if name != "text"}
    schemas["text"] = {"type": "object", "description": "$ref: sub/s.yaml#/Pet"}
    write(tmp_path, "api.yaml", doc({f"/{name}": listing(schema, name) for name, schema in schemas.items()}))
    spec = load_spec(tmp_path / "api.yaml")
    assert spec.files == ("sub/pet.yaml",) and MARKER not in spec.bundled().decode()
    assert sorted(op.name for op in spec.operations) == sorted(refs)  # no string: a keyword of no meaning here
    items = {op.name: op.responses["200"]["items"] for op in spec.operations}
    assert items["number"] == {"$ref": 5} and items["list"] == {"$ref": ["sub/s.yaml#/Pet"]}


def test_yaml_tricks_and_text_that_is_not_utf8_in_a_referenced_file_are_refused(tmp_path):
    (tmp_path / "python.yaml").write_text("Pet: !!python/object/apply:os.system ['echo PWNED']\n")
    (tmp_path / "alias.yaml").write_text("a: &a {type: object}\nPet: *a\n")
    (tmp_path / "latin1.yaml").write_bytes(b"Pet: {description: caf\xe9}\n")
    (tmp_path / "twice.yaml").write_text("Pet: {type: string}\nPet: {type: object}\n")  # the last one counts
    refs = {"python": "python.yaml#/Pet", "alias": "alias.yaml#/Pet", "latin1": "latin1.yaml#/Pet",
            "twice": "twice.yaml#/Pet"}  # fmt: skip
    spec, why = reasons(tmp_path, refs)
    assert "could not determine a constructor" in why["python"] and "python.yaml" in why["python"]
    assert "YAML alias" in why["alias"] and "latin1.yaml: not UTF-8 text" in why["latin1"]
    assert why["twice"] == "kept" and spec.files == ("twice.yaml",)
    assert all(str(tmp_path) not in r for r in spec.document[REFUSED])  # a path relative to the folder


@pytest.mark.skipif(not hasattr(os, "link"), reason="no hard links here")
def test_a_hard_link_is_the_file_itself_and_is_read_as_one(tmp_path):
    """Documented, not refused: a hard link is a name of a file like any other (no tool an archive
    is unpacked with makes one to a file outside it, and installers hard-link their files)."""
    write(tmp_path / "api", "pet.yaml", {"Pet": {"type": "object"}})
    os.link(tmp_path / "api" / "pet.yaml", tmp_path / "api" / "again.yaml")
    spec, why = reasons(tmp_path / "api", {"one": "pet.yaml#/Pet", "two": "again.yaml#/Pet"})
    assert why == {"one": "kept", "two": "kept"} and sorted(spec.files) == ["again.yaml", "pet.yaml"]


def test_at_most_max_files_are_read_and_a_file_name_stays_one_line_of_the_report(tmp_path, monkeypatch):
    monkeypatch.setattr(spec_module, "MAX_FILES", 2)
    for i in range(4):
        write(tmp_path, f"s{i}.yaml", {"S": {"type": "object"}})
    spec, why = reasons(tmp_path, {f"s{i}": f"s{i}.yaml#/S" for i in range(4)})
    assert len(spec.files) == 2 and sum("one file too many" in w for w in why.values()) == 2
    odd = 'a\n## Injected """\nimport os.yaml'  # a file name is the folder's author's to choose
    write(tmp_path / "odd", odd, {"S": {"type": "object"}})
    spec, why = reasons(tmp_path / "odd", {"odd": quote(odd) + "#/S"})
    assert why == {"odd": "kept"} and spec.files == (odd,)
    from ludus.envs.synth.package import printable

    assert "\n" not in printable(spec.notes[-1].where)  # SYNTH.md keeps it on its line, escaped
