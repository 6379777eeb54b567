"""The gRPC contract reference: Markdown rendered from the protos' descriptors and comments.

Used by ``docs/gen/grpc_reference.py`` (the site's ``reference/grpc.md``) and by
``tests/docs/test_generated_pages.py``; both import it with ``docs/gen/`` on the path (the folder is
not a package). Nothing here needs MkDocs: :func:`compile_descriptor_set` runs ``grpc_tools.protoc``
in-process and :func:`render_markdown` turns its output into one page.

Anchors are the elements' fully qualified names without the leading dot
(``universal_runtime.v1.Usage``, ``universal_runtime.v1.InferenceService.Generate``), set with
``attr_list`` (``{ #id }``): stable across builds, unique in the page, and never equal to a slug
the ``toc`` extension makes for another heading (slugs have no dots).
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from importlib.resources import files as package_files
from pathlib import Path

from _markdown_text import escape
from google.protobuf import descriptor_pb2
from grpc_tools import protoc

FieldDescriptorProto = descriptor_pb2.FieldDescriptorProto

# Field numbers of the descriptor messages, as SourceCodeInfo.Location paths use them
# (descriptor.proto): FileDescriptorProto.message_type = 4, enum_type = 5, service = 6;
# DescriptorProto.field = 2, nested_type = 3, enum_type = 4; EnumDescriptorProto.value = 2;
# ServiceDescriptorProto.method = 2.
_FILE_MESSAGE, _FILE_ENUM, _FILE_SERVICE = 4, 5, 6
_MESSAGE_FIELD, _MESSAGE_NESTED, _MESSAGE_ENUM = 2, 3, 4
_ENUM_VALUE = 2
_SERVICE_METHOD = 2

_SCALARS = {
    value: name.removeprefix("TYPE_").lower()
    for name, value in FieldDescriptorProto.Type.items()
    if value not in (FieldDescriptorProto.TYPE_MESSAGE, FieldDescriptorProto.TYPE_ENUM)
}


def compile_descriptor_set(
    proto_root: Path, proto_files: Sequence[str] | None = None
) -> descriptor_pb2.FileDescriptorSet:
    """Compile protos into a ``FileDescriptorSet`` with source info (comments), via ``grpc_tools.protoc``.

    Args:
        proto_root: The import root (``protos/``): files are named relative to it.
        proto_files: Files to compile, relative to ``proto_root``; default every ``*.proto`` under it.
            Imports outside the list (``google/protobuf/struct.proto``) resolve from grpc_tools'
            bundled well-known types but are not part of the set.

    Returns:
        The set, one ``FileDescriptorProto`` per compiled file, in ``proto_files`` order.

    Raises:
        FileNotFoundError: ``proto_root`` holds no ``.proto`` file.
        RuntimeError: protoc failed (its messages went to stderr).

    """
    root = Path(proto_root)
    names = (
        list(proto_files)
        if proto_files is not None
        else sorted(p.relative_to(root).as_posix() for p in root.rglob("*.proto"))
    )
    if not names:
        raise FileNotFoundError(f"no .proto files under {root}")
    well_known = str(package_files("grpc_tools") / "_proto")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "descriptors.pb"
        status = protoc.main(
            [
                "protoc",
                f"-I{root}",
                f"-I{well_known}",
                "--include_source_info",
                f"--descriptor_set_out={out}",
                *names,
            ]
        )
        if status != 0:
            raise RuntimeError(f"protoc exited with {status} compiling {len(names)} files under {root}")
        return descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes())


def anchor(full_name: str) -> str:
    """The page anchor of a fully qualified proto name (``.pkg.Message`` or ``pkg.Message``)."""
    return full_name.lstrip(".")


@dataclass(frozen=True)
class Element:
    """One documented element of the contract: what the tests check the page for."""

    kind: str  # "service", "rpc", "message" or "enum"
    full_name: str  # without the leading dot
    comment: str  # leading and trailing comments, as protoc gives them (may be empty)


def elements(fds: descriptor_pb2.FileDescriptorSet) -> list[Element]:
    """Every service, RPC, message (map entries excepted) and enum of the set, with its comment."""
    found: list[Element] = []
    for file in fds.file:
        comments = _Comments(file)
        for i, service in enumerate(file.service):
            path = (_FILE_SERVICE, i)
            name = _join(file.package, service.name)
            found.append(Element("service", name, comments.get(path)))
            found += [
                Element("rpc", f"{name}.{method.name}", comments.get((*path, _SERVICE_METHOD, j)))
                for j, method in enumerate(service.method)
            ]
        found += [Element("message", name, comments.get(path)) for _, path, name in _messages(file)]
        found += [Element("enum", name, comments.get(path)) for _, path, name in _enums(file)]
    return found


def render_markdown(fds: descriptor_pb2.FileDescriptorSet, *, source: str = "protos/") -> str:
    """Render the set as one Markdown page: a contents list, then each file's services, messages, enums.

    Files with services come first. Each RPC names its request and response types (linked to
    their anchors when they are in the set) and marks streaming sides; each message has a table
    of its fields (name, number, type, label or oneof, comment); each enum a table of its values.
    Comments become Markdown with ``<``, ``>``, ``[`` and table pipes escaped outside code spans,
    so a comment cannot open an HTML tag, a link or a table cell by accident.

    Args:
        fds: From :func:`compile_descriptor_set` (with source info, or every comment is empty).
        source: Where the protos live, named in the page's introduction.

    Returns:
        The page, ending with a newline.

    """
    known = {name for f in fds.file for _, _, name in (*_messages(f), *_enums(f))}
    ordered = sorted(fds.file, key=lambda f: (not f.service, f.name))
    lines = [
        "# gRPC contract reference",
        "",
        f"Generated from the comments of the protos in `{source}` at every build of this site: the "
        "contract as the server implements it. Streaming sides are marked **stream**; a field's "
        "*optional* label means proto3 presence (unset is distinguishable from the default).",
        "",
        "## Contents",
        "",
    ]
    for file in ordered:
        lines.append(f"- [`{file.name}`](#{_file_anchor(file)})")
        for service in file.service:
            lines.append(f"    - service [`{service.name}`](#{anchor(_join(file.package, service.name))})")
    for file in ordered:
        lines += ["", *_render_file(file, known)]
    return "\n".join(lines).rstrip("\n") + "\n"


# --- one file -----------------------------------------------------------------------------------


def _render_file(file: descriptor_pb2.FileDescriptorProto, known: set[str]) -> list[str]:
    comments = _Comments(file)
    lines = [f"## `{file.name}` {{ #{_file_anchor(file)} }}", ""]
    header = comments.get((12,)) or comments.get((2,))  # syntax, else package: the file's comment
    if header:
        lines += [_block(header), ""]
    lines.append(f"Package `{file.package}`." if file.package else "No package.")
    if file.dependency:
        lines.append("Imports: " + ", ".join(f"`{d}`" for d in file.dependency) + ".")
    for i, service in enumerate(file.service):
        lines += ["", *_render_service(file, service, (_FILE_SERVICE, i), comments, known)]
    for message, path, name in _messages(file):
        lines += ["", *_render_message(file, message, path, name, comments, known)]
    for enum, path, name in _enums(file):
        lines += ["", *_render_enum(file, enum, path, name, comments)]
    return lines


def _render_service(file, service, path, comments, known) -> list[str]:
    name = _join(file.package, service.name)
    lines = [f"### service {service.name} {{ #{anchor(name)} }}", ""]
    if text := comments.get(path):
        lines += [_block(text), ""]
    lines += ["| RPC | request | response |", "|---|---|---|"]
    for method in service.method:
        lines.append(
            f"| [`{method.name}`](#{anchor(f'{name}.{method.name}')}) "
            f"| {_stream(method.client_streaming)}{_type_link(method.input_type, file.package, known)} "
            f"| {_stream(method.server_streaming)}{_type_link(method.output_type, file.package, known)} |"
        )
    for j, method in enumerate(service.method):
        request = _stream(method.client_streaming) + _type_link(method.input_type, file.package, known)
        response = _stream(method.server_streaming) + _type_link(method.output_type, file.package, known)
        lines += [
            "",
            f"#### {service.name}.{method.name} {{ #{anchor(f'{name}.{method.name}')} }}",
            "",
            f"Request: {request} · Response: {response}",
        ]
        if text := comments.get((*path, _SERVICE_METHOD, j)):
            lines += ["", _block(text)]
    return lines


def _render_message(file, message, path, name, comments, known) -> list[str]:
    short = name.removeprefix(f"{file.package}.") if file.package else name
    lines = [f"### message {short} {{ #{anchor(name)} }}", ""]
    if text := comments.get(path):
        lines += [_block(text), ""]
    if not message.field:
        return [*lines, "No fields."]
    maps = {_join(name, nested.name): nested for nested in message.nested_type if nested.options.map_entry}
    lines += ["| field | number | type | label | description |", "|---|---|---|---|---|"]
    for k, field in enumerate(message.field):
        entry = maps.get(field.type_name.lstrip("."))
        if entry is not None:  # map<K, V>: the synthetic entry message is not shown on its own
            key, value = entry.field[0], entry.field[1]
            key_type, value_type = (_field_type(f, file.package, known) for f in (key, value))
            type_text = f"map&lt;{key_type}, {value_type}&gt;"
            label = ""
        else:
            type_text = _field_type(field, file.package, known)
            label = _label(message, field)
        text = _cell(comments.get((*path, _MESSAGE_FIELD, k)))
        lines.append(f"| `{field.name}` | {field.number} | {type_text} | {label} | {text} |")
    return lines


def _render_enum(file, enum, path, name, comments) -> list[str]:
    short = name.removeprefix(f"{file.package}.") if file.package else name
    lines = [f"### enum {short} {{ #{anchor(name)} }}", ""]
    if text := comments.get(path):
        lines += [_block(text), ""]
    lines += ["| value | number | description |", "|---|---|---|"]
    for k, value in enumerate(enum.value):
        lines.append(f"| `{value.name}` | {value.number} | {_cell(comments.get((*path, _ENUM_VALUE, k)))} |")
    return lines


# --- names, types and labels --------------------------------------------------------------------


def _join(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name


def _file_anchor(file: descriptor_pb2.FileDescriptorProto) -> str:
    return "file." + re.sub(r"[^\w]+", ".", file.name.removesuffix(".proto"))


def _messages(file) -> Iterable[tuple[descriptor_pb2.DescriptorProto, tuple[int, ...], str]]:
    """Every message of the file, nested ones after their parent, map entries left out."""

    def walk(message, path, prefix):
        name = _join(prefix, message.name)
        if message.options.map_entry:
            return
        yield message, path, name
        for j, nested in enumerate(message.nested_type):
            yield from walk(nested, (*path, _MESSAGE_NESTED, j), name)

    for i, message in enumerate(file.message_type):
        yield from walk(message, (_FILE_MESSAGE, i), file.package)


def _enums(file) -> Iterable[tuple[descriptor_pb2.EnumDescriptorProto, tuple[int, ...], str]]:
    """Every enum of the file: top-level ones, then those nested in messages (in message order)."""
    for i, enum in enumerate(file.enum_type):
        yield enum, (_FILE_ENUM, i), _join(file.package, enum.name)
    for message, path, name in _messages(file):
        for j, enum in enumerate(message.enum_type):
            yield enum, (*path, _MESSAGE_ENUM, j), _join(name, enum.name)


def _type_link(type_name: str, package: str, known: set[str]) -> str:
    full = type_name.lstrip(".")
    short = full.removeprefix(f"{package}.") if package else full
    return f"[`{short}`](#{anchor(full)})" if full in known else f"`{full}`"


def _field_type(field: FieldDescriptorProto, package: str, known: set[str]) -> str:
    if field.type in (FieldDescriptorProto.TYPE_MESSAGE, FieldDescriptorProto.TYPE_ENUM):
        return _type_link(field.type_name, package, known)
    return f"`{_SCALARS[field.type]}`"


def _label(message: descriptor_pb2.DescriptorProto, field: FieldDescriptorProto) -> str:
    if field.label == FieldDescriptorProto.LABEL_REPEATED:
        return "repeated"
    if field.HasField("oneof_index"):
        if field.proto3_optional:  # a synthetic oneof: proto3 `optional`
            return "optional"
        return f"oneof `{message.oneof_decl[field.oneof_index].name}`"
    if field.label == FieldDescriptorProto.LABEL_REQUIRED:
        return "required"
    return ""


def _stream(streaming: bool) -> str:
    return "**stream** " if streaming else ""


# --- comments -----------------------------------------------------------------------------------


class _Comments:
    """A file's comments by location path: leading, then trailing, dedented by protoc's one space."""

    def __init__(self, file: descriptor_pb2.FileDescriptorProto) -> None:
        self._by_path = {}
        for location in file.source_code_info.location:
            parts = [c for c in (location.leading_comments, location.trailing_comments) if c.strip()]
            if parts:
                self._by_path[tuple(location.path)] = "\n\n".join(_dedent(p) for p in parts)

    def get(self, path: tuple[int, ...]) -> str:
        return self._by_path.get(tuple(path), "")


def _dedent(comment: str) -> str:
    # protoc keeps what follows `//`: usually one space, which is not part of the text.
    lines = [line[1:] if line.startswith(" ") else line for line in comment.rstrip("\n").split("\n")]
    return "\n".join(line.rstrip() for line in lines).strip("\n")


def _block(comment: str) -> str:
    """A comment as Markdown paragraphs (its blank lines kept)."""
    return escape(comment, in_table=False)


def _cell(comment: str) -> str:
    """A comment in one table cell: lines joined, paragraphs separated by ``<br>``."""
    paragraphs = [" ".join(p.split()) for p in re.split(r"\n\s*\n", comment) if p.strip()]
    return "<br><br>".join(escape(p, in_table=True) for p in paragraphs)
