"""Run the paper notebooks headlessly with papermill and write ``figures/``.

    python -m dpfl.reproduce                       # every notebook, profile "paper"
    python -m dpfl.reproduce asoodeh2020 --profile smoke

For each notebook: execute it with the parameters ``profile``, ``device``, ``seed``, ``data_dir``,
``out_dir``, ``cache_dir`` (and ``interactive=False`` where it ends with an explorer: a static
figure) into a staging directory (``figures/.staging/<paper-id>/``), with its cached runs in
``figures/<paper-id>/cache`` (kept across runs, so an interrupted grid resumes); when it succeeds,
record ``RUN.json`` (provenance and wall time) and swap the staging directory in as
``figures/<paper-id>/``. A notebook that fails changes nothing in ``figures/<paper-id>/``: its
executed copy with the traceback stays in the staging directory, the other notebooks still run, and
at the end every failure is listed with its reason and the exit status is 1. Then
``figures/REPORT.md`` is written from every paper's comparisons. The executed copy is made portable
first (:func:`portable`): no path of the machine that ran it stays in it.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import time
from pathlib import Path

from dpfl import checks, reporting, runs
from dpfl.data.datasets import data_root
from dpfl.io import write_text
from dpfl.notebook import PROFILES, resolve_device
from dpfl.provenance import provenance

#: paper id → notebook file, in the order of the README's paper list.
NOTEBOOKS = {
    "zheng2021": "zheng2021_federated_fdp.ipynb",
    "kim2021": "kim2021_ldp_tradeoffs.ipynb",
    "aldaghri_fedhdp": "aldaghri_fedhdp.ipynb",
    "asoodeh2020": "asoodeh2020_contraction.ipynb",
    "geyer2017": "geyer2017_client_level.ipynb",
    "audits": "audits.ipynb",
}

#: Notebooks whose ``paper`` profile trains at the papers' scale (~10⁶ DP-SGD client steps per
#: configuration): on a machine without a GPU they run at ``quick`` unless ``--cpu-paper`` is given,
#: and RUN.json / REPORT.md say so. (geyer2017's paper profile runs its K = 100 grid on a CPU in about
#: an hour and leaves its GPU grids pending there, so it is not one of them.)
GPU_PAPER = {"zheng2021"}


def effective_profile(paper: str, profile: str, device: str, cpu_paper: bool = False) -> str:
    """The profile a notebook runs at: ``quick`` instead of ``paper`` for :data:`GPU_PAPER`
    notebooks on a CPU (days of training there), unless ``cpu_paper``."""
    if profile == "paper" and paper in GPU_PAPER and not cpu_paper and not resolve_device(device).startswith("cuda"):
        return "quick"
    return profile


class NotebookFailed(RuntimeError):
    """A notebook cell raised; the message names the notebook, the cell and the error."""


def _staging(figures_dir, paper: str) -> Path:
    return Path(figures_dir).resolve() / ".staging" / paper


def recover(figures_dir, paper: str) -> None:
    """Finish a swap that was interrupted (see :func:`swap_in`): put back the outputs and cache of
    ``figures/<paper>/`` from ``figures/.staging/<paper>.old`` where they are missing."""
    final = Path(figures_dir).resolve() / paper
    old = _staging(figures_dir, paper).with_name(paper + ".old")
    if old.exists() and not final.exists():
        os.replace(old, final)
    _keep_cache(old, final)


def _keep_cache(old: Path, final: Path) -> None:
    """Move the run cache from the replaced outputs ``old`` into ``final``, then delete ``old``."""
    if (old / "cache").exists() and not (final / "cache").exists():
        os.replace(old / "cache", final / "cache")
    if old.exists():
        shutil.rmtree(old)


def swap_in(staging: Path, final: Path) -> None:
    """Make ``staging`` (a finished run's outputs) the new ``final``, keeping ``final/cache``.

    Three renames: ``final`` → ``<staging>.old``, ``staging`` → ``final``, the old cache into the
    new ``final``; :func:`recover` completes the sequence if it is interrupted."""
    old = staging.with_name(staging.name + ".old")
    if old.exists():
        shutil.rmtree(old)
    if final.exists():
        os.replace(final, old)
    os.replace(staging, final)
    _keep_cache(old, final)


def portable(text: str, paths: dict) -> str:
    """``text`` with every absolute path in ``paths`` (path → what stands for it, e.g. the staging
    directory → ``figures/<paper>``, the repository → ``.``, the data → ``$DPFL_DATA``) replaced, the
    longest first, so that an executed notebook names nothing of the machine that ran it. A path is
    replaced only where a path separator, a quote or the end follows it (``/a/b`` not inside ``/a/bc``)."""
    for path in sorted(paths, key=len, reverse=True):
        if path:
            text = re.sub(re.escape(str(path)) + r'(?=[/\\"\'\s:)]|$)', lambda _m, p=path: paths[p], text)
    return text


def absolute_paths(environ=os.environ) -> None:
    """Make the paths the kernels read from ``environ`` absolute, from the current directory: every
    entry of ``PYTHONPATH``, and ``DPFL_DATA`` and ``DPFL_CACHE``. The kernels inherit them but run in
    ``notebooks/`` (papermill's ``cwd``), where a relative path finds nothing: with ``PYTHONPATH=lib`` (how
    dpfl runs without an install, e.g. on the GPU machine) every notebook failed with ``No module named
    'dpfl'``, and with ``DPFL_DATA=.devdata`` with "data_dir '.devdata' is not an existing directory"
    (H200, 2026-11-26, two sessions). Empty entries and unset variables stay as they are."""
    entries = environ.get("PYTHONPATH")
    if entries:
        environ["PYTHONPATH"] = os.pathsep.join(str(Path(e).resolve()) if e else e for e in entries.split(os.pathsep))
    for name in ("DPFL_DATA", "DPFL_CACHE"):
        if environ.get(name):
            environ[name] = str(Path(environ[name]).expanduser().resolve())


def run_notebook(paper: str, *, profile: str, notebooks_dir="notebooks", figures_dir="figures",
                 device: str = "auto", seed: int = 0, data_dir=None, note: str = "", log=print) -> dict:
    """Execute one paper notebook into a staging directory and swap it into ``figures/<paper>/``
    when it succeeds; return its ``RUN.json`` record (``note``, when given, is kept there and shown
    in REPORT.md). Raises :class:`NotebookFailed`, leaving ``figures/<paper>/`` as it was."""
    import papermill

    checks.one_of("paper", paper, NOTEBOOKS)
    checks.one_of("profile", profile, PROFILES)
    source = Path(notebooks_dir) / NOTEBOOKS[paper]
    if not source.exists():
        raise FileNotFoundError(f"{source} does not exist (notebook for {paper!r} not written yet)")
    recover(figures_dir, paper)
    final = (Path(figures_dir) / paper).resolve()
    staging = _staging(figures_dir, paper)
    if staging.exists():
        shutil.rmtree(staging)                       # what a failed or interrupted run left
    staging.mkdir(parents=True)
    executed = staging / source.name
    parameters = {"profile": profile, "device": device, "seed": seed,
                  "data_dir": str(Path(data_dir).expanduser().resolve()) if data_dir else None, "out_dir": str(staging),
                  "cache_dir": str(final / "cache")}
    if "interactive =" in source.read_text():        # a notebook that ends with an explorer: a static figure
        parameters["interactive"] = False
    absolute_paths()
    start = time.perf_counter()
    try:
        papermill.execute_notebook(
            str(source), str(executed), parameters=parameters, cwd=str(source.parent.resolve()),
            kernel_name="python3", progress_bar=sys.stderr.isatty(), log_output=False)
    except papermill.PapermillExecutionError as err:
        failed = executed.with_name(source.stem + ".failed.ipynb")
        os.replace(executed, failed)
        raise NotebookFailed(
            f"{source} failed in cell {err.cell_index} (execution count {err.exec_count}): "
            f"{err.ename}: {err.evalue}\n  executed copy with the traceback: {failed}\n"
            f"  {final} is unchanged") from None
    wall = time.perf_counter() - start
    repo = Path(notebooks_dir).resolve().parent
    paths = {str(staging): f"figures/{paper}", str(final): f"figures/{paper}", str(repo): ".",
             str(data_root(data_dir).resolve()): "$DPFL_DATA",
             str(Path.home()): "~"}
    write_text(executed, portable(executed.read_text(encoding="utf-8"), paths))
    record = provenance(paper=paper, notebook=str(source), profile=profile, seed=seed,
                        device=resolve_device(device), wall_time_s=round(wall, 1), **({"note": note} if note else {}))
    write_text(staging / "RUN.json", json.dumps(record, indent=2) + "\n")
    swap_in(staging, final)
    log(f"      done in {wall:.1f} s → {final}")
    return record


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dpfl.reproduce", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("papers", nargs="*", metavar="PAPER",
                        help=f"paper ids (default: all): {', '.join(NOTEBOOKS)}")
    parser.add_argument("--profile", default="paper", choices=PROFILES)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--data-dir", default=os.environ.get("DPFL_DATA"))
    parser.add_argument("--notebooks-dir", default="notebooks")
    parser.add_argument("--figures-dir", default="figures")
    parser.add_argument("--cpu-paper", action="store_true",
                        help=f"run {', '.join(sorted(GPU_PAPER))} at profile paper even without a GPU (days)")
    parser.add_argument("--results-only", action="store_true", default=runs.env_flag("RESULTS_ONLY"),
                        help="compute nothing: render every notebook from cached results (e.g. runs computed on a "
                             "GPU elsewhere) at the requested profile; a missing result fails its notebook with "
                             "the list of what is missing (default: the RESULTS_ONLY environment variable)")
    parser.add_argument("--ray", metavar="ADDRESS", default=os.environ.get("DPFL_RAY_ADDRESS") or None,
                        help="send the notebooks' grids of training runs to this Ray cluster ('auto': the one this "
                             "machine belongs to; 'ray://host:10001'; 'local': start one here), one task per run, "
                             "into the same cache (needs pip install 'dpfl[cluster]'; README, 'On a Ray cluster')")
    args = parser.parse_args(argv)
    try:                                             # else every notebook would start, only to fail on it
        checks.device("--device", args.device, auto=True)
        checks.nonnegative_int("--seed", args.seed)
    except ValueError as exc:
        parser.error(str(exc))
    if args.results_only:
        os.environ["RESULTS_ONLY"] = "1"             # the notebooks' kernels inherit it
    if args.ray:
        os.environ["DPFL_RAY_ADDRESS"] = args.ray    # read by dpfl.runs.run_many in the kernels

    for paper in args.papers:
        if paper not in NOTEBOOKS:
            parser.error(f"unknown paper {paper!r}; choose from {', '.join(NOTEBOOKS)}")
    explicit = bool(args.papers)
    papers = args.papers or list(NOTEBOOKS)
    available = [p for p in papers if (Path(args.notebooks_dir) / NOTEBOOKS[p]).exists()]
    for paper in sorted(set(papers) - set(available), key=papers.index):
        print(f"  {paper}: notebook {NOTEBOOKS[paper]} not written yet — skipped")
    if explicit and len(available) < len(papers):
        return 2
    start = time.perf_counter()
    failures = {}
    for k, paper in enumerate(available, 1):
        profile = effective_profile(paper, args.profile, args.device, args.cpu_paper or args.results_only)
        if profile != args.profile:
            print(f"  {paper}: profile paper trains at the papers' scale and needs a GPU; none here, so it runs "
                  f"at profile quick (pass --cpu-paper to insist)", flush=True)
        print(f"[{k}/{len(available)}] {paper} (profile={profile}, "
              f"elapsed {time.perf_counter() - start:.0f} s)", flush=True)
        try:
            run_notebook(paper, profile=profile, notebooks_dir=args.notebooks_dir,
                         note=("paper requested; it needs a GPU and none was found" if profile != args.profile
                               else "results only: read from the cache, nothing computed" if args.results_only else ""),
                         figures_dir=args.figures_dir, device=args.device, seed=args.seed,
                         data_dir=args.data_dir)
        except NotebookFailed as err:
            failures[paper] = str(err)
            print(f"      FAILED (the other notebooks still run): {err}", file=sys.stderr, flush=True)
    report = reporting.write_report(Path(args.figures_dir))
    print(f"wrote {report} ({time.perf_counter() - start:.1f} s in all)")
    if failures:
        print(f"\n{len(failures)} of {len(available)} notebook(s) failed; their figures are unchanged:",
              file=sys.stderr)
        for paper, reason in failures.items():
            print(f"  {paper}: {reason}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
