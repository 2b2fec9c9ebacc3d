"""``plot RUNS --tuning --out FILE.png``: per study, Optuna's own optimisation history and
hyperparameter importances (``optuna.visualization.matplotlib``), one figure with a row per study.

Opens each study's journal (``RUNS/GRID.tuning/STUDY/journal.log``) read-only through Optuna's
``JournalStorage``; the study summaries say which studies belong to the inputs.
"""
from __future__ import annotations

import warnings
from pathlib import Path

from benchmark.errors import ProtobenchError
from benchmark.study_summary import JOURNAL_FILE, read_study_summary
from reports.tuning import summary_files


def _study(directory: Path, name: str):  # -> optuna.Study
    import optuna
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend, JournalFileOpenLock

    journal = str(directory / JOURNAL_FILE)
    storage = JournalStorage(JournalFileBackend(journal, lock_obj=JournalFileOpenLock(journal)))
    return optuna.load_study(study_name=name, storage=storage)


def plot_tuning(inputs: list[Path], out: Path) -> int:
    """Write the figure; the number of studies drawn."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import optuna
    from optuna.visualization.matplotlib import plot_optimization_history, plot_param_importances

    files = summary_files(inputs)
    if not files:
        raise ProtobenchError(f"no study summary beside or inside {', '.join(map(str, inputs))}; "
                              "run `protobench tune GRID --trials N` first")
    images = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        warnings.simplefilter("ignore", UserWarning)  # importance ties on a few trials (said by the figure itself)
        for path in files:
            summary = read_study_summary(path)  # checked: a damaged summary is one error naming it
            study = _study(path.parent, summary["study"])
            target = (lambda t: t.values[0]) if len(study.directions) > 1 else None
            name = "validation " + summary["objectives"][0]
            history = plot_optimization_history(study, target=target, target_name=name).figure
            history.suptitle(study.study_name, fontsize=8)
            images.append(history)
            complete = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
            if len(complete) >= 2 and study.trials[0].distributions:
                importance = plot_param_importances(study, target=target, target_name=name).figure
                importance.suptitle(study.study_name, fontsize=8)
                images.append(importance)
    _combine(images, out, plt)
    return len(files)


def _combine(figures: list, out: Path, plt) -> None:
    """Optuna draws one figure per plot: render each and stack them into ``out``."""
    import io

    from PIL import Image

    pictures = []
    for figure in figures:
        buffer = io.BytesIO()
        figure.savefig(buffer, format="png", dpi=100, bbox_inches="tight")
        plt.close(figure)
        buffer.seek(0)
        pictures.append(Image.open(buffer).convert("RGB"))
    width, height = max(p.width for p in pictures), sum(p.height for p in pictures)
    sheet = Image.new("RGB", (width, height), "white")
    top = 0
    for picture in pictures:
        sheet.paste(picture, (0, top))
        top += picture.height
    out.parent.mkdir(parents=True, exist_ok=True)
    sheet.save(out, format="PNG")
