"""Handler strings into running handlers: TorchServe's resolution rules, with clear errors.

A handler string is ``module[:name]`` (TorchServe's handler string). The directory
part and a ``.py`` suffix are dropped, and the module is imported with the model
directory first on `sys.path`:

1. If the model directory has no such module, the name is looked up among the
   built-in handlers (``<builtin_package>.<module>``, by default
   `jupyter_serve.handlers`; ``base_handler`` is its module ``base``). A missing
   dependency *inside* a module that does exist is reported as such, never
   masked by that fallback.
2. ``module:name`` names the entry point: a function ``handle(data, context)``, or
   a class (even when the file holds helper classes too).
3. Without a name: the module's ``handle`` function if it has one, else its only
   class with a ``handle`` method (classes defined in the module; for a module
   defining none, the classes it lists in ``__all__``). Several candidates is an
   error that lists them.

`initialize` starts the entry point as TorchServe does: a function is called once
with ``(None, context)``; a class is instantiated without arguments and its
``initialize(context)`` is called if it has one. Every failure raises
`HandlerLoadError`, whose message names the file and the entry point and whose
`details` hold the original traceback (also chained as ``__cause__``).
"""

from __future__ import annotations

import importlib
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from jupyter_serve.wire.errors import ServeError
from jupyter_serve.worker.context import Context

DEFAULT_BUILTIN_PACKAGE = "jupyter_serve.handlers"
DEFAULT_FUNCTION = "handle"
# Built-in handler names whose module in `jupyter_serve.handlers` is named differently.
BUILTIN_MODULES = {"base_handler": "base", "vision_handler": "vision"}

HandleFunction = Callable[[Any, Context], Any]


class HandlerLoadError(ServeError):
    """A handler could not be imported, found or initialized."""

    def __init__(self, message: str, details: str = "") -> None:
        super().__init__(message)
        self.details = details


@dataclass(frozen=True)
class EntryPoint:
    """A resolved handler: a function or a class inside an imported module."""

    module: ModuleType
    name: str
    target: Any

    @property
    def is_class(self) -> bool:
        return isinstance(self.target, type)

    @property
    def origin(self) -> str:
        return str(getattr(self.module, "__file__", None) or self.module.__name__)

    def __str__(self) -> str:
        return f"{self.origin}:{self.name}"


def parse_handler(handler: str) -> tuple[str, str | None]:
    """(module name, entry point name or None) of a handler string."""
    spec, _, entry = handler.strip().partition(":")
    module = spec.strip().replace("\\", "/").rsplit("/", 1)[-1]
    if module.endswith(".py"):
        module = module[: -len(".py")]
    if not module:
        raise HandlerLoadError(f"Invalid handler {handler!r}: no module name")
    return module, entry.strip() or None


def resolve_handler(
    handler: str, model_dir: str | Path, builtin_package: str = DEFAULT_BUILTIN_PACKAGE
) -> EntryPoint:
    """Import the handler's module and find its entry point."""
    module_name, entry = parse_handler(handler)
    module = import_handler_module(module_name, Path(model_dir), builtin_package)
    return find_entry_point(module, entry)


def load_handler(
    handler: str,
    model_dir: str | Path,
    context: Context,
    builtin_package: str = DEFAULT_BUILTIN_PACKAGE,
) -> tuple[EntryPoint, HandleFunction]:
    """Resolve and initialize a handler; returns it and its ``handle(data, context)``."""
    entry = resolve_handler(handler, model_dir, builtin_package)
    return entry, initialize(entry, context)


# ---- importing ----------------------------------------------------------------


def import_handler_module(name: str, model_dir: Path, builtin_package: str) -> ModuleType:
    """The module `name` from the model directory, else the built-in handler `name`."""
    ensure_on_path(model_dir)
    check_not_shadowed(name, model_dir)
    file = model_dir / f"{name.replace('.', '/')}.py"
    what = f"handler file {file}" if file.is_file() else f"handler module {name!r} in {model_dir}"
    local = _import(name, what)
    if local is not None:
        return local
    builtin_name = f"{builtin_package}.{BUILTIN_MODULES.get(name, name)}"
    builtin = _import(builtin_name, f"built-in handler {name!r}")
    if builtin is not None:
        return builtin
    raise HandlerLoadError(
        f"Handler {name!r} not found: no {name}.py in {model_dir} "
        f"and no built-in handler of that name in {builtin_package}"
    )


