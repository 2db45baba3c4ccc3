"""Helpers shared by the chapters of *Computational Performance, hands-on*.

Import one framework's half, as with d2l::

    from d2l_ext import torch as d2l   # PyTorch
    from d2l_ext import mxnet as d2l   # MXNet 1.9.1 (Python <= 3.11, numpy < 1.24)

Importing this package imports neither framework.

Each half also exports ``check_exercise``, the chapters' exercise checks
(:mod:`d2l_ext.exercises`), so that no page shows an answer::

    print(d2l.check_exercise("memory", 2, best_segments))
"""

__version__ = "0.1.0"
