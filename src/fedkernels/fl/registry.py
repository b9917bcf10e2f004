"""Strategies by name: every :class:`Strategy` exported by ``fedkernels.fl.algorithms`` is
available to ``fedkernels run`` under its ``name`` (case-insensitive), with no edit here."""

from __future__ import annotations

import inspect
from typing import Any

from .._suggest import did_you_mean
from .strategy import Strategy


def strategies() -> dict[str, type[Strategy]]:
    """Registered strategy classes keyed by lower-cased ``name``: FedAvg (the baseline) first, then by name."""
    from . import algorithms

    out: dict[str, type[Strategy]] = {}
    for attr in getattr(algorithms, "__all__", []):
        obj = getattr(algorithms, attr, None)
        if inspect.isclass(obj) and issubclass(obj, Strategy) and not inspect.isabstract(obj):
            out[obj.name.lower()] = obj
    return dict(sorted(out.items(), key=lambda kv: (kv[1].name != "FedAvg", kv[0])))


def is_registered(name: str) -> bool:
    """Whether a strategy called ``name`` (any case) is registered."""
    return name.lower() in strategies()


def strategy_class(name: str) -> type[Strategy]:
    """The registered strategy class called ``name`` (any case): where a name is resolved.

    Raises:
        ValueError: an unknown name (the message lists the known ones).
    """
    known = strategies()
    cls = known.get(name.lower())
    if cls is None:
        names = [c.name for c in known.values()]
        raise ValueError(f"unknown algorithm {name!r}{did_you_mean(name, names)}; registered: {', '.join(names)}")
    return cls


def make_strategy(name: str, **options: Any) -> Strategy:
    """Build the strategy ``name`` (any case) with constructor ``options``: :func:`build_strategy` of
    :func:`strategy_class`.

    Raises:
        ValueError: an unknown name (the message lists the known ones), an option the strategy's
            constructor does not take, or a required one (``L1DiffNetwork.num_clients``) not given.
    """
    return build_strategy(strategy_class(name), **options)


def build_strategy(cls: type[Strategy], **options: Any) -> Strategy:
    """Build strategy class ``cls`` with constructor ``options``, looking no name up (a run below its
    resolution rebuilds a strategy this way).

    Raises:
        ValueError: an option the strategy's constructor does not take, or a required one not given.
    """
    params = inspect.signature(cls.__init__).parameters
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    bad = sorted(set(options) - set(params) - {"self"})
    if bad and not takes_any:
        takes = sorted(k for k in params if k != "self")
        hint = "".join(did_you_mean(b, takes, n=1) for b in bad[:1])
        raise ValueError(f"algorithm {cls.name} has no option(s) {bad}{hint}; it takes {takes}")
    required = [
        k
        for k, p in params.items()
        if k != "self"
        and p.default is inspect.Parameter.empty
        and p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    ]
    missing = [k for k in required if k not in options]
    if missing:
        how = " ".join(f"--option {cls.name}.{k}=..." for k in missing)
        raise ValueError(f"algorithm {cls.name} needs option(s) {missing} ({how})")
    return cls(**options)
