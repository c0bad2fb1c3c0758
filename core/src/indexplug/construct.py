"""Building trusted models without pydantic's per-object overhead.

A search answers up to ``top_k`` hits, each a :class:`~indexplug.outcomes.Hit` around a
:class:`~indexplug.passages.Passage`.  Backends build them from what they stored, and validating
them there would repeat what the guard does anyway (it checks every hit's rank, score and scale
and recomputes each passage's content-addressed id, refusing any passage altered after
indexing).  Even ``model_construct``, which skips validation, walks every field's metadata:
about 8 µs a model on this project's machine, 0.16 ms of a ten-hit Elasticsearch search whose
server answers in about 1.4 ms.  :func:`construct` does exactly what ``model_construct`` does
for the plain models used here (no aliases, no private attributes, no post-init hook, no extra
fields allowed, every field given): it sets the instance ``__dict__`` and pydantic's bookkeeping
attributes directly.  Any other model, or values that do not name exactly the model's fields,
go through ``model_construct`` itself, so the shortcut can never build something
``model_construct`` would not.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import Any, TypeVar

from pydantic import BaseModel

M = TypeVar("M", bound=BaseModel)


def _slot_setter(name: str) -> Callable[[BaseModel, Any], None]:
    """The ``__set__`` of ``BaseModel``'s slot ``name``: calling it directly skips the lookup
    ``object.__setattr__`` makes on every call (a fifth of building a hit, four slots each)."""
    for klass in BaseModel.__mro__:
        if name in vars(klass):
            setter: Callable[[BaseModel, Any], None] = vars(klass)[name].__set__
            return setter
    raise AttributeError(name)  # pragma: no cover - pydantic changed its slots


set_dict = _slot_setter("__dict__")
set_fields_set = _slot_setter("__pydantic_fields_set__")
set_extra = _slot_setter("__pydantic_extra__")
set_private = _slot_setter("__pydantic_private__")


@cache
def _plain(cls: type[BaseModel]) -> frozenset[str] | None:
    """The field names of ``cls`` if :func:`construct` may fill it directly, else ``None``."""
    fields = cls.__pydantic_fields__
    if (
        cls.__pydantic_post_init__ is not None
        or cls.__private_attributes__
        or cls.__pydantic_root_model__
        or cls.model_config.get("extra") == "allow"
        or any(f.alias is not None or f.validation_alias is not None for f in fields.values())
    ):
        return None
    return frozenset(fields)


@cache
def shared_fields_set(cls: type[BaseModel]) -> set[str]:
    """The one ``__pydantic_fields_set__`` (all of ``cls``'s fields) that every frozen model
    of ``cls`` built here shares; see :func:`maker` for why sharing it is safe."""
    return set(cls.__pydantic_fields__)


def maker(cls: type[M], names: tuple[str, ...]) -> Callable[[dict[str, Any]], M] | None:
    """A builder of ``cls`` from dicts naming exactly ``names``, checked once, here.

    For the hot paths (every hit of every search): :func:`construct` compares each dict's keys
    with the model's fields, a fifth of its cost; a caller that always passes the same literal
    keys has that comparison done once.  ``None`` when ``cls`` is not a plain model with exactly
    those fields (the caller then uses :func:`construct`), or not frozen.

    Every model it builds shares one ``__pydantic_fields_set__`` (all fields): allocating that
    set was two fifths of building a passage.  Sharing is safe for frozen models only, which is
    why only they get a maker: pydantic adds to the set on attribute assignment (refused when
    frozen), and ``model_copy`` copies it before adding the updated names.
    """
    if (
        _plain(cls) != frozenset(names)
        or len(set(names)) != len(names)
        or not cls.model_config.get("frozen")
    ):
        return None
    fields = shared_fields_set(cls)
    new = cls.__new__

    def make(values: dict[str, Any]) -> M:
        m = new(cls)
        set_dict(m, values)
        set_fields_set(m, fields)
        set_extra(m, None)
        set_private(m, None)
        return m

    return make


def construct(cls: type[M], values: dict[str, Any]) -> M:
    """``cls.model_construct(**values)`` for trusted ``values`` naming every field of ``cls``.

    ``values`` becomes the instance's ``__dict__`` (the caller must not reuse it).
    """
    names = _plain(cls)
    if names is None or values.keys() != names:
        return cls.model_construct(**values)
    m = cls.__new__(cls)
    set_dict(m, values)
    set_fields_set(m, set(names))
    set_extra(m, None)
    set_private(m, None)
    return m


def copied(model: M, update: dict[str, Any]) -> M:
    """``model.model_copy(update=update)`` for a plain model and trusted ``update`` values.

    The guard stamps every answer it passes on (its deadline, how long it took); pydantic's
    ``model_copy`` is general Python (private attributes, extras, deep copies) and, run once a
    search with its code out of the CPU's caches, cost about as much as checking ten hits.
    Here the copy is one new object with the old ``__dict__`` updated; like ``model_copy`` it
    validates nothing, and it adds the updated names to the fields set.  Any model that is not
    plain, or an update naming something that is not a field, goes through ``model_copy``.
    """
    cls = type(model)
    names = _plain(cls)
    if names is None or not update.keys() <= names:
        return model.model_copy(update=update)
    m = cls.__new__(cls)
    set_dict(m, {**model.__dict__, **update})
    fields_set = model.__pydantic_fields_set__
    set_fields_set(m, fields_set if update.keys() <= fields_set else fields_set | update.keys())
    set_extra(m, None)
    set_private(m, None)
    return m
