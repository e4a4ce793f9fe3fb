"""structnmt: structure-aware attention for neural machine translation."""

__version__ = "0.1.0"
