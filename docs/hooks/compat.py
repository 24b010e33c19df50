"""MkDocs hook: mkdocstrings 0.30 with pymdown-extensions 13.

pymdown-extensions 13 made the Markdown instance the first argument of
``pymdownx.highlight.Highlight``; mkdocstrings 0.30's ``Highlighter`` (a
subclass) still calls it without, so every API page fails with
``Highlight.__init__() missing 1 required positional argument: 'md'``. This
hook passes it along, and does nothing with versions that agree.
"""
import inspect

from pymdownx.highlight import Highlight


def _patch_highlighter():
    try:
        from mkdocstrings._internal.handlers import rendering
    except ImportError:  # another mkdocstrings layout: not the version this is for
        return
    if "md" not in inspect.signature(Highlight.__init__).parameters:
        return
    own_init = rendering.Highlighter.__init__
    if getattr(own_init, "_passes_md", False):
        return

    def init(self, md):
        real = Highlight.__init__
        Highlight.__init__ = lambda obj, **config: real(obj, md, **config)
        try:
            own_init(self, md)
        finally:
            Highlight.__init__ = real

    init._passes_md = True
    rendering.Highlighter.__init__ = init


_patch_highlighter()
