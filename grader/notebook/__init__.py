"""The widgets of `kata play --web` inline in Jupyter: `from grader.notebook import play; play("speculate")`.

The same page from the same files (grader.learn.web.page), with the run made here and embedded, so no
server is asked: kata code runs in its jail as `kata play` runs it, the learner's once its tasks pass.
Needs IPython (pip install -e '.[notebook]').
"""

from __future__ import annotations

import html

from grader.learn import web, web_runs

FRAME_HEIGHTS = {"cache": 980, "quantize": 760, "speculate": 1200, "stack": 960}  # pixels: each widget's page


def widget_html(widget: str, target: str = "katas", **options) -> str:
    """The HTML that `play` displays: widget's page, its run on target's code with options (the widget's
    query parameters, e.g. n=24, k=3) embedded, in an iframe of its own so that its style and script stay
    apart from the notebook's. A ValueError names a widget or option not allowed, and what is."""
    if widget not in web_runs.WIDGETS:
        raise ValueError(f"there is no widget {widget!r}; there are {', '.join(web_runs.WIDGETS)}")
    opts = web_runs.options(widget, {name: str(value) for name, value in options.items()})
    page = web.page(widget, run=web_runs.run(widget, opts, target), autoplay=True)
    return (
        f'<div class="kata-play" data-widget="{widget}"><iframe title="{html.escape(web.TITLES[widget])}" '
        f'style="width:100%;height:{FRAME_HEIGHTS[widget]}px;border:0" srcdoc="{html.escape(page, quote=True)}">'
        "</iframe></div>"
    )


def play(widget: str, target: str = "katas", **options) -> None:
    """Show widget ('cache', 'quantize', 'speculate' or 'stack') in the notebook, played on target's code
    ('katas': yours, once its tasks pass; 'reference'; or a folder of kata modules) with options (see
    widget_html). Needs IPython: pip install -e '.[notebook]'."""
    try:
        from IPython.display import HTML, display
    except ImportError:
        raise ImportError("grader.notebook needs IPython: pip install -e '.[notebook]'") from None
    display(HTML(widget_html(widget, target, **options)))
