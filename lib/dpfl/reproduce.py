"""Run the paper notebooks headlessly with papermill and write ``figures/``.

    python -m dpfl.reproduce                       # every notebook, profile "paper"
    python -m dpfl.reproduce asoodeh2020 --profile smoke

For each notebook: execute it with the parameters ``profile``, ``device``, ``seed``, ``data_dir``
and ``out_dir`` (= ``figures/<paper-id>/``), keep the executed copy there, record ``RUN.json``
(provenance and wall time); then write ``figures/REPORT.md`` from every paper's comparisons.
A failing cell stops the run with the notebook, the cell and the error named (exit status 1).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from dpfl import checks, reporting
from dpfl.io import write_text
from dpfl.notebook import PROFILES, resolve_device
from dpfl.provenance import provenance

#: paper id → notebook file, in the order of ``../shared/papers/INDEX.md``.
NOTEBOOKS = {
    "zheng2021": "zheng2021_federated_fdp.ipynb",
    "kim2021": "kim2021_ldp_tradeoffs.ipynb",
    "aldaghri_fedhdp": "aldaghri_fedhdp.ipynb",
    "asoodeh2020": "asoodeh2020_contraction.ipynb",
    "geyer2017": "geyer2017_client_level.ipynb",
}

#: Notebooks whose ``paper`` profile trains at the papers' scale (~10⁶ DP-SGD client steps per
#: configuration): on a machine without a GPU they run at ``quick`` unless ``--cpu-paper`` is given,
#: and RUN.json / REPORT.md say so.
GPU_PAPER = {"zheng2021", "geyer2017"}


def effective_profile(paper: str, profile: str, device: str, cpu_paper: bool = False) -> str:
    """The profile a notebook runs at: ``quick`` instead of ``paper`` for :data:`GPU_PAPER`
    notebooks on a CPU (days of training there), unless ``cpu_paper``."""
    if profile == "paper" and paper in GPU_PAPER and not cpu_paper and not resolve_device(device).startswith("cuda"):
        return "quick"
    return profile


class NotebookFailed(RuntimeError):
    """A notebook cell raised; the message names the notebook, the cell and the error."""


def run_notebook(paper: str, *, profile: str, notebooks_dir="notebooks", figures_dir="figures",
                 device: str = "auto", seed: int = 0, data_dir=None, note: str = "", log=print) -> dict:
    """Execute one paper notebook; return its ``RUN.json`` record (``note``, when given, is kept there
    and shown in REPORT.md). Raises :class:`NotebookFailed`."""
    import papermill

    checks.one_of("paper", paper, NOTEBOOKS)
    checks.one_of("profile", profile, PROFILES)
    source = Path(notebooks_dir) / NOTEBOOKS[paper]
    if not source.exists():
        raise FileNotFoundError(f"{source} does not exist (notebook for {paper!r} not written yet)")
    out_dir = (Path(figures_dir) / paper).resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    executed = out_dir / source.name
    partial = out_dir / (source.stem + ".partial.ipynb")
    parameters = {"profile": profile, "device": device, "seed": seed,
                  "data_dir": str(data_dir) if data_dir else None, "out_dir": str(out_dir)}
    start = time.perf_counter()
    try:
        papermill.execute_notebook(
            str(source), str(partial), parameters=parameters, cwd=str(source.parent.resolve()),
            kernel_name="python3", progress_bar=sys.stderr.isatty(), log_output=False)
    except papermill.PapermillExecutionError as err:
        failed = out_dir / (source.stem + ".failed.ipynb")
        os.replace(partial, failed)
        raise NotebookFailed(
            f"{source} failed in cell {err.cell_index} (execution count {err.exec_count}): "
            f"{err.ename}: {err.evalue}\n  executed copy with the traceback: {failed}") from None
    os.replace(partial, executed)
    (out_dir / (source.stem + ".failed.ipynb")).unlink(missing_ok=True)
    wall = time.perf_counter() - start
    record = provenance(paper=paper, notebook=str(source), profile=profile, seed=seed,
                        device=resolve_device(device), wall_time_s=round(wall, 1), **({"note": note} if note else {}))
    write_text(out_dir / "RUN.json", json.dumps(record, indent=2) + "\n")
    log(f"      done in {wall:.1f} s → {out_dir}")
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
    args = parser.parse_args(argv)

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
    for k, paper in enumerate(available, 1):
        profile = effective_profile(paper, args.profile, args.device, args.cpu_paper)
        if profile != args.profile:
            print(f"  {paper}: profile paper trains at the papers' scale and needs a GPU; none here, so it runs "
                  f"at profile quick (pass --cpu-paper to insist)", flush=True)
        print(f"[{k}/{len(available)}] {paper} (profile={profile}, "
              f"elapsed {time.perf_counter() - start:.0f} s)", flush=True)
        try:
            run_notebook(paper, profile=profile, notebooks_dir=args.notebooks_dir,
                         note="paper requested; it needs a GPU and none was found" if profile != args.profile else "",
                         figures_dir=args.figures_dir, device=args.device, seed=args.seed,
                         data_dir=args.data_dir)
        except NotebookFailed as err:
            print(f"FAILED: {err}", file=sys.stderr)
            return 1
    report = reporting.write_report(Path(args.figures_dir))
    print(f"wrote {report} ({time.perf_counter() - start:.1f} s in all)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
