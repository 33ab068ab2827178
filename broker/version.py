"""The broker's version, in a leaf module: the code inside the package imports it from here, so
that nothing inside depends on the package's front door (``broker/__init__.py``, which imports the
embedded broker and with it everything)."""

__version__ = "0.1.0"
