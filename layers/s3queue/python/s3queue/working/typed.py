"""Typed messages: a handler that declares the model of its body gets it validated and parsed.

    def handle(message: Message[Order]) -> None: ...   # message.body is an Order
    def handle(order: Order) -> None: ...              # the handler gets the Order alone

The model is a pydantic v2 ``BaseModel`` subclass, read once from the annotation of the
handler's first parameter when the handler is bound (`bind`: the loaders, the Lambda container
and `Worker.process` call it). Before each call the body is validated (a ``bytes`` body, an
inbox object that was not JSON, is parsed as JSON text); a body that fails raises
`InvalidBody`, a `PermanentError`, so the message is dead-lettered at once with the validation
errors as its reason and the handler never runs.

A stored payload larger than ``max_message_bytes`` (``enqueue_file``, a large inbox PUT) is not
loaded into ``message.body`` (None), and loading it for validation would defeat that limit: a
typed handler refuses it with `InvalidBody` (dead-lettered, redrivable once the limit is raised).
A handler that takes such payloads declares no model and streams ``message.open()``.

pydantic is never imported here: a model class can exist only if the handler's module imported
pydantic already, so binding an untyped handler costs no import and no cold-start time.
"""

from __future__ import annotations

import dataclasses
import inspect
import sys
from collections.abc import Callable
from typing import Any, get_args, get_origin

from s3queue.errors import ConfigError, InvalidBody
from s3queue.message import Message

Handler = Callable[[Message], object]
INPUT_CHARS = 80
"""How much of a refused input a validation error quotes."""


class Typed:
    """A handler with a declared body model: validates, then calls it with the parsed body."""

    def __init__(self, handler: Callable[..., object], model: Any, whole: bool) -> None:
        self.handler, self.model, self.whole = handler, model, whole
        """`whole`: the handler takes the model itself (``order: Order``), not a Message."""

    def __call__(self, message: Message) -> object:
        if message.body is None and message.opener is not None:
            raise InvalidBody(
                f"payload of {message.size} bytes is over max_message_bytes, so it is not "
                f"loaded as a body, and {self.model.__name__} validates a body: raise "
                "max_message_bytes, or take an untyped Message and read message.open()"
            )
        parsed = self.parse(message.body)
        if self.whole:
            return self.handler(parsed)
        return self.handler(dataclasses.replace(message, body=parsed))

    def parse(self, body: Any) -> Any:
        """`body` as an instance of the model; `InvalidBody` with every error if it is not one."""
        try:
            if isinstance(body, bytes):
                return self.model.model_validate_json(body)
            return self.model.model_validate(body)
        except ValueError as exc:  # pydantic's ValidationError is a ValueError
            raise InvalidBody(describe(self.model, exc)) from exc


def bind(handler: Callable[..., object]) -> Handler:
    """`handler` as the worker calls it: a `Typed` if it declares a model, else itself."""
    if isinstance(handler, Typed):
        return handler
    found = declared_model(handler)
    if found is None:
        return handler
    model, whole = found
    return Typed(handler, model, whole)


def declared_model(handler: Callable[..., object]) -> tuple[Any, bool] | None:
    """The pydantic model the handler's first parameter declares, and whether the parameter
    is the model itself (``order: Order``) rather than a ``Message[Order]``; None if none."""
    annotation = _first_annotation(handler)
    pydantic = sys.modules.get("pydantic")
    if annotation is None or pydantic is None:
        return None
    if get_origin(annotation) is Message:
        args = get_args(annotation)
        return (args[0], False) if args and _is_model(args[0], pydantic) else None
    return (annotation, True) if _is_model(annotation, pydantic) else None


def describe(model: Any, exc: ValueError) -> str:
    """The validation errors of `exc`, one ``field: message (input)`` per error."""
    errors_of = getattr(exc, "errors", None)
    if not callable(errors_of):
        return f"{model.__name__}: {exc}"
    errors = errors_of(include_url=False)
    parts = []
    for error in errors:
        where = ".".join(str(part) for part in error.get("loc", ())) or "(body)"
        text = f"{where}: {error.get('msg', '?')}"
        if error.get("type") != "missing":
            text += f" (input: {_quote(error.get('input'))})"
        parts.append(text)
    count = f"{len(errors)} validation error{'s' if len(errors) != 1 else ''}"
    return f"body is not a valid {model.__name__}: {count}: " + "; ".join(parts)


def _quote(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= INPUT_CHARS else text[:INPUT_CHARS] + "..."


def _is_model(candidate: Any, pydantic: Any) -> bool:
    return isinstance(candidate, type) and issubclass(candidate, pydantic.BaseModel)


def _first_annotation(handler: Callable[..., object]) -> Any:
    """The annotation of the first parameter, evaluated if it is a string; None if absent."""
    try:
        parameters = list(inspect.signature(handler).parameters.values())
    except (TypeError, ValueError):  # a callable without a signature: nothing declared
        return None
    if not parameters or parameters[0].annotation is inspect.Parameter.empty:
        return None
    annotation = parameters[0].annotation
    if not isinstance(annotation, str):
        return annotation
    try:
        # What typing.get_type_hints does, for this one annotation (`from __future__ import
        # annotations` makes every annotation a string).
        return eval(annotation, _globals_of(handler))
    except (NameError, AttributeError, SyntaxError, TypeError) as exc:
        if annotation.rpartition(".")[2] == "Message":
            return None  # `Message` imported for type checkers only: an untyped handler
        raise ConfigError(
            f"handler {getattr(handler, '__qualname__', handler)!r}: cannot resolve the "
            f"annotation {annotation!r} of its first parameter ({type(exc).__name__}: {exc}); "
            "a body model must be importable when the module runs, not only for type checkers"
        ) from exc


def _globals_of(handler: Callable[..., object]) -> dict[str, Any]:
    target = inspect.unwrap(handler)
    found = getattr(target, "__globals__", None)
    if found is None:  # a callable object: its __call__'s module
        found = getattr(type(target).__call__, "__globals__", {})
    return dict(found)
