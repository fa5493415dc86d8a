"""The monitor's plots: textual-plotext widgets fed with points the MetricsStore already thinned.

Plotext lays a figure out in pure Python (tens of milliseconds for a busy plot), so a new
figure is built in a thread worker and the widget shows the finished text when it arrives;
until then it keeps showing the previous one. Only a change of size (or theme) makes
`render` build on the UI thread, because the old text would not fit.

Terminal traffic: data equal to what is drawn builds nothing; a new figure is compared cell
by cell with the drawn one and only the cells that changed are repainted (a new point that
moves no dot writes nothing to the terminal; one that does writes a few cells, not the plot).
For that the axes hold still: the x axis spans the whole run (to max_steps when known, else a
round number ahead), the y axis has round limits that move only when a value leaves them, and
the points are thinned per pixel column of that fixed axis (`pixel_thin`), so a new point
changes the last column, not every column.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from rich.cells import cell_len
from rich.text import Text
from textual import work
from textual.app import RenderResult
from textual.geometry import Region
from textual.worker import get_current_worker
from textual_plotext import PlotextPlot
from textual_plotext.plot import Plot

Points = tuple[Sequence[float], Sequence[float]]
LINE = "braille"  # 2x4 dots per cell: the finest a terminal draws


def _positive(points: Points) -> Points:
    """Only what a log axis can show."""
    kept = [(x, y) for x, y in zip(*points, strict=True) if y > 0]
    return [x for x, _ in kept], [y for _, y in kept]


def step_ticks(low: float, high: float, count: int = 6) -> list[int]:
    """About `count` round step numbers from low to high (steps are whole numbers)."""
    span = max(1.0, high - low)
    raw = span / max(1, count - 1)
    magnitude = 10 ** math.floor(math.log10(raw))
    step = max(1, int(next(m * magnitude for m in (1, 2, 5, 10) if m * magnitude >= raw)))
    first = math.ceil(low / step) * step
    return list(range(int(first), int(high) + 1, step)) or [int(low)]


def value_ticks(low: float, high: float, count: int = 5) -> tuple[list[float], list[str]]:
    """Ticks an even, round step apart from `low` to `high` (limits `round_limits` chose), labelled alike: one
    format, one number of decimals (0.000 0.001 0.002 0.003, never 0.00200 beside 0.00050)."""
    if not (math.isfinite(low) and math.isfinite(high)) or high <= low:
        return [low], [f"{low:.3g}"]
    unit = 10 ** math.floor(math.log10(high - low))
    fits = []  # (how far from `count` ticks, step) for each round step that divides the span exactly
    for m in (0.2, 0.25, 0.5, 1, 2, 2.5, 3, 4, 5):
        intervals = (high - low) / (m * unit)
        if abs(intervals - round(intervals)) < 1e-6 and 2 <= round(intervals) <= 6:
            odd = 1.1 if m in (0.25, 2.5, 3, 4) else 0.0  # 1-2-5 steps first
            fits.append((abs(round(intervals) + 1 - count) + odd, m * unit))
    if fits:
        step = min(fits)[1]
        ticks = [low + k * step for k in range(round((high - low) / step) + 1)]
    else:  # round steps inside the limits, at most count + 1 of them
        step = next(m * unit for m in (1, 2, 5, 10) if (high - low) / (m * unit) <= count)
        ticks = [k * step for k in range(math.ceil(low / step - 1e-9), math.floor(high / step + 1e-9) + 1)]
    biggest = max(abs(low), abs(high))
    if biggest >= 1e5 or step < 1e-4:
        return ticks, [f"{t:.1e}" for t in ticks]
    decimals = next(d for d in range(12) if abs(round(step, d) - step) <= step * 1e-6)
    return ticks, [f"{t:.{decimals}f}" for t in ticks]


def _cells(line: Text) -> list[tuple[str, tuple[Any, ...]]]:
    """Each character of a one-line Text with the styles that cover it."""
    styles: list[tuple[Any, ...]] = [()] * len(line.plain)
    for span in line.spans:
        for at in range(span.start, min(span.end, len(styles))):
            styles[at] += (span.style,)
    return list(zip(line.plain, styles, strict=True))


def changed_regions(old: Text, new: Text) -> list[Region] | None:
    """The cells where `new` differs from `old`, one region per changed line; None when the
    figures do not line up cell for cell (another height, or wide characters)."""
    old_lines, new_lines = old.split("\n", allow_blank=True), new.split("\n", allow_blank=True)
    if len(old_lines) != len(new_lines):
        return None
    regions = []
    for y, (before, after) in enumerate(zip(old_lines, new_lines, strict=True)):
        if before.plain == after.plain and before.spans == after.spans:
            continue
        if cell_len(after.plain) != len(after.plain) or cell_len(before.plain) != len(before.plain):
            return None
        a, b = _cells(before), _cells(after)
        width = max(len(a), len(b))
        a += [(" ", ())] * (width - len(a))
        b += [(" ", ())] * (width - len(b))
        differing = [x for x in range(width) if a[x] != b[x]]
        if differing:
            regions.append(Region(differing[0], y, differing[-1] - differing[0] + 1, 1))
    return regions


def _fingerprint(shown: dict[str, Points | None], options: dict[str, Any]) -> tuple[Any, ...]:
    """What a figure is drawn from, comparable: equal fingerprints draw the same figure."""
    data = tuple((name, None if points is None else tuple(bytes(memoryview(_array(p))) for p in points))
                 for name, points in shown.items())
    return data, tuple(sorted(options.items()))


def _array(values: Sequence[float]) -> Any:
    import numpy as np

    return np.ascontiguousarray(values, dtype=float)


def round_limits(low: float, high: float) -> tuple[float, float]:
    """Round limits around [low, high] (a power of ten of the span): new values rarely move them."""
    if not (math.isfinite(low) and math.isfinite(high)):
        return low, high
    span = high - low or abs(high) or 1.0
    step = 10 ** math.floor(math.log10(span))
    return math.floor(low / step) * step, math.ceil(high / step) * step if high > low else low + step


def pixel_thin(points: Points, low: float, high: float, columns: int) -> Points:
    """At most the lowest and highest point of each of `columns` pixel columns over a fixed [low, high]
    (and the last point): a finished column never changes, so older parts of a plot hold still."""
    import numpy as np

    xs, ys = np.asarray(points[0], dtype=float), np.asarray(points[1], dtype=float)
    if len(xs) <= columns:
        return points
    column = np.clip(((xs - low) / max(high - low, 1e-12) * columns).astype(np.int64), 0, columns - 1)
    order = np.lexsort((ys, column))
    starts = np.unique(column[order], return_index=True)[1]
    ends = np.append(starts[1:] - 1, len(order) - 1)
    keep = np.unique(np.concatenate([order[starts], order[ends], [len(xs) - 1]]))
    return xs[keep].tolist(), ys[keep].tolist()


def _finite(*series: Points | None) -> list[float]:
    return [y for points in series if points for y in points[1] if math.isfinite(y)]


class MetricPlot(PlotextPlot):
    """A plot whose figure is described by `shown` (+ options) and drawn by `draw(plt)`."""

    def __init__(self, *, name: str | None = None, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(name=name, id=id, classes=classes)
        self.shown: dict[str, Points | None] = {}
        self.options: dict[str, Any] = {}
        self.generation = 0  # bumped by every show() that brings new data
        self.built: tuple[tuple[Any, ...], Text] | None = None  # ((width, height, theme, generation), text)
        self.fingerprint: tuple[Any, ...] | None = None  # of the data and options last shown
        self.repaints = 0  # how often new cells reached the screen (tests and benches read it)

    # ------------------------------------------------------------ describing

    def _show(self, options: dict[str, Any], **shown: Points | None) -> None:
        """New data: remember it and have the figure built off the UI thread (nothing when it is the same)."""
        fingerprint = _fingerprint(shown, options)
        if fingerprint == self.fingerprint:
            return
        self.shown, self.options, self.fingerprint = shown, options, fingerprint
        self.generation += 1
        if self.size.area:
            self._build(self._key(), shown, options)

    @property
    def up_to_date(self) -> bool:
        """The newest data is what the widget shows (or it is hidden, with nothing to show)."""
        return not self.size.area or not self.has_data or (self.built is not None and self.built[0] == self._key())

    @property
    def has_data(self) -> bool:
        return any(points and len(points[0]) for points in self.shown.values())

    def draw(self, plt: Plot, shown: dict[str, Points | None], options: dict[str, Any]) -> None:
        """Put `shown` on a fresh figure (subclasses)."""
        raise NotImplementedError

    @staticmethod
    def _draw_axes(plt: Plot, shown: dict[str, Points | None], options: dict[str, Any]) -> None:
        plt.title(options.get("title", ""))
        xs = [x for points in shown.values() if points for x in points[0]]
        if options.get("xlim"):
            low, high = options["xlim"]
            plt.xlim(low, high)
            plt.xticks(step_ticks(low, high))  # type: ignore[arg-type]  # textual-plotext annotates ticks list[float] (invariant): ints are ticks too
        elif xs:
            plt.xticks(step_ticks(min(xs), max(xs)))  # type: ignore[arg-type]  # textual-plotext annotates ticks list[float] (invariant): ints are ticks too

    @staticmethod
    def _hold_y(plt: Plot, values: list[float], yside: str | None = None) -> None:
        """Round y limits (a linear axis): the plot rescales only when a value leaves them."""
        if values:
            low, high = round_limits(min(values), max(values))
            ticks, labels = value_ticks(low, high)
            if yside:
                plt.ylim(low, high, yside=yside)  # type: ignore[arg-type]  # textual-plotext types yside as float; plotext takes "left"/"right"
                plt.yticks(ticks, labels, yside=yside)  # type: ignore[arg-type]  # as above
            else:
                plt.ylim(low, high)
                plt.yticks(ticks, labels)

    # ------------------------------------------------------------ building

    def _key(self) -> tuple[Any, ...]:
        return (self.size.width, self.size.height, self._get_plotext_theme_name(self.app.theme), self.generation)

    def _figure_text(self, key: tuple[Any, ...], shown: dict[str, Points | None], options: dict[str, Any]) -> Text:
        width, height, theme, _ = key
        plt = Plot()
        plt.plotsize(width, height)
        plt._set_size(width, height)  # as PlotextPlot.render does (textual-plotext issue 5)
        self.draw(plt, shown, options)
        plt.theme(theme)
        return Text.from_ansi(plt.build())

    @work(thread=True, exclusive=True, group="plot-build", exit_on_error=False, description="Drawing a plot")
    def _build(self, key: tuple[Any, ...], shown: dict[str, Points | None], options: dict[str, Any]) -> None:
        text = self._figure_text(key, shown, options)
        drawn = self.built
        regions = changed_regions(drawn[1], text) if drawn is not None and drawn[0][:3] == key[:3] else None
        if not get_current_worker().is_cancelled:  # a newer figure is on its way
            self.app.call_from_thread(self._built, key, text, drawn, regions)

    def _built(self, key: tuple[Any, ...], text: Text, compared: Any = None, regions: list[Region] | None = None) -> None:
        if self.built is not None and key[3] < self.built[0][3]:
            return
        same_base = compared is not None and self.built is compared
        self.built = (key, text)
        if same_base and regions is not None:
            if regions:  # only the cells that changed reach the terminal
                self.repaints += 1
                self.refresh(*regions)
            return
        self.repaints += 1
        self.refresh()

    def render(self) -> RenderResult:
        if not self.has_data:
            return Text("")  # nothing to plot yet: no empty axes painted first and then again with data
        key = self._key()
        if self.built is not None and self.built[0][:3] == key[:3]:
            return self.built[1]  # same size and theme: current, or the newest until its successor lands
        self.built = (key, self._figure_text(key, self.shown, self.options))
        return self.built[1]


class LossPlot(MetricPlot):
    """Train loss (raw and EMA-smoothed) and eval loss on one plot."""

    @property
    def log_scale(self) -> bool:
        return bool(self.options.get("log_scale"))

    def show(self, train: Points, smooth: Points | None, evals: Points, *, log_scale: bool, title: str,
             xlim: tuple[float, float] | None = None, alerts: tuple[int, ...] = ()) -> None:
        """`alerts`: steps of the watchdog's alerts, drawn as red vertical lines."""
        if log_scale:
            train, evals = _positive(train), _positive(evals)
            smooth = _positive(smooth) if smooth else None
        if alerts:
            title += " · " + ("alert at step " if len(alerts) == 1 else "alerts at steps ") + \
                ", ".join(str(step) for step in alerts[-4:]) + (" …" if len(alerts) > 4 else "")
        self._show({"log_scale": log_scale, "title": title, "xlim": xlim, "alerts": alerts},
                   train=train, smooth=smooth, evals=evals)

    def draw(self, plt: Plot, shown: dict[str, Points | None], options: dict[str, Any]) -> None:
        train, smooth, evals = shown.get("train"), shown.get("smooth"), shown.get("evals")
        if train and train[0]:
            plt.plot(train[0], train[1], marker=LINE, color="cyan", label="train")
        if smooth and smooth[0]:
            plt.plot(smooth[0], smooth[1], marker=LINE, color="orange", label="EMA")
        if evals and evals[0]:
            plt.scatter(evals[0], evals[1], marker="●", color="green", label="eval")
        for step in options.get("alerts", ()):
            plt.vline(step, color="red")
        plt.yscale("log" if options.get("log_scale") else "linear")
        if not options.get("log_scale"):
            self._hold_y(plt, _finite(train, smooth, evals))
        self._draw_axes(plt, shown, options)


