"""The book pipeline: chapter sources -> notebooks -> executed notebooks -> pages -> site.

One module per stage, in the order the data flows::

    sources.py    chapters/LANG/NAME.md          -> Chapter (cells, framework tags)
    notebooks.py  Chapter                        -> one unexecuted notebook per framework
    execute.py    one run per framework          -> notebooks/LANG/FRAMEWORK/NAME.ipynb,
                                                    every language filled from that run
    pages.py      the executed notebooks of NAME -> one page notebook with framework tabs
    site.py       the pages of each language     -> _build/site/{en,zh} (Jupyter Book)

``config.py`` holds the paths and settings every stage shares, ``runinfo.py`` the
machine record of a run and the note each page shows, ``plain.py`` the notebooks' MyST
prose rewritten as plain Jupyter markdown (what Colab and Studio Lab render; the pages keep
the MyST of the sources), ``validate.py`` the GPU validation (execute, nbval, benchmarks).
``tools/book.py`` is the command line.
"""