def _import(name: str, what: str) -> ModuleType | None:
    """Import `name`; None if that module itself (or a parent) does not exist."""
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if _names_module(exc.name, name):
            return None
        raise HandlerLoadError(
            f"Importing {what} failed: No module named {exc.name!r} "
            "(a dependency of the handler is not installed)",
            traceback.format_exc(),
        ) from exc
    except Exception as exc:
        raise HandlerLoadError(
            f"Importing {what} failed: {one_line(exc)}", traceback.format_exc()
        ) from exc


def _names_module(missing: str | None, name: str) -> bool:
    """True if `missing` is `name` or one of its parent packages."""
    parts = name.split(".")
    return missing in {".".join(parts[:i]) for i in range(1, len(parts) + 1)}


def ensure_on_path(model_dir: Path) -> None:
    """Put the model directory first on `sys.path` (once)."""
    folder = str(model_dir)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    importlib.invalidate_caches()


def check_not_shadowed(name: str, model_dir: Path) -> None:
    """Refuse a handler file named like a module this interpreter already imported."""
    top = name.split(".", 1)[0]
    if not ((model_dir / f"{top}.py").is_file() or (model_dir / top).is_dir()):
        return
    loaded = sys.modules.get(top)
    loaded_file = getattr(loaded, "__file__", None)
    if loaded is None or (loaded_file and _is_inside(Path(loaded_file), model_dir)):
        return
    raise HandlerLoadError(
        f"Handler module {top!r} in {model_dir} has the name of the already imported "
        f"module {loaded_file or top!r}: rename the handler file"
    )


def _is_inside(path: Path, folder: Path) -> bool:
    return path.resolve().is_relative_to(folder.resolve())


# ---- finding the entry point -------------------------------------------------------


def find_entry_point(module: ModuleType, entry: str | None) -> EntryPoint:
    """The named entry point, or the module's `handle` function or only handler class."""
    if entry is not None:
        return _named_entry_point(module, entry)
    function = getattr(module, DEFAULT_FUNCTION, None)
    if callable(function) and not isinstance(function, type):
        return EntryPoint(module, DEFAULT_FUNCTION, function)
    candidates = handler_classes(module)
    if len(candidates) == 1:
        return EntryPoint(module, candidates[0].__name__, candidates[0])
    where = getattr(module, "__file__", None) or module.__name__
    if not candidates:
        raise HandlerLoadError(
            f"{where} defines no handle(data, context) function and no class with a handle method"
        )
    names = ", ".join(sorted(c.__name__ for c in candidates))
    raise HandlerLoadError(
        f"{where} defines several handler classes ({names}): "
        f"pick one with '{module.__name__}:ClassName'"
    )


def _named_entry_point(module: ModuleType, entry: str) -> EntryPoint:
    where = getattr(module, "__file__", None) or module.__name__
    target = getattr(module, entry, None)
    if target is None:
        raise HandlerLoadError(f"{where} has no entry point {entry!r}")
    if isinstance(target, type) and not callable(getattr(target, "handle", None)):
        raise HandlerLoadError(f"{where}:{entry} is a class without a handle method")
    if not callable(target):
        raise HandlerLoadError(f"{where}:{entry} is not a function or a class")
    return EntryPoint(module, entry, target)


def handler_classes(module: ModuleType) -> list[type]:
    """Classes with `handle` defined in `module`, else those its `__all__` lists."""
    defined = [
        value
        for value in vars(module).values()
        if isinstance(value, type) and value.__module__ == module.__name__
    ]
    classes = [c for c in defined if callable(getattr(c, "handle", None))]
    if classes or defined:
        return classes
    exported = [getattr(module, name, None) for name in getattr(module, "__all__", ())]
    return [c for c in exported if isinstance(c, type) and callable(getattr(c, "handle", None))]


# ---- initializing -------------------------------------------------------------------


def initialize(entry: EntryPoint, context: Context) -> HandleFunction:
    """Start the entry point with the load-time context; returns its `handle`."""
    if not entry.is_class:
        _call(entry, f"{entry}(None, context) failed at load", entry.target, None, context)
        handle: HandleFunction = entry.target
        return handle
    instance = _call(entry, f"Creating {entry} failed", entry.target)
    init = getattr(instance, "initialize", None)
    if callable(init):
        _call(entry, f"{entry}.initialize(context) failed", init, context)
    bound: HandleFunction = instance.handle
    return bound


def _call(entry: EntryPoint, what: str, function: Callable[..., Any], *args: Any) -> Any:
    try:
        return function(*args)
    except Exception as exc:
        raise HandlerLoadError(f"{what}: {one_line(exc)}", traceback.format_exc()) from exc


def one_line(exc: BaseException) -> str:
    """``Type: first line of the message``."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__
