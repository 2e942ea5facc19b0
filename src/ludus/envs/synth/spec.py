"""An OpenAPI 3.0/3.1 document read into the operations a tool environment can offer.

What the reading keeps is what a simulation can honour: JSON bodies and path and query
parameters, with every ``$ref`` resolved: local ones, and relative ones into other files in the
document's own folder (or below it), which are bundled into the document first (:func:`bundle`).
Everything else is listed in :attr:`Spec.skipped` with the reason (a cookie parameter, a body
that is not JSON, a reference to a URL or outside the folder), never dropped silently. A
document that is not an OpenAPI 3.x description at all raises :class:`SpecError` naming where
and why.
"""

from __future__ import annotations

import copy
import json
import os
import re
import re._constants as _sre
import re._parser as _sre_parser
import stat
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import yaml

METHODS = ("get", "put", "post", "delete", "patch")  # head, options and trace change nothing a task asks for
MAX_REF_DEPTH = 4  # a recursive schema is unrolled this deep, then any object
MAX_ENUM = 100  # a longer enum stays in the validation, not in the tool's description
MAX_DOCUMENT_BYTES = 20_000_000
MAX_NESTING = 100  # mappings and lists within each other in the document; deeper is refused, never a RecursionError
MAX_SCHEMA_DEPTH = 64  # schemas within each other once references are inlined
MAX_OPERATION_NODES = 20_000  # schema nodes one operation's inlined schemas may hold (references can multiply)
MAX_DOCUMENT_NODES = 5_000_000  # and the whole document's (a few seconds of work)
MAX_FILES = 100  # other files one document's references may bring in (their bytes count towards MAX_DOCUMENT_BYTES)
FILE_SUFFIXES = (".json", ".yaml", ".yml")  # what those files may be called
MAX_REF_PATH = 1024  # characters in a reference's file part; longer is refused unread (resolving one costs each folder)
MAX_REF_PARTS = 40  # and folders in it
MAX_REF_NAMES = 10_000  # different file parts one document's references may spell (each is resolved on disk)
MAX_REFUSED = 1_000  # reasons x-ludus-refused keeps; the references refused past them share one
BUNDLED = "x-ludus-files"  # where bundle() puts the other files' contents in the document, by relative path
REFUSED = "x-ludus-refused"  # and why each reference it could not follow was refused
UNTITLED = "Untitled"  # the title of a document whose info.title is empty
SCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")  # name -> schema
SCHEMA_VALUES = ("items", "additionalProperties", "not", "contains", "propertyNames", "if", "then", "else",
                 "unevaluatedProperties", "unevaluatedItems", "additionalItems", "contentSchema")  # fmt: skip
LITERALS = ("example", "default", "enum", "const")  # data: a $ref within is not followed
NAME_MAPS = (*SCHEMA_MAPS, "paths", "webhooks", "schemas", "responses", "parameters", "requestBodies", "headers",
             "securitySchemes", "links", "callbacks", "pathItems", "content", "encoding", "variables")  # fmt: skip
TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")  # what OpenAI-compatible servers accept


class SpecError(ValueError):
    """A document that is no OpenAPI 3.x description this reader can use; the message says
    where (a JSON pointer or a line) and what to do."""


@dataclass(frozen=True)
class Param:
    name: str
    location: str  # "path" or "query"
    schema: dict[str, Any]
    required: bool
    description: str = ""


@dataclass(frozen=True)
class Operation:
    """One HTTP operation. ``name`` is its tool's name: the ``operationId`` made safe, or the
    method and path for an operation without one. ``body`` is the JSON schema of its
    ``application/json`` request body; ``statuses`` the response codes the document declares."""

    name: str
    method: str
    path: str
    description: str
    params: tuple[Param, ...]
    body: dict[str, Any] | None
    body_required: bool
    statuses: tuple[str, ...]
    responses: dict[str, dict[str, Any] | None] = field(default_factory=dict)  # status -> JSON schema

    @property
    def label(self) -> str:
        return f"{self.method.upper()} {self.path}"


@dataclass(frozen=True)
class Skipped:
    where: str  # "POST /pets/{id}/photo", "GET /pets parameter X-Trace", ...
    why: str


