"""gbatch: a batch scheduler for labs with a handful of multi-GPU servers."""

__version__ = "0.1.0"