class LrGradPlot(MetricPlot):
    """Learning rate (left axis) and gradient norm (right axis)."""

    def show(self, lr: Points, grad: Points, *, title: str, xlim: tuple[float, float] | None = None) -> None:
        self._show({"title": title, "xlim": xlim}, lr=lr, grad=grad)

    def draw(self, plt: Plot, shown: dict[str, Points | None], options: dict[str, Any]) -> None:
        lr, grad = shown.get("lr"), shown.get("grad")
        if lr and lr[0]:
            plt.plot(lr[0], lr[1], marker=LINE, color="magenta", label="lr", yside="left")
        if grad and grad[0]:
            plt.plot(grad[0], grad[1], marker=LINE, color="yellow", label="grad norm", yside="right")
            self._hold_y(plt, _finite(grad), yside="right")
        if lr and lr[0]:
            self._hold_y(plt, _finite(lr), yside="left")
        self._draw_axes(plt, shown, options)


class LossScalePlot(MetricPlot):
    """The dynamic loss scale on a log2 axis, with a red mark at every overflow (skipped step)."""

    def show(self, scale: Points, overflows: Points, *, title: str, xlim: tuple[float, float] | None = None) -> None:
        self._show({"title": title, "xlim": xlim}, scale=scale, overflows=overflows)

    def draw(self, plt: Plot, shown: dict[str, Points | None], options: dict[str, Any]) -> None:
        xs, ys = _positive(shown.get("scale") or ([], []))
        ox, oy = _positive(shown.get("overflows") or ([], []))
        exponents, marks = [math.log2(y) for y in ys], [math.log2(y) for y in oy]
        if xs:
            plt.plot(xs, exponents, marker=LINE, color="cyan", label="scale")
        if ox:
            plt.scatter(ox, marks, marker="x", color="red", label="overflow")
        every = exponents + marks
        if every:
            low, high = math.floor(min(every)), math.ceil(max(every))
            if high == low:
                low, high = low - 1, high + 1
            ticks = list(range(low, high + 1, max(1, (high - low) // 6 + 1)))
            plt.yticks(ticks, [f"2^{t}" for t in ticks])  # type: ignore[arg-type]  # textual-plotext annotates ticks list[float] (invariant): ints are ticks too
            plt.ylim(low - 0.2, high + 0.2)
        self._draw_axes(plt, shown, options)


COMPARE_COLORS = ("cyan", "orange", "green", "magenta", "yellow", "red", "blue", "white")


class CompareLossPlot(MetricPlot):
    """The loss of several runs, one colour each, labelled with the run's id."""

    def show(self, curves: Mapping[str, Points], *, log_scale: bool, title: str) -> None:
        if log_scale:
            curves = {label: _positive(points) for label, points in curves.items()}
        self._show({"log_scale": log_scale, "title": title}, **curves)

    def draw(self, plt: Plot, shown: dict[str, Points | None], options: dict[str, Any]) -> None:
        for index, (label, points) in enumerate(shown.items()):
            if points and points[0]:
                color = COMPARE_COLORS[index % len(COMPARE_COLORS)]
                plt.plot(points[0], points[1], marker=LINE, color=color, label=label)
        plt.yscale("log" if options.get("log_scale") else "linear")
        self._draw_axes(plt, shown, options)