@dataclass
class Spec:
    title: str
    version: str  # the API's own version (info.version)
    openapi: str  # the document's OpenAPI version
    operations: list[Operation]
    skipped: list[Skipped]
    notes: list[Skipped] = field(default_factory=list)  # kept, but changed: a recursive schema cut, an enum not shown
    files: tuple[str, ...] = ()  # other files the document's references brought in (relative to its folder)
    document: dict[str, Any] = field(default_factory=dict, repr=False)  # the document read, those files bundled in

    def bundled(self) -> bytes:
        """The document read, the other files it refers to bundled in, as JSON: what a package
        carries when its document refers to other files (it reads the same without them)."""
        try:
            return json.dumps(self.document, ensure_ascii=False, indent=1, default=str).encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate (JSON's "\ud800"): escaped, it reads back the same
            return json.dumps(self.document, indent=1, default=str).encode("ascii")

    def operation(self, name: str) -> Operation:
        for op in self.operations:
            if op.name == name:
                return op
        raise KeyError(name)


def load_spec(source: str | Path | dict[str, Any]) -> Spec:
    """Read an OpenAPI 3.0/3.1 document: a file (JSON or YAML), its text, or the parsed mapping.
    A file's references into other files of its folder are followed (:func:`bundle`)."""
    document = _parse(source) if not isinstance(source, dict) else source
    if _nesting(document) > MAX_NESTING:
        raise SpecError(f"the document nests mappings and lists more than {MAX_NESTING} deep; no API description does")
    if not isinstance(document, dict):
        raise SpecError(f"an OpenAPI document is a mapping at its top level, got {type(document).__name__}")
    version = document.get("openapi")
    if version is None and "swagger" in document:
        raise SpecError(
            f"this is a Swagger {document.get('swagger')} document: only OpenAPI 3.0 and 3.1 are read; convert it "
            "first (for example with swagger2openapi or the Swagger Editor's 'Convert to OpenAPI 3')"
        )
    if not isinstance(version, str) or not re.fullmatch(r"3\.[01]\.\d+(-rc\d+)?", version):
        raise SpecError(f"'openapi' must be a 3.0.x or 3.1.x version string, got {version!r}")
    info = document.get("info")
    if not isinstance(info, dict) or not isinstance(info.get("title"), str):
        raise SpecError("'info.title' is missing: an OpenAPI document names its API there")
    files: list[str] = []
    if not isinstance(source, dict):
        document, files = bundle(document, _file(source))
    paths = document.get("paths", {})
    if paths is None:  # `paths:` with nothing under it: a document of schemas only
        paths = {}
    if not isinstance(paths, dict):
        raise SpecError(f"'paths' must be a mapping of paths to operations, got {type(paths).__name__}")
    reader = _Reader(document)
    operations: list[Operation] = []
    for path, item in paths.items():
        if not isinstance(path, str) or not path.startswith("/"):
            reader.skip(f"path {path!r}", "a path must start with '/'")
            continue
        try:
            item = reader.resolve(item)
        except _Unresolvable as exc:
            reader.skip(f"path {path}", str(exc))
            continue
        if not isinstance(item, dict):
            reader.skip(f"path {path}", "its path item is not a mapping")
            continue
        shared = item.get("parameters", [])
        for method in METHODS:
            if method in item:
                op = reader.operation(path, method, item[method], shared)
                if op is not None:
                    operations.append(op)
        for other in sorted(set(item) - {*METHODS, "parameters", "summary", "description", "servers", "$ref"}):
            if other in ("head", "options", "trace"):
                reader.skip(f"{other.upper()} {path}", f"{other.upper()} changes nothing a task can ask for")
            elif not other.startswith("x-"):
                reader.skip(f"path {path} field {other!r}", "not a field of an OpenAPI path item")
    _name_operations(operations)
    for name in files:  # what the package will carry besides the document: the user sees it before sharing it
        reader.note(name, "read from the document's folder: bundled whole into the document written (api.json)")
    title = info["title"].strip()
    if not title:  # valid OpenAPI (generators leave it empty), but tasks name the API by it
        reader.note("info.title", f"empty: the API is called {UNTITLED!r}")
    return Spec(
        title=title or UNTITLED,
        version=str(info.get("version", "")),
        openapi=version,
        operations=operations,
        skipped=reader.skipped,
        notes=reader.notes,
        files=tuple(files),
        document=document,
    )


def _file(source: str | Path) -> Path | None:
    """The file ``source`` names (what :func:`_parse` read), or ``None`` for a document's text."""
    if isinstance(source, Path) or (isinstance(source, str) and "\n" not in source and len(source) < 4096):
        return Path(source)
    return None


def bundle(document: dict[str, Any], path: Path | None) -> tuple[dict[str, Any], list[str]]:
    """``document`` (read from ``path``) with its references into other files made local: each
    file a reference names — relative, in the document's own folder or below it, JSON or YAML —
    is read once and put under ``x-ludus-files`` (by its path relative to the folder), and the
    references to it, from the document or from other such files (relative to *their* folder),
    point there. A reference that is a URL, an absolute path, leads out of the folder (``../``,
    or a symlink pointing out), names a hidden file or folder (``.env``, ``.config/``), a file
    not named ``.json``, ``.yaml`` or ``.yml``, a missing file, anything but a regular file (a
    FIFO, a device), one over the size limit or one that holds no JSON or YAML mapping or list,
    points to ``x-ludus-refused`` instead, which holds why: the reader reports it where it is
    used. References within data (an ``example``, a ``default``, an ``enum``) are not followed.
    Cycles between files need nothing special: once bundled, they are references within one
    document, cut as any recursive schema is. Returns the document (the same mapping, changed in
    place) and the files read."""
    if not _has_external_ref(document):
        return document, []
    for key in (BUNDLED, REFUSED):
        if key in document:
            raise SpecError(f"the document holds {key!r}, which ludus synth writes itself when it bundles references")
    if path is None:  # the document's text: there is no folder to read other files from (the reader says so)
        return document, []
    root = path.resolve()
    folder = root.parent
    prefixes = {root: "#"}  # a file read -> the pointer to its contents in the bundled document
    files: dict[str, Any] = {}
    refused: dict[str, int] = {}  # why a reference was refused -> its place in x-ludus-refused
    located: dict[tuple[Path, str], Path | str] = {}  # (a file's folder, a file part) -> the file, or why not
    unread: dict[Path, str] = {}  # a file found but not read -> why
    budget = [MAX_DOCUMENT_BYTES - root.stat().st_size]
    todo: list[tuple[Any, Path]] = [(document, root)]

    def refuse(ref: str, where: Path, why: str) -> str:
        shown = "the document" if where == root else where.relative_to(folder).as_posix()
        reason = f"$ref {ref[:200]!r} in {shown} {why}"
        if reason not in refused and len(refused) >= MAX_REFUSED:  # one reason for the rest: the list stays short
            reason = f"$ref refused: more than {MAX_REFUSED} references were refused (the first ones say why)"
        return f"#/{REFUSED}/{refused.setdefault(reason, len(refused))}"

    def locate(name: str, where: Path) -> Path | str:
        if re.match(r"[A-Za-z][A-Za-z0-9+.-]*:", name):
            return "is a URL: only files in the document's folder are read, never fetched"
        relative = unquote(name)
        if name.startswith(("/", "\\")) or relative.startswith(("/", "\\")):
            return "is an absolute path: only relative references into the document's folder are read"
        if len(name) > MAX_REF_PATH or len(re.findall(r"[/\\]", relative)) >= MAX_REF_PARTS:
            return f"is a path longer than {MAX_REF_PATH} characters or {MAX_REF_PARTS} folders deep: not read"
        try:
            target = (where.parent / relative).resolve()
        except (OSError, RuntimeError, ValueError) as exc:
            return f"names no file that can be opened ({type(exc).__name__})"
        if not target.is_relative_to(folder):
            return "leads out of the document's folder: only files in it and its subfolders are read"
        if target == root:
            return target
        if any(part.startswith(".") for part in target.relative_to(folder).parts):
            return "names a hidden file or folder (its name starts with '.'): those are never read"
        if target.suffix.lower() not in FILE_SUFFIXES:
            return f"names a file whose name does not end in {', '.join(FILE_SUFFIXES)}: only those are read"
        return target

    def read(target: Path) -> str | None:
        """Why ``target`` is not bundled, or ``None`` once it is."""
        if len(prefixes) > MAX_FILES:
            return f"names one file too many: at most {MAX_FILES} are read"
        relative = target.relative_to(folder).as_posix()
        try:
            mode: int | None = os.stat(target).st_mode
        except (FileNotFoundError, NotADirectoryError):
            mode = None
        except OSError as exc:  # a name too long, a folder that may not be entered
            return f"names no file that can be opened ({exc.strerror or type(exc).__name__})"
        if mode is None or stat.S_ISDIR(mode):
            return "names no file there (it is missing, or a folder)"
        try:
            raw = _read_file(target, budget[0])
            try:
                text = raw.decode("utf-8-sig")
            except UnicodeDecodeError as exc:
                raise SpecError(f"{relative}: not UTF-8 text (byte {exc.start})") from None
            content = _parse_text(text, relative)
        except _TooLarge:
            return f"names a file that takes the files read past the limit of {MAX_DOCUMENT_BYTES:,} bytes"
        except SpecError as exc:
            return f"names a file that cannot be read: {str(exc)[:300]}"
        if not isinstance(content, (dict, list)):  # any text is YAML (a plain scalar): a key, a .env, a note
            return f"names a file that holds no mapping or list (a {type(content).__name__}): not read"
        if _nesting(content) > MAX_NESTING - 2:  # bundled two levels down, it must keep the document within the limit
            return f"names a file nesting more than {MAX_NESTING - 2} deep"
        budget[0] -= len(raw)
        prefixes[target] = f"#/{BUNDLED}/{_escape(relative)}"
        files[relative] = content
        todo.append((content, target))
        return None

    def follow(ref: str, where: Path) -> str:
        name, _, fragment = ref.partition("#")
        if fragment and not fragment.startswith("/"):
            return refuse(ref, where, "has a fragment that is no JSON pointer (anchors are not read)")
        if not name:
            return prefixes[where] + fragment
        key = (where.parent, name)
        if key not in located:  # each spelling is resolved once, and only so many (each costs the disk's time)
            if len(located) >= MAX_REF_NAMES:
                return refuse(ref, where, f"is one of more than {MAX_REF_NAMES} file names the references spell: "
                                          "not read")  # fmt: skip
            located[key] = locate(name, where)
        target = located[key]
        if isinstance(target, str):
            return refuse(ref, where, target)
        if target not in prefixes and target not in unread:
            why = read(target)
            if why is not None:
                unread[target] = why
        if target in unread:
            return refuse(ref, where, unread[target])
        return prefixes[target] + fragment

    while todo:
        node, where = todo.pop()
        _walk_refs(node, lambda ref, where=where: follow(ref, where), top="" if where == root else "names")
    if files:
        document[BUNDLED] = files
    if refused:
        document[REFUSED] = list(refused)
    return document, list(files)


def shown_ref(ref: str) -> str:
    """``ref`` as the document wrote it: a reference :func:`bundle` made local to another file's
    contents (``#/x-ludus-files/schemas~1pet.yaml/Pet``) is shown as ``schemas/pet.yaml#/Pet``."""
    prefix = f"#/{BUNDLED}/"
    if not ref.startswith(prefix):
        return ref
    name, _, rest = ref[len(prefix) :].partition("/")
    return f"{name.replace('~1', '/').replace('~0', '~')}#/{rest}".removesuffix("#/")


def _has_external_ref(node: Any) -> bool:
    found = []
    _walk_refs(node, lambda ref: found.append(ref) or ref, only=lambda ref: not ref.startswith("#"))
    return bool(found)


def _walk_refs(node: Any, change: Any, only: Any = None, top: str = "") -> None:
    """Replace every string ``$ref`` in ``node`` by ``change(ref)`` (in place, iteratively), but
    none within data: an ``example``, ``default``, ``enum`` or ``const`` value, a schema's list
    of ``examples``, an Example Object's ``value``. A field of those names in a map of names (a
    property called ``default``, the ``default`` response) is followed as any other; so is one
    at the top of ``node`` when ``top`` is ``"names"`` (another file's: a schema, or a map of them)."""
    todo: list[tuple[Any, str]] = [(node, top)]  # a value, and what it is: "names" (a map of names), "example" or ""
    while todo:
        item, kind = todo.pop()
        if isinstance(item, list):
            todo.extend((v, "") for v in item if isinstance(v, (dict, list)))
            continue
        if not isinstance(item, dict):
            continue
        ref = item.get("$ref")
        if isinstance(ref, str) and (only is None or only(ref)):
            item["$ref"] = change(ref)
        for key, value in item.items():
            if not isinstance(value, (dict, list)):
                continue
            if kind == "names":
                todo.append((value, ""))
            elif (
                key in LITERALS
                or (kind == "example" and key == "value")
                or (key == "examples" and isinstance(value, list))
            ):
                continue
            elif key == "examples":  # OpenAPI's map of Example Objects (a schema's examples is a list)
                todo.extend((v, "example") for v in value.values())
            else:
                todo.append((value, "names" if key in NAME_MAPS and isinstance(value, dict) else ""))


def _parse(source: str | Path) -> Any:
    text = source
    where = "the document"
    if isinstance(source, Path) or (isinstance(source, str) and "\n" not in source and len(source) < 4096):
        path = Path(source)
        if not path.is_file():
            raise SpecError(f"{source}: no such file (pass an OpenAPI document's path, or its text)")
        if path.stat().st_size > MAX_DOCUMENT_BYTES:
            raise SpecError(f"{source}: larger than {MAX_DOCUMENT_BYTES // 1_000_000} MB; no API description is")
        raw = path.read_bytes()
        try:
            text = raw.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise SpecError(f"{source}: not UTF-8 text (byte {exc.start})") from None
        where = str(source)
    assert isinstance(text, str)
    if len(text) > MAX_DOCUMENT_BYTES:
        raise SpecError(f"the document is larger than {MAX_DOCUMENT_BYTES // 1_000_000} MB; no API description is")
    return _parse_text(text, where)


def _parse_text(text: str, where: str) -> Any:
    """``text`` read as JSON, else YAML; SpecError naming ``where`` (the document, a file) and why not."""
    try:
        return json.loads(text)
    except ValueError:
        pass
    except RecursionError:
        raise SpecError(f"{where} nests more than {MAX_NESTING} deep; no API description does") from None
    try:
        return yaml.load(text, Loader=_SafeLoader)  # noqa: S506 - a safe loader without aliases' blow-up
    except RecursionError:
        raise SpecError(f"{where} nests more than {MAX_NESTING} deep; no API description does") from None
    except _AliasError as exc:
        raise SpecError(f"{where} {exc}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        raise SpecError(f"{where} is neither JSON nor YAML{at}: {getattr(exc, 'problem', exc)}") from None


class _SafeLoader(yaml.SafeLoader):
    """YAML's safe loader, refusing aliases: a document of nested aliases (a 'billion laughs')
    expands to gigabytes; API descriptions do not need them. A date or a time stays the text it
    is (``2024-05-01`` would be a Python date, which no JSON reply or record can hold): an
    OpenAPI document describes JSON, where a date is a string."""

    def compose_node(self, parent: Any, index: Any) -> Any:  # type: ignore[override]
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise _AliasError(f"uses a YAML alias (*{event.anchor}) at line {event.start_mark.line + 1}: aliases are "
                              "not read (nested ones can expand to gigabytes); write the aliased part out")  # fmt: skip
        return super().compose_node(parent, index)


class _AliasError(yaml.YAMLError):
    pass


class _TooLarge(SpecError):
    pass


def _read_file(path: Path, limit: int) -> bytes:
    """The bytes of the regular file ``path``, at most ``limit`` of them (else :class:`_TooLarge`),
    or SpecError saying why not: never a FIFO or a device (which can block, or never end), never
    through a symlink put in its place since it was resolved, nor more than ``limit`` bytes of a
    file that grows, or says it is empty as ``/proc``'s files do."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):  # before opening: opening a device can do something
            raise SpecError("it is no regular file (a device, a FIFO or a socket)")
        flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NOCTTY", 0)
        fd = os.open(path, flags | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise SpecError(f"it cannot be opened ({exc.strerror or type(exc).__name__})") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise SpecError("it is no regular file (a device, a FIFO or a socket)")
        if info.st_size > limit:
            raise _TooLarge()
        chunks, size = [], 0
        while size <= limit:
            chunk = os.read(fd, min(1 << 20, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > limit:
            raise _TooLarge()
        return b"".join(chunks)
    except OSError as exc:
        raise SpecError(f"it cannot be read ({exc.strerror or type(exc).__name__})") from None
    finally:
        os.close(fd)


_SafeLoader.add_constructor("tag:yaml.org,2002:timestamp", yaml.SafeLoader.construct_yaml_str)
_SafeLoader.add_constructor(
    "tag:yaml.org,2002:binary", yaml.SafeLoader.construct_yaml_str
)  # its base64 text: JSON has no bytes


class _Unresolvable(Exception):
    pass


class _Reader:
    """Resolves references and reads operations, noting what it leaves out."""

    def __init__(self, document: dict[str, Any]):
        self.document = document
        self.skipped: list[Skipped] = []
        self.notes: list[Skipped] = []
        self.budget = MAX_OPERATION_NODES  # what the operation being read may still inline
        self.spent = 0  # what the whole document has

    def spend(self, nodes: int) -> None:
        """Count ``nodes`` inlined: references can multiply a small document into billions of
        nodes (each of N schemas referring twice to the next), like YAML's aliases."""
        self.budget -= nodes
        self.spent += nodes
        if self.spent > MAX_DOCUMENT_NODES:
            raise SpecError(f"the document's schemas expand to more than {MAX_DOCUMENT_NODES} nodes once references "
                            "are inlined")  # fmt: skip
        if self.budget < 0:
            raise _Unresolvable(
                f"its schemas expand to more than {MAX_OPERATION_NODES} nodes once references are inlined"
            )

    def skip(self, where: str, why: str) -> None:
        self.skipped.append(Skipped(where, why))

    def note(self, where: str, why: str) -> None:
        if Skipped(where, why) not in self.notes:
            self.notes.append(Skipped(where, why))

    def pointer(self, ref: str) -> Any:
        if not ref.startswith("#"):
            raise _Unresolvable(f"$ref {ref!r} points into another document, which is read only from a file beside it")
        node: Any = self.document
        for raw in [p for p in ref[1:].split("/") if p]:
            part = raw.replace("~1", "/").replace("~0", "~")
            if isinstance(node, dict) and part not in node:  # a URI fragment percent-encodes (RFC 6901, section 6)
                part = unquote(raw).replace("~1", "/").replace("~0", "~")
            if isinstance(node, dict) and part in node:
                node = node[part]
            elif isinstance(node, list) and part.isascii() and part.isdigit() and int(part) < len(node):
                node = node[int(part)]
            else:
                raise _Unresolvable(f"$ref {shown_ref(ref)!r} points to nothing in this document")
        if ref.startswith(f"#/{REFUSED}/") and isinstance(node, str):  # bundle() could not follow it: why
            raise _Unresolvable(node)
        return node

    def resolve(self, node: Any) -> Any:
        """``node`` with a top-level ``$ref`` followed (a chain of them too)."""
        seen: tuple[str, ...] = ()
        while isinstance(node, dict) and isinstance(node.get("$ref"), str):
            ref = node["$ref"]
            if ref in seen:
                raise _Unresolvable(f"$ref {ref!r} refers to itself")
            seen = (*seen, ref)
            node = self.pointer(ref)
        return node

    def schema(self, node: Any, where: str, stack: tuple[str, ...] = (), depth: int = 0) -> dict[str, Any]:
        """A JSON schema with every reference inlined. A schema that contains itself (a tree's
        node) is unrolled ``MAX_REF_DEPTH`` times, then any object, and noted."""
        if not isinstance(node, dict):
            raise _Unresolvable(f"a schema must be a mapping, got {type(node).__name__}")
        if depth > MAX_SCHEMA_DEPTH:
            raise _Unresolvable(f"its schemas nest more than {MAX_SCHEMA_DEPTH} deep once references are inlined")
        self.spend(1)
        if isinstance(node.get("$ref"), str):
            ref = node["$ref"]
            if stack.count(ref) >= MAX_REF_DEPTH:
                self.note(where, f"the recursive schema {shown_ref(ref)} is cut after {MAX_REF_DEPTH} levels (deeper: any "
                                 "object)")  # fmt: skip
                return {"type": "object"}
            siblings = {k: v for k, v in node.items() if k != "$ref"}  # 3.1 allows keywords beside $ref
            target = self.schema(self.pointer(ref), where, (*stack, ref), depth + 1)
            return {**target, **self.schema(siblings, where, stack, depth + 1)} if siblings else target
        out: dict[str, Any] = {}
        for key, value in node.items():
            if key in SCHEMA_MAPS and isinstance(value, dict):
                out[key] = {k: self.schema(v, where, stack, depth + 1) for k, v in value.items()}
            elif key in SCHEMA_VALUES and isinstance(value, dict):
                out[key] = self.schema(value, where, stack, depth + 1)
            elif key in ("allOf", "anyOf", "oneOf", "prefixItems") and isinstance(value, list):
                out[key] = [self.schema(v, where, stack, depth + 1) for v in value]
            else:
                self.spend(_size(value))
                out[key] = copy.deepcopy(value)
                if key == "enum" and isinstance(value, list) and len(value) > MAX_ENUM:
                    self.note(
                        where, f"an enum of {len(value)} values is checked but not listed in the tool's description"
                    )
        if out.get("nullable") is True and isinstance(out.get("type"), str):  # 3.0's nullable is 3.1's type list
            out["type"] = [out["type"], "null"]
        out.pop("nullable", None)
        for bound in ("Minimum", "Maximum"):  # 3.0's boolean exclusiveMinimum is 3.1's number (True == 1 otherwise)
            flag = out.get(f"exclusive{bound}")
            if isinstance(flag, bool):
                out.pop(f"exclusive{bound}")
                if flag and bound.lower() in out:
                    out[f"exclusive{bound}"] = out.pop(bound.lower())
        if isinstance(out.get("pattern"), str) and (why := slow_pattern(out["pattern"])):
            self.note(where, f"the pattern {out.pop('pattern')[:80]!r} is not checked: {why}")
        if isinstance(out.get("patternProperties"), dict):
            for pattern in [p for p in out["patternProperties"] if slow_pattern(p)]:
                out["patternProperties"].pop(pattern)
                self.note(where, f"the property names pattern {pattern[:80]!r} is not checked: {slow_pattern(pattern)}")
        return out

    def operation(self, path: str, method: str, node: Any, shared: Any) -> Operation | None:
        label = f"{method.upper()} {path}"
        self.budget = MAX_OPERATION_NODES
        try:
            node = self.resolve(node)
            if not isinstance(node, dict):
                raise _Unresolvable("the operation is not a mapping")
            params = self.params(label, [*_as_list(shared), *_as_list(node.get("parameters"))])
            body, body_required = self.body(label, node.get("requestBody"))
            responses = self.responses(label, node.get("responses"))
        except _Unresolvable as exc:
            self.skip(label, str(exc))
            return None
        if params is None or body is False:
            return None
        templated = set(re.findall(r"{([^{}]+)}", path))
        declared = {p.name for p in params if p.location == "path"}
        if templated != declared:
            missing = sorted(templated - declared) or sorted(declared - templated)
            self.skip(label, f"path parameter(s) {', '.join(missing)} in the path and its parameters do not match")
            return None
        words = [str(node.get(k, "")).strip() for k in ("summary", "description")]
        description = ". ".join(w.rstrip(".") for w in words if w) or label
        op_id = node.get("operationId")
        return Operation(
            name=op_id if isinstance(op_id, str) else "",
            method=method,
            path=path,
            description=description,
            params=tuple(params),
            body=body if isinstance(body, dict) else None,
            body_required=body_required,
            statuses=tuple(responses),
            responses=responses,
        )

    def params(self, label: str, raw: list[Any]) -> list[Param] | None:
        by_key: dict[tuple[str, str], Param] = {}  # an operation's parameter overrides the path's of that name
        for i, node in enumerate(raw):
            node = self.resolve(node)
            if not isinstance(node, dict) or not isinstance(node.get("name"), str) or "in" not in node:
                raise _Unresolvable(f"parameter {i} has no 'name' and 'in'")
            name, where = node["name"], node["in"]
            if where in ("header", "cookie"):
                if node.get("required"):
                    self.skip(label, f"the required {where} parameter {name!r}: a simulation has no headers or cookies")
                    return None
                self.note(label, f"the optional {where} parameter {name!r} is left out")
                continue
            if where not in ("path", "query"):
                raise _Unresolvable(f"parameter {name!r} is 'in: {where}', not path, query, header or cookie")
            if "schema" not in node:
                self.skip(label, f"parameter {name!r} has no schema (only 'content'): not read")
                return None
            by_key[(where, name)] = Param(
                name,
                where,
                self.schema(node["schema"], f"{label} parameter {name}"),
                bool(node.get("required")) or where == "path",
                str(node.get("description", "")).strip(),
            )
        return list(by_key.values())

    def body(self, label: str, node: Any) -> tuple[dict[str, Any] | bool | None, bool]:
        """The JSON body's schema; ``False`` when the operation is skipped (a body it cannot send)."""
        if node is None:
            return None, False
        node = self.resolve(node)
        if not isinstance(node, dict) or not isinstance(node.get("content"), dict):
            raise _Unresolvable("the request body has no 'content'")
        content = node["content"]
        json_type = next((t for t in content if _is_json(t)), None)
        required = bool(node.get("required"))
        if json_type is None:
            if required:
                self.skip(label, f"the request body is {', '.join(content)}, not JSON")
                return False, required
            self.note(label, f"the optional {', '.join(content)} body is left out")
            return None, False
        media = content[json_type] if isinstance(content[json_type], dict) else {}
        return self.schema(media.get("schema", {}), f"{label} body"), required

    def responses(self, label: str, node: Any) -> dict[str, dict[str, Any] | None]:
        """Each response's JSON schema by status. An error response's schema the reader cannot
        resolve is noted, not fatal: the simulation answers errors with its own ``{"error": …}``."""
        out: dict[str, dict[str, Any] | None] = {}
        for status, response in (node or {}).items() if isinstance(node, dict) else []:
            try:
                out[str(status)] = self.response(label, str(status), response)
            except _Unresolvable as exc:
                if str(status).startswith("2"):
                    raise
                self.note(label, f"the schema of response {status} is left out: {exc}")
                out[str(status)] = None
        return out

    def response(self, label: str, status: str, node: Any) -> dict[str, Any] | None:
        response = self.resolve(node)
        content = response.get("content") if isinstance(response, dict) else None
        if isinstance(content, dict):
            json_type = next((t for t in content if _is_json(t)), None)
            if json_type is not None and isinstance(content[json_type], dict) and "schema" in content[json_type]:
                return self.schema(content[json_type]["schema"], f"{label} response {status}")
        return None


def _name_operations(operations: list[Operation]) -> None:
    """Give every operation a unique tool name: its ``operationId`` with anything a tool name
    cannot hold replaced by ``_``, else the method and path (``get_pets_petId``)."""
    taken: set[str] = set()
    for i, op in enumerate(operations):
        base = op.name or f"{op.method}_{op.path}"
        name = re.sub(r"[^A-Za-z0-9-]+", "_", base).strip("_")[:60] or op.method
        candidate, n = name, 2
        while candidate in taken:
            candidate, n = f"{name[:57]}_{n}", n + 1
        taken.add(candidate)
        operations[i] = replace(op, name=candidate)


def _nesting(value: Any) -> int:
    """How deep mappings and lists nest in ``value`` (iteratively: a deep document must not
    exhaust Python's stack), counted up to one past ``MAX_NESTING``."""
    deepest, todo = 0, [(value, 1)]
    while todo:
        node, depth = todo.pop()
        if isinstance(node, (dict, list)):
            deepest = max(deepest, depth)
            if depth > MAX_NESTING:
                break
            todo.extend((child, depth + 1) for child in (node.values() if isinstance(node, dict) else node))
    return deepest


def _size(value: Any) -> int:
    """The number of values within ``value`` (itself included)."""
    count, todo = 0, [value]
    while todo:
        node = todo.pop()
        count += 1
        if isinstance(node, dict):
            todo.extend(node.values())
        elif isinstance(node, list):
            todo.extend(node)
    return count


_REPEATS = (_sre.MAX_REPEAT, _sre.MIN_REPEAT, _sre.POSSESSIVE_REPEAT)


def slow_pattern(pattern: str) -> str | None:
    """Why checking text against ``pattern`` can take exponential time (Python's ``re``
    backtracks: ``^(a+)+$`` on forty a's and a ``!`` never ends), or why it is no pattern
    ``re`` reads; ``None`` for a pattern safe to check. Flagged: a repeated part holding a
    repeat of variable length (``(a+)+``, ``(\\w{1,3})*``), or alternatives that can start
    with the same character (``(ab|ac)+``)."""
    try:
        tree = _sre_parser.parse(pattern)
    except (re.error, RecursionError, OverflowError, ValueError, TypeError) as exc:
        return f"not a regular expression Python reads ({exc})"
    return "a repeat within a repeat can take exponential time to check" if _ambiguous(list(tree), False) else None


def _ambiguous(items: list[Any], repeated: bool) -> bool:
    for op, av in items:
        if op in _REPEATS:
            low, high, sub = av
            if (repeated and low != high) or _ambiguous(list(sub), repeated or high > 1):
                return True
        elif op is _sre.SUBPATTERN or op is _sre.ATOMIC_GROUP:
            if _ambiguous(list(av[-1] if op is _sre.SUBPATTERN else av), repeated):
                return True
        elif op is _sre.BRANCH:
            alternatives = [list(a) for a in av[1]]
            if repeated and _overlap([_first(a) for a in alternatives]):
                return True
            if any(_ambiguous(a, repeated) for a in alternatives):
                return True
        elif op in (_sre.ASSERT, _sre.ASSERT_NOT):
            if _ambiguous(list(av[1]), repeated):
                return True
        elif op is _sre.GROUPREF_EXISTS:
            if any(branch is not None and _ambiguous(list(branch), repeated) for branch in av[1:]):
                return True
    return False


def _first(items: list[Any]) -> set[int] | None:
    """The characters a match of ``items`` can start with; ``None`` when any (or none) can."""
    for op, av in items:
        if op is _sre.AT:
            continue
        if op is _sre.LITERAL:
            return {av}
        if op is _sre.SUBPATTERN:
            return _first(list(av[-1]))
        if op is _sre.IN and all(o in (_sre.LITERAL, _sre.RANGE) for o, _ in av):
            chars: set[int] = set()
            for o, v in av:
                if o is _sre.RANGE and v[1] - v[0] > 1000:
                    return None
                chars |= {v} if o is _sre.LITERAL else set(range(v[0], v[1] + 1))
            return chars
        return None
    return None


def _overlap(firsts: list[set[int] | None]) -> bool:
    if any(f is None for f in firsts):
        return True
    seen: set[int] = set()
    for chars in firsts:
        if seen & chars:  # type: ignore[operator]
            return True
        seen |= chars  # type: ignore[operator]
    return False


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _is_json(media_type: str) -> bool:
    base = media_type.split(";")[0].strip().lower()
    return base == "application/json" or base.endswith("+json")


def _escape(path: str) -> str:
    return path.replace("~", "~0").replace("/", "~1")
