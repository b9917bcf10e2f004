"""Where a run's checkpoints live: one file per algorithm in the checkpoint folder (``seed<k>/``
under it for ``--seeds N``), the checks before a run starts over them, and their removal once the
run's results are written. The files themselves are :meth:`fedkernels.fl.Server.save_checkpoint`'s.
Everything here takes the :class:`~fedkernels.experiments.resolve.ResolvedRun`: a resumed run looks
no name up again."""

from __future__ import annotations

import contextlib
import inspect
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .limits import check_writable_folder

if TYPE_CHECKING:
    from .resolve import ResolvedRun


def default_checkpoint_folder(output: str) -> str:
    """Where a run checkpoints unless told otherwise, and where ``--resume`` alone looks."""
    return str(Path(output) / "checkpoints")


def checkpoint_path(run: ResolvedRun, name: str) -> Path | None:
    """Where algorithm ``name`` (as registered) checkpoints in the run's folder (``None``: no checkpoints)."""
    cfg = run.config
    return None if cfg.checkpoint is None else Path(cfg.checkpoint) / f"{name}.ckpt"


def saved_checkpoints(run: ResolvedRun) -> list[Path]:
    """The checkpoints of the run's algorithms in its checkpoint folder or a per-seed subfolder
    (``seed<k>/``, what ``--seeds N`` writes); empty without a checkpoint folder."""
    cfg = run.config
    if cfg.checkpoint is None:
        return []
    folder = Path(cfg.checkpoint)
    names = {f"{a}.ckpt" for a in cfg.algorithms}
    found = sorted(p for p in folder.glob("*.ckpt") if p.name in names)
    return found + sorted(p for p in folder.glob("seed*/*.ckpt") if p.name in names)


def check_checkpoints(run: ResolvedRun) -> None:
    """Refuse to start over a checkpoint folder that holds a run unless ``resume`` says to continue
    it: an algorithm's checkpoint in the folder itself or in a per-seed subfolder (``seed<k>/``, what
    ``--seeds N`` writes), so a rerun without ``--resume`` never overwrites one. Then check the folder
    takes files, before any data is read."""
    cfg = run.config
    if cfg.checkpoint is None:
        return
    folder = Path(cfg.checkpoint)
    if not cfg.resume:
        found = saved_checkpoints(run)
        if found:
            shown = ", ".join(str(p.relative_to(folder)) for p in found[:4]) + (", ..." if len(found) > 4 else "")
            raise ValueError(
                f"checkpoint folder {cfg.checkpoint} already holds {shown}: "
                "pass --resume to continue that run, or choose another --checkpoint folder"
            )
    check_writable_folder(folder, "checkpoint")


def remove_checkpoints(run: ResolvedRun) -> None:
    """Delete the finished run's checkpoints (and FedALC's client secret beside its checkpoint) in
    its checkpoint folder and the ``seed<k>/`` folders, then the folders if nothing else is in them:
    results are written, nothing is left to resume."""
    if run.config.checkpoint is None:
        return
    folder = Path(run.config.checkpoint)
    for path in saved_checkpoints(run):
        path.unlink(missing_ok=True)
        path.with_suffix(".secret").unlink(missing_ok=True)  # FedALC's client secret, kept only to resume
    for sub in [*sorted(folder.glob("seed*")), folder]:
        with contextlib.suppress(OSError):  # not empty (a user's file), not a folder, or gone: leave it
            sub.rmdir()


def run_options(name: str, run: ResolvedRun) -> dict[str, Any]:
    """The options of algorithm ``name`` (as registered) for a run: :meth:`ExperimentConfig.options_for`,
    plus, for a strategy keyed by a client secret (FedALC) that checkpoints with neither ``client_secret``
    nor ``client_secret_file`` given, ``client_secret_file = <checkpoint>/<name>.secret`` (mode 0600), so
    ``--resume`` finds the same secret and the secret is never written into the results. The class is
    the resolved strategy's (``run.strategies[name]``): no name is looked up."""
    cfg = run.config
    options = cfg.options_for(name)
    if cfg.checkpoint is None or "client_secret" in options or "client_secret_file" in options:
        return options
    cls = type(run.strategies[name])
    inits = [k.__dict__["__init__"] for k in cls.__mro__[:-1] if "__init__" in k.__dict__]
    takes = any("client_secret_file" in inspect.signature(init).parameters for init in inits)
    if takes:
        options["client_secret_file"] = str(Path(cfg.checkpoint) / f"{cls.name}.secret")
    return options
