"""MkDocs hooks (mkdocs.yml ``hooks:``): the manual works opened from disk, and
the ``mkdocs`` console script finds the ``mindexp`` package.

- From ``file://`` Chromium and Firefox refuse a page's ``fetch`` and its
  ``new Worker(file)``, which Material's search uses. Material reads the index
  from ``search/search_index.js`` when the page is a file (written here, as its
  ``offline`` plugin would, which also adds a shim from unpkg.com: nothing
  may load from another site), and ``file-worker.js`` (written here, loaded
  first through ``extra.polyfills``) holds the search worker's source and
  starts it from a ``blob:`` URL, which a file page may.
- The ``mkdocs`` console script runs with its own folder (``.venv/bin``) first
  on ``sys.path``, and that folder holds the ``mindexp`` console script: griffe
  (mkdocstrings) takes that file for the package and finds no ``mindexp.api``.
  ``python -m mkdocs`` has the working folder there instead. The folder is
  dropped from ``sys.path`` (mkdocs is imported already).
"""
import glob
import json
import os
import sys

WORKER_SHIM = "assets/javascripts/file-worker.js"  # mkdocs.yml extra.polyfills names it


def on_startup(command, dirty):
    """Drop from sys.path a folder whose ``mindexp`` is a file (a console script),
    before mkdocstrings' handler reads sys.path (in its on_config)."""
    sys.path[:] = [p for p in sys.path if not os.path.isfile(os.path.join(p or ".", "mindexp"))]


def on_post_build(config):
    """Write search/search_index.js and the worker shim into the built site."""
    site = config["site_dir"]
    index = os.path.join(site, "search", "search_index.json")
    if os.path.isfile(index):
        with open(index, encoding="utf-8") as f:
            data = f.read()
        with open(os.path.join(site, "search", "search_index.js"), "w", encoding="utf-8") as f:
            f.write(f"var __index = {data}")
    workers = glob.glob(os.path.join(site, "assets", "javascripts", "workers", "search.*.min.js"))
    source = ""
    if workers:
        with open(workers[0], encoding="utf-8") as f:
            source = f.read()
    with open(os.path.join(os.path.dirname(__file__), "javascripts", "file-worker.js"),
              encoding="utf-8") as f:
        shim = f.read()
    target = os.path.join(site, *WORKER_SHIM.split("/"))
    os.makedirs(os.path.dirname(target), exist_ok=True)
    with open(target, "w", encoding="utf-8") as f:
        f.write(f"var __mindexpSearchWorker = {json.dumps(source)};\n{shim}")
