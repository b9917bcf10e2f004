"""Where a run's checkpoints live: one file per algorithm in the checkpoint folder (``seed<k>/``
under it for ``--seeds N``), the checks before a run starts over them, and their removal once the
run's results are written. The files themselves are :meth:`fedkernels.fl.Server.save_checkpoint`'s."""

from __future__ import annotations

import contextlib
import inspect
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..fl.registry import strategies
from .limits import check_writable_folder

if TYPE_CHECKING:
    from .configuration import ExperimentConfig


def default_checkpoint_folder(output: str) -> str:
    """Where a run checkpoints unless told otherwise, and where ``--resume`` alone looks."""
    return str(Path(output) / "checkpoints")


def checkpoint_path(cfg: ExperimentConfig, name: str) -> Path | None:
    """Where algorithm ``name`` checkpoints in ``cfg.checkpoint`` (``None``: no checkpoints)."""
    return None if cfg.checkpoint is None else Path(cfg.checkpoint) / f"{name}.ckpt"


def saved_checkpoints(cfg: ExperimentConfig) -> list[Path]:
    """The checkpoints of ``cfg``'s algorithms in its checkpoint folder or a per-seed subfolder
    (``seed<k>/``, what ``--seeds N`` writes); empty without a checkpoint folder."""
    if cfg.checkpoint is None:
        return []
    folder = Path(cfg.checkpoint)
    names = {f"{a}.ckpt" for a in cfg.algorithms}
    found = sorted(p for p in folder.glob("*.ckpt") if p.name in names)
    return found + sorted(p for p in folder.glob("seed*/*.ckpt") if p.name in names)


def check_checkpoints(cfg: ExperimentConfig) -> None:
    """Refuse to start over a checkpoint folder that holds a run unless ``cfg.resume`` says to continue
    it: an algorithm's checkpoint in the folder itself or in a per-seed subfolder (``seed<k>/``, what
    ``--seeds N`` writes), so a rerun without ``--resume`` never overwrites one. Then check the folder
    takes files, before any data is read."""
    if cfg.checkpoint is None:
        return
    folder = Path(cfg.checkpoint)
    if not cfg.resume:
        found = saved_checkpoints(cfg)
        if found:
            shown = ", ".join(str(p.relative_to(folder)) for p in found[:4]) + (", ..." if len(found) > 4 else "")
            raise ValueError(
                f"checkpoint folder {cfg.checkpoint} already holds {shown}: "
                "pass --resume to continue that run, or choose another --checkpoint folder"
            )
    check_writable_folder(folder, "checkpoint")


def remove_checkpoints(cfg: ExperimentConfig) -> None:
    """Delete the finished run's checkpoints (and FedALC's client secret beside its checkpoint) in
    ``cfg.checkpoint`` and its ``seed<k>/`` folders, then the folders if nothing else is in them:
    results are written, nothing is left to resume."""
    if cfg.checkpoint is None:
        return
    folder = Path(cfg.checkpoint)
    for path in saved_checkpoints(cfg):
        path.unlink(missing_ok=True)
        path.with_suffix(".secret").unlink(missing_ok=True)  # FedALC's client secret, kept only to resume
    for sub in [*sorted(folder.glob("seed*")), folder]:
        with contextlib.suppress(OSError):  # not empty (a user's file), not a folder, or gone: leave it
            sub.rmdir()


def run_options(name: str, cfg: ExperimentConfig) -> dict[str, Any]:
    """The options of algorithm ``name`` for a run: :meth:`ExperimentConfig.options_for`, plus, for a
    strategy keyed by a client secret (FedALC) that checkpoints with neither ``client_secret`` nor
    ``client_secret_file`` given, ``client_secret_file = <checkpoint>/<name>.secret`` (mode 0600), so
    ``--resume`` finds the same secret and the secret is never written into the results."""
    options = cfg.options_for(name)
    cls = strategies().get(name.lower())
    if cls is None or cfg.checkpoint is None or "client_secret" in options or "client_secret_file" in options:
        return options
    inits = [k.__dict__["__init__"] for k in cls.__mro__[:-1] if "__init__" in k.__dict__]
    takes = any("client_secret_file" in inspect.signature(init).parameters for init in inits)
    if takes:
        options["client_secret_file"] = str(Path(cfg.checkpoint) / f"{cls.name}.secret")
    return options
