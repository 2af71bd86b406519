"""hangscope: which rank is holding everyone up, and why."""

__version__ = "0.1.0"
