"""Interactive explorers: a few sliders over the library's own functions, one explorer per paper.

An :class:`Explorer` is a specification, not a widget: its controls (each a name, a label and the
values its slider offers), a pure ``compute(**values)`` that calls the library and returns a
:class:`Reading` (a table of numbers, the curves to draw, a note on what is approximate), and a
``draw(reading, figure)``. :func:`show` turns it into ipywidgets sliders in JupyterLab, or — run
headlessly by papermill (``interactive=False``), or where ipywidgets is missing — draws the static
figure at the defaults. Sliders offer a fixed set of values so that a setting seen once is answered
from a cache; each paper module states what is cached and why (docs/teaching.md).

    from dpfl.explorers import show, zheng2021
    show(zheng2021.EXPLORER)                      # sliders in JupyterLab
    zheng2021.EXPLORER(sigma=1.0, rounds=93)      # the numbers alone: a Reading
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

import pandas as pd

__all__ = ["Control", "Reading", "Explorer", "show", "widget"]


@dataclasses.dataclass(frozen=True)
class Control:
    """One slider: the keyword ``name`` of ``compute``, its ``label`` and the ``options`` it offers."""

    name: str
    label: str
    options: tuple
    default: Any

    def __post_init__(self):
        if self.default not in self.options:
            raise ValueError(f"default of {self.name!r} must be one of its options {self.options}; got {self.default!r}")


@dataclasses.dataclass(frozen=True)
class Reading:
    """What an explorer computed at one setting: ``table`` (the numbers, one row per method or
    quantity), ``curves`` (what ``draw`` plots) and ``note`` (approximations, caveats)."""

    table: pd.DataFrame
    curves: dict
    note: str = ""


@dataclasses.dataclass(frozen=True)
class Explorer:
    """``compute(**values, **fixed) -> Reading`` over ``controls``; ``draw(reading, figure)``."""

    title: str
    controls: tuple
    compute: Callable[..., Reading]
    draw: Callable
    fixed: dict = dataclasses.field(default_factory=dict)
    figsize: tuple = (9.0, 3.4)

    def defaults(self) -> dict:
        return {c.name: c.default for c in self.controls}

    def with_fixed(self, **fixed) -> "Explorer":
        """The same explorer with more keyword arguments passed to ``compute`` (not sliders)."""
        return dataclasses.replace(self, fixed=self.fixed | fixed)

    def __call__(self, **values) -> Reading:
        names = {c.name for c in self.controls}
        unknown = set(values) - names
        if unknown:
            raise ValueError(f"unknown control(s) {sorted(unknown)} for {self.title!r}; accepted: {sorted(names)}")
        return self.compute(**(self.defaults() | values), **self.fixed)


def _render(explorer: Explorer, values: dict) -> None:
    import matplotlib.pyplot as plt
    from IPython.display import display

    try:
        reading = explorer(**values)
    except ValueError as err:        # a setting the method does not accept: say why, draw nothing
        print(f"Not computed: {err}")
        return
    fig = plt.figure(figsize=explorer.figsize, layout="constrained")
    explorer.draw(reading, fig)
    plt.show()
    display(reading.table)
    if reading.note:
        print(reading.note)


def widget(explorer: Explorer):
    """The ipywidgets view: one selection slider per control above the figure and table, redrawn
    when a slider is released. Returns (box, {name: slider})."""
    import ipywidgets as w

    sliders = {c.name: w.SelectionSlider(options=list(c.options), value=c.default, description=c.label,
                                         continuous_update=False, style={"description_width": "initial"},
                                         layout=w.Layout(width="420px"))
               for c in explorer.controls}
    out = w.interactive_output(lambda **values: _render(explorer, values), sliders)
    box = w.VBox([w.HTML(f"<b>{explorer.title}</b>"), w.VBox(list(sliders.values())), out])
    return box, sliders


def show(explorer: Explorer, interactive: bool = True) -> None:
    """Sliders in a live notebook; the static figure at the defaults when ``interactive`` is False
    (papermill runs, the book) or ipywidgets is not installed."""
    from IPython.display import display

    if interactive:
        try:
            box, _ = widget(explorer)
        except ImportError:
            print("ipywidgets is not installed (pip install 'dpfl[lab]'): the static view follows.")
        else:
            display(box)
            return
    defaults = ", ".join(f"{c.label} = {c.default:g}" if isinstance(c.default, float) else f"{c.label} = {c.default}"
                         for c in explorer.controls)
    print(f"{explorer.title} — static view at the defaults ({defaults}); "
          "open the notebook in JupyterLab with interactive = True to move the sliders.")
    _render(explorer, explorer.defaults())
