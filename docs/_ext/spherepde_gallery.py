"""The command-line arguments each gallery script runs with while the documentation is built."""

from __future__ import annotations


class GalleryArgs:
    """``sphinx_gallery_conf["reset_argv"]``: ``--size gallery`` for every script, and one Dask
    worker for the sweep (a class, not a lambda, so that Sphinx can cache the configuration)."""

    def __call__(self, gallery_conf, script_vars) -> list[str]:
        args = ["--size", "gallery"]
        if script_vars["src_file"].endswith("g2_vs_H_density.py"):
            args += ["--workers", "1"]
        return args

    def __repr__(self) -> str:
        return "GalleryArgs()"
